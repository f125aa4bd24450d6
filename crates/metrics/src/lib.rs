//! `sbx-metrics`: the node's Prometheus metrics, one registry of typed families.
//!
//! One sbxd process is one node, so the registry is process-wide ([`global`]):
//! the runsc wrapper, the agent client, the egress broker, the store and the
//! HTTP layer record into it without threading a handle through every
//! constructor. Labels are bounded words chosen by sbx (route templates,
//! subcommands, reasons, outcomes, shapes); never tenant or sandbox ids, host
//! names or raw paths, so the number of series stays fixed whatever the guests
//! and clients do. [`Metrics::encode`] renders the OpenMetrics text format
//! through `prometheus-client`, the Prometheus project's Rust client.

use prometheus_client::encoding::{text, EncodeLabelSet};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::metrics::info::Info;
use prometheus_client::registry::{Registry, Unit};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets, seconds: 1 ms to about 33 s, doubling.
fn latency() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 16))
}

/// Long-operation buckets, seconds: 10 ms to about 5.5 minutes, doubling.
fn long_latency() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 16))
}

/// Size buckets, bytes: 1 MiB to 32 GiB, doubling.
fn sizes() -> Histogram {
    Histogram::new(exponential_buckets(1024.0 * 1024.0, 2.0, 16))
}

type Hist = Family<Vec<(&'static str, String)>, Histogram, fn() -> Histogram>;
type Count = Family<Vec<(&'static str, String)>, Counter>;

/// An HTTP request's labels: route template, method, status.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The route template (`/v2/sandboxes/{id}`), or `unmatched`.
    pub route: String,
    /// The request method.
    pub method: String,
    /// The response status code.
    pub status: u16,
}

/// A request's latency labels: route template and method.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    /// The route template, or `unmatched`.
    pub route: String,
    /// The request method.
    pub method: String,
}

/// Sandboxes of this node by state and shape.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SandboxLabels {
    /// Lowercase status (`running`, `paused`, ...).
    pub state: String,
    /// `VCPUxMIB`, e.g. `1x1024`.
    pub shape: String,
}

