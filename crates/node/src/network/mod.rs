//! Egress networking: sandboxes run with `--network=none`; the agent's
//! in-sandbox proxies hand every connection to sbxd over the agent channel,
//! and the broker here resolves, applies the sandbox's policy, dials and relays.
//!
//! Nothing is created on the host per sandbox (no netns, veth or firewall
//! rules): set-up is one `net_serve` request, and there is nothing to clean up
//! after destroy, a crash or a daemon restart.

pub mod broker;
pub mod iana;
pub mod limits;
pub mod policy;
mod relay;
pub mod special;
#[cfg(test)]
mod test_agent;
pub mod tls;

use crate::runtime::AgentConn;
use limits::{GlobalLimits, SandboxLimits};
use policy::Cidr;
use sbx_api_types::{NetworkDenial, NetworkMode, NetworkPolicy, NetworkStatus};
use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Proxy variables given to sandboxes whose policy is not `none` (as the
/// lowest layer of the base environment: the user's variables override them).
pub fn proxy_env() -> BTreeMap<String, String> {
    let http = "http://127.0.0.1:3128";
    [
        ("HTTP_PROXY", http),
        ("HTTPS_PROXY", http),
        ("http_proxy", http),
        ("https_proxy", http),
        ("ALL_PROXY", "socks5h://127.0.0.1:1080"),
        ("all_proxy", "socks5h://127.0.0.1:1080"),
        ("NO_PROXY", "localhost,127.0.0.1,::1"),
        ("no_proxy", "localhost,127.0.0.1,::1"),
        ("NODE_USE_ENV_PROXY", "1"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

/// Most recent denials kept per sandbox.
const RECENT_DENIALS: usize = 16;
/// Denial log lines per sandbox per window.
const LOG_BURST: u32 = 10;
/// Characters of a refused host name kept in the recent denials.
const MAX_DENIAL_HOST: usize = 255;
/// Length of the log rate-limit window.
const LOG_WINDOW: Duration = Duration::from_secs(10);

/// Decision counters of one sandbox (in memory; they restart with sbxd).
#[derive(Default)]
pub struct SandboxStats {
    allowed: AtomicU64,
    denied: AtomicU64,
    failed: AtomicU64,
    recent: Mutex<VecDeque<NetworkDenial>>,
    log: Mutex<Option<(Instant, u32)>>,
    /// Caps on what the sandbox's guest can make the broker hold.
    limits: Arc<SandboxLimits>,
}

impl SandboxStats {
    fn allowed(&self) {
        sbx_metrics::global().egress_allowed();
        self.allowed.fetch_add(1, Ordering::Relaxed);
    }

    fn failed(&self) {
        sbx_metrics::global().egress_failed();
        self.failed.fetch_add(1, Ordering::Relaxed);
    }

    /// Counts and (rate-limited) logs a refusal.
    fn denied(&self, sandbox: Uuid, host: &str, port: u16, reason: &'static str) {
        // The reason is one of the policy's fixed words: a bounded label.
        sbx_metrics::global().egress_denied(reason);
        self.denied.fetch_add(1, Ordering::Relaxed);
        {
            let mut recent = self.recent.lock().unwrap_or_else(|p| p.into_inner());
            if recent.len() == RECENT_DENIALS {
                recent.pop_front();
            }
            recent.push_back(NetworkDenial {
                // Guest-chosen: kept to the length of a DNS name.
                host: host.chars().take(MAX_DENIAL_HOST).collect(),
                port,
                reason: reason.to_string(),
                at: sbx_api_types::format_time(chrono::Utc::now()),
            });
        }
        let mut log = self.log.lock().unwrap_or_else(|p| p.into_inner());
        let now = Instant::now();
        let (start, count) = log.get_or_insert((now, 0));
        if now.duration_since(*start) > LOG_WINDOW {
            if *count > LOG_BURST {
                tracing::warn!(sandbox = %sandbox, suppressed = *count - LOG_BURST, "network denials not logged");
            }
            *start = now;
            *count = 0;
        }
        *count += 1;
        if *count <= LOG_BURST {
            tracing::warn!(sandbox = %sandbox, %host, port, %reason, "network connection denied");
        }
    }
}

/// A sandbox's policy as its broker reads it: replaced by a network update and
/// read afresh by every new connection and lookup (a connection already open
/// keeps the decision it got when it was dialed).
#[derive(Debug)]
pub struct LivePolicy(std::sync::RwLock<Arc<NetworkPolicy>>);

impl LivePolicy {
    /// A policy cell holding `policy`.
    pub fn new(policy: NetworkPolicy) -> Arc<LivePolicy> {
        Arc::new(LivePolicy(std::sync::RwLock::new(Arc::new(policy))))
    }

    /// The policy in force now.
    pub fn current(&self) -> Arc<NetworkPolicy> {
        self.0.read().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Puts `policy` in force for what comes next.
    pub fn set(&self, policy: NetworkPolicy) {
        *self.0.write().unwrap_or_else(|p| p.into_inner()) = Arc::new(policy);
    }
}

/// Server-wide network settings and per-sandbox state.
pub struct Network {
    default_policy: NetworkPolicy,
    test_public: Vec<Cidr>,
    stats: Mutex<HashMap<Uuid, Arc<SandboxStats>>>,
    /// The policy cells of the sandboxes whose proxies are served.
    live: Mutex<HashMap<Uuid, Arc<LivePolicy>>>,
    /// Daemon-wide caps of the brokers (sockets, host lookups).
    global: Arc<GlobalLimits>,
}

impl Network {
    /// From the configuration; refuses unparsable CIDRs and an `allowlist` default.
    pub fn new(default_mode: NetworkMode, test_public: &[String]) -> Result<Network, String> {
        if default_mode == NetworkMode::Allowlist {
            return Err("--default-network cannot be allowlist".into());
        }
        let test_public = test_public
            .iter()
            .map(|c| Cidr::parse(c).ok_or_else(|| format!("not a CIDR: {c}")))
            .collect::<Result<_, _>>()?;
        Ok(Network {
            default_policy: NetworkPolicy::mode(default_mode),
            test_public,
            stats: Mutex::new(HashMap::new()),
            live: Mutex::new(HashMap::new()),
            global: Arc::default(),
        })
    }

    /// The policy of SDK-created sandboxes.
    pub fn default_policy(&self) -> &NetworkPolicy {
        &self.default_policy
    }

    fn stats(&self, id: Uuid) -> Arc<SandboxStats> {
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .clone()
    }

    /// Forgets a destroyed sandbox's counters and policy.
    pub fn forget(&self, id: Uuid) {
        self.stats
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
        self.live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&id);
    }

    /// The sandbox's policy cell, holding `policy` from now on.
    fn live_policy(&self, id: Uuid, policy: &NetworkPolicy) -> Arc<LivePolicy> {
        let mut live = self.live.lock().unwrap_or_else(|p| p.into_inner());
        let cell = live
            .entry(id)
            .or_insert_with(|| LivePolicy::new(policy.clone()));
        cell.set(policy.clone());
        cell.clone()
    }

    /// Puts `policy` in force for a running sandbox's new connections and
    /// lookups (network update). A sandbox created with `none` has no proxies
    /// served yet: they start now over `conn`.
    pub async fn update(self: &Arc<Self>, id: Uuid, policy: &NetworkPolicy, conn: &AgentConn) {
        let served = self
            .live
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned();
        match served {
            Some(cell) => cell.set(policy.clone()),
            None => self.serve(id, policy, conn).await,
        }
    }

    /// Policy and counters for `GET /v1/sandboxes/{id}`.
    pub fn status(&self, id: Uuid, policy: &NetworkPolicy) -> NetworkStatus {
        let s = self.stats(id);
        let recent = s
            .recent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .cloned()
            .collect();
        NetworkStatus {
            policy: policy.clone(),
            allowed: s.allowed.load(Ordering::Relaxed),
            denied: s.denied.load(Ordering::Relaxed),
            failed: s.failed.load(Ordering::Relaxed),
            recent_denials: recent,
        }
    }

    /// Starts carrying the sandbox's proxy connections over `conn` (nothing
    /// for `none`). Returns once the `net_serve` request is on the wire, so a
    /// command sent afterwards on the same connection finds the proxies up.
    pub async fn serve(self: &Arc<Self>, id: Uuid, policy: &NetworkPolicy, conn: &AgentConn) {
        if policy.mode == NetworkMode::None {
            return;
        }
        let stream = match conn.stream(sbx_agent_proto::Request::NetServe).await {
            Ok(s) => s,
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "cannot start the network service");
                return;
            }
        };
        let ctx = broker::Ctx::new(
            id,
            self.live_policy(id, policy),
            self.test_public.clone(),
            self.stats(id),
            conn.clone(),
            None,
            Arc::clone(&self.global),
        );
        tokio::spawn(broker::run(Arc::new(ctx), stream));
    }

    /// Starts the proxies of a Connect build sandbox under `policy` (an allowlist of the
    /// package registry); `trusted` are the registry's own addresses, allowed whatever
    /// their class (DESIGN.md: the configured registry host is reachable wherever it
    /// resolves, loopback and the host's own addresses aside).
    pub async fn serve_build(
        self: &Arc<Self>,
        id: Uuid,
        policy: &NetworkPolicy,
        trusted: &[std::net::IpAddr],
        conn: &AgentConn,
    ) -> Result<(), String> {
        let stream = conn
            .stream(sbx_agent_proto::Request::NetServe)
            .await
            .map_err(|e| format!("cannot start the build sandbox's proxies: {e}"))?;
        let mut test_public = self.test_public.clone();
        for ip in trusted {
            let prefix = if ip.is_ipv4() { 32 } else { 128 };
            test_public.push(Cidr { net: *ip, prefix });
        }
        let ctx = broker::Ctx::new(
            id,
            LivePolicy::new(policy.clone()),
            test_public,
            self.stats(id),
            conn.clone(),
            None,
            Arc::clone(&self.global),
        );
        tokio::spawn(broker::run(Arc::new(ctx), stream));
        Ok(())
    }

    /// Starts the proxies of a Connect job sandbox: its first `CONNECT
    /// sbx-job.internal:1` is handed over through the returned receiver (as the
    /// host end of an in-process pipe); every other destination, later channel
    /// connections and every DNS lookup are denied and counted. Returns once the
    /// `net_serve` request is on the wire.
    pub async fn serve_job(
        self: &Arc<Self>,
        id: Uuid,
        conn: &AgentConn,
    ) -> Result<tokio::sync::oneshot::Receiver<tokio::io::DuplexStream>, String> {
        let stream = conn
            .stream(sbx_agent_proto::Request::NetServe)
            .await
            .map_err(|e| format!("cannot start the job sandbox's proxies: {e}"))?;
        let (slot, channel) = broker::JobSlot::new();
        let ctx = broker::Ctx::new(
            id,
            LivePolicy::new(NetworkPolicy::mode(NetworkMode::None)),
            Vec::new(),
            self.stats(id),
            conn.clone(),
            Some(slot),
            Arc::clone(&self.global),
        );
        tokio::spawn(broker::run(Arc::new(ctx), stream));
        Ok(channel)
    }

    /// Denials counted for a sandbox so far (tests, job sandboxes' logs).
    pub fn denied_count(&self, id: Uuid) -> u64 {
        self.stats(id).denied.load(Ordering::Relaxed)
    }
}