/// Every metric family sbxd exposes.
pub struct Metrics {
    registry: Mutex<Registry>,
    build_info: OnceLock<()>,
    http_requests: Family<HttpLabels, Counter>,
    http_duration: Family<RouteLabels, Histogram, fn() -> Histogram>,
    sandboxes: Family<SandboxLabels, Gauge>,
    warm_pool_ready: Family<Vec<(&'static str, String)>, Gauge>,
    warm_pool_claims: Count,
    asleep: Gauge,
    admission_refusals: Count,
    runsc_duration: Hist,
    runsc_failures: Count,
    agent_duration: Hist,
    agent_failures: Count,
    snapshot_bytes: Histogram,
    snapshot_duration: Hist,
    store_duration: Hist,
    store_errors: Count,
    egress: Count,
    connect_runs: Count,
    connect_duration: Hist,
    connect_records: Counter,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with every family registered (tests make their own; sbxd uses [`global`]).
    pub fn new() -> Self {
        let mut r = Registry::with_prefix("sbx");
        let m = Metrics {
            registry: Mutex::new(Registry::default()),
            build_info: OnceLock::new(),
            http_requests: Family::default(),
            http_duration: Family::new_with_constructor(latency),
            sandboxes: Family::default(),
            warm_pool_ready: Family::default(),
            warm_pool_claims: Family::default(),
            asleep: Gauge::default(),
            admission_refusals: Family::default(),
            runsc_duration: Family::new_with_constructor(latency),
            runsc_failures: Family::default(),
            agent_duration: Family::new_with_constructor(latency),
            agent_failures: Family::default(),
            snapshot_bytes: sizes(),
            snapshot_duration: Family::new_with_constructor(long_latency),
            store_duration: Family::new_with_constructor(latency),
            store_errors: Family::default(),
            egress: Family::default(),
            connect_runs: Family::default(),
            connect_duration: Family::new_with_constructor(long_latency),
            connect_records: Counter::default(),
        };
        let secs = Unit::Seconds;
        r.register(
            "http_requests",
            "HTTP requests answered, by route template, method and status",
            m.http_requests.clone(),
        );
        r.register_with_unit(
            "http_request_duration",
            "HTTP request latency until the response head, by route template and method",
            secs.clone(),
            m.http_duration.clone(),
        );
        r.register(
            "sandboxes",
            "Sandboxes of this node that hold capacity, by state and shape",
            m.sandboxes.clone(),
        );
        r.register(
            "warm_pool_ready",
            "Booted warm-pool members waiting for a create, by shape",
            m.warm_pool_ready.clone(),
        );
        r.register(
            "warm_pool_claims",
            "Creates of a shape that has a warm pool, by result (hit: a member was taken; miss: booted cold)",
            m.warm_pool_claims.clone(),
        );
        r.register(
            "sandboxes_asleep",
            "Sandboxes and warm-pool members of this node frozen while idle (no host CPU until the next request)",
            m.asleep.clone(),
        );
        r.register(
            "admission_refusals",
            "Sandbox starts refused by admission control, by reason (cpu, memory, disk; quota: a workspace quota)",
            m.admission_refusals.clone(),
        );
        r.register_with_unit(
            "runsc_command_duration",
            "runsc command latency, by subcommand",
            secs.clone(),
            m.runsc_duration.clone(),
        );
        r.register(
            "runsc_command_failures",
            "runsc commands that failed (could not run, timed out, or runsc itself exited non-zero), by subcommand",
            m.runsc_failures.clone(),
        );
        r.register_with_unit(
            "agent_request_duration",
            "Round trip of a request to a sandbox's agent until its final answer, by request kind",
            secs.clone(),
            m.agent_duration.clone(),
        );
        r.register(
            "agent_request_failures",
            "Agent requests that got no answer (timed out, connection closed), by request kind",
            m.agent_failures.clone(),
        );
        r.register_with_unit(
            "snapshot_size",
            "Size of the checkpoint of each READY snapshot",
            Unit::Bytes,
            m.snapshot_bytes.clone(),
        );
        r.register_with_unit(
            "snapshot_duration",
            "Snapshot capture time (checkpoint, verification, upload), by outcome",
            secs.clone(),
            m.snapshot_duration.clone(),
        );
        r.register_with_unit(
            "store_call_duration",
            "Sandbox store call latency, by call",
            secs.clone(),
            m.store_duration.clone(),
        );
        r.register(
            "store_call_errors",
            "Sandbox store calls that failed, by call",
            m.store_errors.clone(),
        );
        r.register(
            "egress_connections",
            "Guest egress connections and DNS lookups decided by the broker, by decision and reason",
            m.egress.clone(),
        );
        r.register(
            "connect_runs",
            "Connect runs finished on this node, by outcome (succeeded, or the failure category)",
            m.connect_runs.clone(),
        );
        r.register_with_unit(
            "connect_run_duration",
            "Connect run time on this node, attempts included, by outcome",
            secs,
            m.connect_duration.clone(),
        );
        r.register(
            "connect_records_committed",
            "Records committed by Connect sync runs on this node",
            m.connect_records.clone(),
        );
        *m.registry.lock().unwrap_or_else(|p| p.into_inner()) = r;
        m
    }

    /// Sets the build info metric (`sbx_build_info`) once; later calls change nothing.
    pub fn set_build_info(&self, version: &str, runsc_version: &str) {
        self.build_info.get_or_init(|| {
            let info = Info::new(vec![
                ("version".to_string(), version.to_string()),
                ("runsc_version".to_string(), runsc_version.to_string()),
            ]);
            self.registry
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .register("build", "sbxd build and the runsc it drives", info);
        });
    }

    /// The exposition in the OpenMetrics text format ([`CONTENT_TYPE`]).
    pub fn encode(&self) -> String {
        let mut out = String::new();
        let registry = self.registry.lock().unwrap_or_else(|p| p.into_inner());
        // Writing into a String cannot fail.
        let _ = text::encode(&mut out, &registry);
        out
    }

    /// One HTTP request answered.
    pub fn http_request(&self, route: &str, method: &str, status: u16, elapsed: Duration) {
        self.http_requests
            .get_or_create(&HttpLabels {
                route: route.to_string(),
                method: method.to_string(),
                status,
            })
            .inc();
        self.http_duration
            .get_or_create(&RouteLabels {
                route: route.to_string(),
                method: method.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    /// Replaces the sandbox gauge with `counts` (state, shape, count), read at scrape time.
    pub fn set_sandboxes(&self, counts: impl IntoIterator<Item = (String, String, i64)>) {
        self.sandboxes.clear();
        for (state, shape, n) in counts {
            self.sandboxes
                .get_or_create(&SandboxLabels { state, shape })
                .set(n);
        }
    }

    /// Replaces the warm-pool gauge with `ready` (shape, members), read at scrape time.
    pub fn set_warm_pool(&self, ready: impl IntoIterator<Item = (String, i64)>) {
        self.warm_pool_ready.clear();
        for (shape, n) in ready {
            self.warm_pool_ready
                .get_or_create(&vec![("shape", shape)])
                .set(n);
        }
    }

    /// Sets the number of sandboxes frozen while idle, read at scrape time.
    pub fn set_asleep(&self, n: i64) {
        self.asleep.set(n);
    }

    /// A create of a pooled shape took a member (`hit`) or booted cold.
    pub fn warm_pool_claim(&self, hit: bool) {
        let result = if hit { "hit" } else { "miss" };
        self.warm_pool_claims
            .get_or_create(&vec![("result", result.to_string())])
            .inc();
    }

    /// Admission refused a start for `reason` (`cpu`, `memory`, `disk`, `quota`).
    pub fn admission_refused(&self, reason: &'static str) {
        self.admission_refusals
            .get_or_create(&vec![("reason", reason.to_string())])
            .inc();
    }

    /// One runsc command ran for `elapsed`; `failed` if runsc itself failed.
    pub fn runsc_command(&self, subcommand: &'static str, elapsed: Duration, failed: bool) {
        let labels = vec![("subcommand", subcommand.to_string())];
        self.runsc_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if failed {
            self.runsc_failures.get_or_create(&labels).inc();
        }
    }

    /// One agent request of `kind` got its final answer after `elapsed`, or none (`answered` false).
    pub fn agent_request(&self, kind: &'static str, elapsed: Duration, answered: bool) {
        let labels = vec![("kind", kind.to_string())];
        self.agent_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if !answered {
            self.agent_failures.get_or_create(&labels).inc();
        }
    }

    /// One snapshot capture ended after `elapsed`; `bytes` is its size when READY.
    pub fn snapshot(&self, bytes: Option<u64>, elapsed: Duration) {
        let outcome = if bytes.is_some() { "ready" } else { "failed" };
        self.snapshot_duration
            .get_or_create(&vec![("outcome", outcome.to_string())])
            .observe(elapsed.as_secs_f64());
        if let Some(b) = bytes {
            self.snapshot_bytes.observe(b as f64);
        }
    }

    /// One store call `op` took `elapsed`; `failed` if it returned an error.
    pub fn store_call(&self, op: &'static str, elapsed: Duration, failed: bool) {
        let labels = vec![("call", op.to_string())];
        self.store_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        if failed {
            self.store_errors.get_or_create(&labels).inc();
        }
    }

    /// The broker allowed a guest connection.
    pub fn egress_allowed(&self) {
        self.egress_decision("allowed", "allowed");
    }

    /// The broker denied a guest connection or lookup for `reason` (a fixed policy word).
    pub fn egress_denied(&self, reason: &'static str) {
        self.egress_decision("denied", reason);
    }

    /// An allowed connection that could not be made (resolution or dial failed, limits).
    pub fn egress_failed(&self) {
        self.egress_decision("failed", "failed");
    }

    fn egress_decision(&self, decision: &'static str, reason: &'static str) {
        self.egress
            .get_or_create(&vec![
                ("decision", decision.to_string()),
                ("reason", reason.to_string()),
            ])
            .inc();
    }

    /// One Connect run ended with `outcome` after `elapsed`, committing `records`.
    pub fn connect_run(&self, outcome: &'static str, elapsed: Duration, records: u64) {
        let labels = vec![("outcome", outcome.to_string())];
        self.connect_runs.get_or_create(&labels).inc();
        self.connect_duration
            .get_or_create(&labels)
            .observe(elapsed.as_secs_f64());
        self.connect_records.inc_by(records);
    }
}

/// The process's metrics (one sbxd process is one node).
pub fn global() -> &'static Metrics {
    static METRICS: OnceLock<Metrics> = OnceLock::new();
    METRICS.get_or_init(Metrics::new)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The value of the sample line starting with `prefix`.
    fn sample(text: &str, prefix: &str) -> Option<f64> {
        text.lines()
            .find(|l| l.starts_with(prefix))
            .and_then(|l| l.rsplit(' ').next())
            .and_then(|v| v.parse().ok())
    }

    #[test]
    fn families_render_with_their_labels() {
        let m = Metrics::new();
        m.http_request("/v2/sandboxes/{id}", "GET", 404, Duration::from_millis(3));
        m.http_request("/v2/sandboxes/{id}", "GET", 404, Duration::from_millis(5));
        m.runsc_command("exec", Duration::from_millis(20), true);
        m.egress_denied("private-address");
        m.connect_run("succeeded", Duration::from_secs(2), 7);
        m.set_build_info("0.1.0", "runsc version release-20250101.0");
        m.set_build_info("ignored", "ignored");
        let text = m.encode();
        assert!(text.ends_with("# EOF\n"), "{text}");
        assert_eq!(
            sample(
                &text,
                r#"sbx_http_requests_total{route="/v2/sandboxes/{id}",method="GET",status="404"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"sbx_http_request_duration_seconds_count{route="/v2/sandboxes/{id}",method="GET"}"#
            ),
            Some(2.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"sbx_runsc_command_failures_total{subcommand="exec"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"sbx_egress_connections_total{decision="denied",reason="private-address"}"#
            ),
            Some(1.0)
        );
        assert_eq!(
            sample(&text, "sbx_connect_records_committed_total"),
            Some(7.0)
        );
        assert_eq!(
            sample(
                &text,
                r#"sbx_build_info{version="0.1.0",runsc_version="runsc version release-20250101.0"}"#
            ),
            Some(1.0)
        );
        assert!(!text.contains("ignored"));
    }

    #[test]
    fn scrape_time_gauges_are_replaced_not_added() {
        let m = Metrics::new();
        m.set_sandboxes([("running".into(), "1x1024".into(), 3)]);
        m.set_sandboxes([("paused".into(), "1x1024".into(), 1)]);
        let text = m.encode();
        assert_eq!(
            sample(&text, r#"sbx_sandboxes{state="paused",shape="1x1024"}"#),
            Some(1.0)
        );
        // A state with no sandbox left disappears instead of keeping its last count.
        assert!(!text.contains(r#"state="running""#), "{text}");
        m.set_warm_pool([("1x1024".into(), 2)]);
        m.set_asleep(3);
        assert_eq!(
            sample(&m.encode(), r#"sbx_warm_pool_ready{shape="1x1024"}"#),
            Some(2.0)
        );
        m.set_asleep(0);
        assert_eq!(sample(&m.encode(), "sbx_sandboxes_asleep"), Some(0.0));
    }
}
