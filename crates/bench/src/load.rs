//! Scenarios with many sandboxes at once: `exec-load` (S sandboxes × C
//! concurrent `true` execs per round) and `density` (N idle sandboxes held
//! at once: host memory per sandbox from PSS, and whether every one still
//! answers an exec). Each side runs on its own (not interleaved) so the two
//! sides never hold their sandboxes at the same time; everything is
//! destroyed at the end of the scenario, and by the final cleanup when a
//! scenario is cut short.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use futures::stream::{self, StreamExt};

use crate::api::Api;
use crate::stats::{Failure, Kind, Row, Side, Target, Unsupported};
use crate::{stats_failure, sys, Bench};

/// The `exec-load` and `density` knobs (from the command line).
#[derive(Debug, Clone)]
pub struct LoadOpts {
    /// exec-load: sandboxes per side.
    pub sandboxes: usize,
    /// exec-load: concurrent execs per sandbox.
    pub concurrency: usize,
    /// exec-load: timed rounds.
    pub rounds: usize,
    /// density: sandboxes held at once per side.
    pub density: usize,
    /// Creates/destroys in flight at once while filling/emptying.
    pub parallel: usize,
    /// density: idle time before the memory is read.
    pub settle: Duration,
    /// Upper bound on one exec / create / destroy in these scenarios.
    pub op_timeout: Duration,
}

/// `f` with a deadline.
async fn bounded<T>(limit: Duration, what: &str, f: impl Future<Output = Result<T>>) -> Result<T> {
    match tokio::time::timeout(limit, f).await {
        Ok(r) => r,
        Err(_) => Err(anyhow!("{what}: no answer within {limit:?}")),
    }
}

/// Runs `f` once per item, `parallel` at a time; results in item order.
async fn each<I, T, F, Fut>(items: Vec<I>, parallel: usize, f: F) -> Vec<T>
where
    F: Fn(usize, I) -> Fut,
    Fut: Future<Output = T>,
{
    let mut out: Vec<(usize, T)> = stream::iter(items.into_iter().enumerate())
        .map(|(i, it)| {
            let fut = f(i, it);
            async move { (i, fut.await) }
        })
        .buffer_unordered(parallel.max(1))
        .collect()
        .await;
    out.sort_by_key(|(i, _)| *i);
    out.into_iter().map(|(_, t)| t).collect()
}

/// Whether `e` is sbxd's admission refusing a create (503 compute_unavailable).
fn is_admission_refusal(e: &anyhow::Error) -> bool {
    e.downcast_ref::<Unsupported>()
        .is_some_and(|u| u.0.starts_with("503"))
}

/// The memory of the processes of each sandbox of one side.
#[derive(Debug, Default)]
struct Footprint {
    /// PSS KiB per sandbox (in key order).
    per_sandbox_kib: Vec<u64>,
    /// Processes counted.
    procs: usize,
    /// Processes whose smaps_rollup could not be read (exited, or denied).
    unreadable: usize,
    /// PSS KiB summed by process role (boot/gofer/exec/other).
    by_role_kib: BTreeMap<&'static str, u64>,
}

fn role(cmdline: &str) -> &'static str {
    let words: Vec<&str> = cmdline.split_whitespace().collect();
    if words.contains(&"boot") {
        "sandbox (runsc boot)"
    } else if words.contains(&"gofer") {
        "gofer"
    } else if words.contains(&"exec") {
        "runsc exec (agent relay)"
    } else if words.is_empty() {
        "sandbox children (systrap stubs)"
    } else {
        "other"
    }
}

/// PSS of every host process belonging to each key (a key appears in the
/// process's command line: container id, bundle path), and their descendants.
fn footprint(keys: &[String]) -> Footprint {
    let procs = sys::processes();
    let owners = sys::owners(&procs, keys);
    let mut f = Footprint {
        per_sandbox_kib: vec![0; keys.len()],
        ..Footprint::default()
    };
    let me = std::process::id();
    for p in &procs {
        let Some(&k) = owners.get(&p.pid) else {
            continue;
        };
        if p.pid == me {
            continue;
        }
        f.procs += 1;
        match sys::pss_kib(p.pid) {
            Some(kib) => {
                f.per_sandbox_kib[k] += kib;
                *f.by_role_kib.entry(role(&p.cmdline)).or_default() += kib;
            }
            None => f.unreadable += 1,
        }
    }
    f
}

/// utime+stime (clock ticks) of every host process belonging to `keys`,
/// and of `daemon` (sbxd) when given.
fn owned_cpu_ticks(keys: &[String], daemon: Option<u32>) -> (u64, u64) {
    let procs = sys::processes();
    let owners = sys::owners(&procs, keys);
    let own = owners
        .keys()
        .filter_map(|pid| sys::stat(*pid))
        .map(|s| s.utime + s.stime)
        .sum();
    let d = daemon
        .and_then(sys::stat)
        .map(|s| s.utime + s.stime)
        .unwrap_or(0);
    (own, d)
}

/// "x % of a core per sandbox ..." for CPU tick counts `a` → `b` over `secs`.
fn idle_cpu_text(a: (u64, u64), b: (u64, u64), n: usize, secs: f64, daemon: bool) -> String {
    let pct =
        |x: u64, y: u64| y.saturating_sub(x) as f64 / sys::clock_ticks() / secs.max(1e-3) * 100.0;
    let own = pct(a.0, b.0);
    let mut t = format!(
        "{:.2} % of a core per sandbox ({own:.0} % for all {n})",
        own / n.max(1) as f64
    );
    if daemon {
        t.push_str(&format!(", sbxd {:.1} %", pct(a.1, b.1)));
    }
    t
}

fn fmt_roles(f: &Footprint, n: usize) -> String {
    f.by_role_kib
        .iter()
        .map(|(r, k)| format!("{r} {:.1} MiB", *k as f64 / 1024.0 / n.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

/// Exec round trips (ms) and the first error.
#[derive(Default)]
struct Round {
    ms: Vec<f64>,
    errors: usize,
    first_error: Option<anyhow::Error>,
}

impl Round {
    fn add(&mut self, r: Result<Duration>) {
        match r {
            Ok(d) => self.ms.push(d.as_secs_f64() * 1000.0),
            Err(e) => {
                self.errors += 1;
                if self.first_error.is_none() {
                    self.first_error = Some(e);
                }
            }
        }
    }
}

async fn timed_exec(limit: Duration, f: impl Future<Output = Result<()>>) -> Result<Duration> {
    let t = Instant::now();
    bounded(limit, "exec", f).await?;
    Ok(t.elapsed())
}

/// `rounds` rounds of `c` concurrent `exec`s on each of `ids`; samples after
/// the `warm` first rounds go to `side`. Stops at the first round with a failure.
async fn exec_rounds<'a, F, Fut>(
    label: &str,
    ids: &'a [String],
    c: usize,
    rounds: usize,
    warm: usize,
    side: &mut Side,
    exec: F,
) where
    F: Fn(&'a String) -> Fut,
    Fut: Future<Output = Result<Duration>>,
{
    let total = ids.len() * c;
    for r in 0..rounds {
        eprintln!("[exec-load] {label} round {}/{rounds}", r + 1);
        let mut round = Round::default();
        let futs = ids.iter().flat_map(|id| (0..c).map(move |_| id)).map(&exec);
        for x in futures::future::join_all(futs).await {
            round.add(x);
        }
        if r >= warm {
            side.ms.extend(round.ms);
        }
        if let Some(e) = round.first_error {
            eprintln!(
                "  ! {} of {total} {label} execs failed: {e:#}",
                round.errors
            );
            side.fail(&e.context(format!("{} of {total} execs failed", round.errors)));
            break;
        }
    }
}

impl Bench {
    fn density_api(&self) -> &Api {
        self.density_api.as_ref().unwrap_or(&self.api)
    }

    /// Creates `n` sbx sandboxes, `parallel` at a time.
    async fn fill_sbx(&self, api: &Api, what: &str, n: usize) -> (Vec<String>, Vec<anyhow::Error>) {
        self.fill(what, "sbx", n, |i| {
            let body = self.create_body(self.sbx_name(what, i));
            bounded(self.load.op_timeout, "create", api.create(body))
        })
        .await
    }

    /// Creates `n` raw containers with PID 1 `args`, `parallel` at a time.
    async fn fill_raw(
        &self,
        what: &str,
        n: usize,
        args: &[&str],
    ) -> (Vec<String>, Vec<anyhow::Error>) {
        self.fill(what, "raw", n, |_| {
            bounded(
                self.load.op_timeout,
                "runsc run",
                self.raw.create_with(args),
            )
        })
        .await
    }

    /// Runs `create(i)` for i in 0..n, `parallel` at a time, stopping new
    /// creates after the first failure; returns the ids and the errors.
    async fn fill<F, Fut>(
        &self,
        what: &str,
        side: &str,
        n: usize,
        create: F,
    ) -> (Vec<String>, Vec<anyhow::Error>)
    where
        F: Fn(usize) -> Fut,
        Fut: Future<Output = Result<String>>,
    {
        let stop = AtomicBool::new(false);
        let done = AtomicUsize::new(0);
        let results = each((0..n).collect(), self.load.parallel, |_, i| {
            let (stop, done) = (&stop, &done);
            let create = &create;
            async move {
                if stop.load(Ordering::Relaxed) {
                    return None;
                }
                let r = create(i).await;
                if r.is_err() {
                    stop.store(true, Ordering::Relaxed);
                }
                let k = done.fetch_add(1, Ordering::Relaxed) + 1;
                if k % 10 == 0 || k == n {
                    eprintln!("  [{what}] {side} {k}/{n} created");
                }
                Some(r)
            }
        })
        .await;
        let (mut ids, mut errs) = (Vec::new(), Vec::new());
        for r in results.into_iter().flatten() {
            match r {
                Ok(id) => ids.push(id),
                Err(e) => errs.push(e),
            }
        }
        (ids, errs)
    }

    async fn drain_sbx(&self, api: &Api, ids: &[String]) {
        let limit = self.load.op_timeout;
        let rs = each(ids.to_vec(), self.load.parallel, |_, id| async move {
            let r = bounded(limit, "destroy", api.destroy(&id)).await;
            (id, r)
        })
        .await;
        for (id, r) in rs {
            if let Err(e) = r {
                eprintln!("  ! destroying {id}: {e:#} (retried by the final cleanup)");
            }
        }
    }

    async fn drain_raw(&self, cids: &[String]) {
        let limit = self.load.op_timeout;
        let rs = each(cids.to_vec(), self.load.parallel, |_, cid| async move {
            let r = bounded(limit, "runsc delete", self.raw.destroy(&cid)).await;
            (cid, r)
        })
        .await;
        for (cid, r) in rs {
            if let Err(e) = r {
                eprintln!("  ! deleting {cid}: {e:#} (retried by the final cleanup)");
            }
        }
    }

    /// `exec-load`: S sandboxes × C concurrent `true` per round, per side.
    pub(crate) async fn exec_load(&mut self) {
        let o = self.load.clone();
        let (s, c) = (o.sandboxes.max(1), o.concurrency.max(1));
        let rounds = self.warm + o.rounds.max(1);
        let mut row = Row::new("exec-load", Kind::Latency, Target::P99Below(20.0));
        eprintln!("[exec-load] {s} sbx sandboxes");
        let (ids, errs) = self.fill_sbx(&self.api, "load", s).await;
        if let Some(e) = errs.into_iter().next() {
            eprintln!("  ! exec-load sbx create: {e:#}");
            row.sbx.fail(&e);
        }
        if row.sbx.active() {
            let api = &self.api;
            exec_rounds("sbx", &ids, c, rounds, self.warm, &mut row.sbx, |id| {
                timed_exec(o.op_timeout, api.exec_ok(id, &["true"]))
            })
            .await;
        }
        self.drain_sbx(&self.api, &ids).await;

        eprintln!("[exec-load] {s} raw containers");
        let (cids, errs) = self
            .fill_raw("load", s, &[sbx_agent_proto::AGENT_BINARY_PATH, "init"])
            .await;
        if let Some(e) = errs.into_iter().next() {
            eprintln!("  ! exec-load raw create: {e:#}");
            row.raw.fail(&e);
        }
        if row.raw.active() {
            let raw = &self.raw;
            exec_rounds("raw", &cids, c, rounds, self.warm, &mut row.raw, |cid| {
                timed_exec(o.op_timeout, raw.exec_ok(cid, &["true"]))
            })
            .await;
        }
        self.drain_raw(&cids).await;
        self.notes.push(format!(
            "exec-load: {s} sandboxes × {c} concurrent `true` execs each ({} in flight at once), \
             {} timed rounds after {} warm-up, sbx side first then raw (never both at once); each \
             sample is one exec's round trip ({} per side). sbx = POST .../exec `[\"true\"]`; raw = \
             `runsc exec <cid> true` on {s} containers like the `create` ones (every raw exec is a \
             new runsc process, so 2 cores run {} Go processes at once).",
            s * c,
            o.rounds.max(1),
            self.warm,
            s * c * o.rounds.max(1),
            s * c
        ));
        self.put("exec-load", row);
    }

    /// `density`: N idle sandboxes at once per side; PSS per sandbox and
    /// one exec each.
    pub(crate) async fn density(&mut self) {
        let o = self.load.clone();
        let n = o.density.max(1);
        let mut mem = Row::new("density-mem", Kind::Mib, Target::MeanMibAtMost(40.0));
        let mut exec = Row::new("density-exec", Kind::Latency, Target::AllAnswer(n));
        let mut notes = Vec::new();
        let api = self.density_api();
        let pid = if self.density_api.is_some() {
            self.density_pid
        } else {
            self.sbxd_pid
        };
        let where_ = if self.density_api.is_some() {
            format!("a dedicated sbxd at {}", self.density_url)
        } else {
            "the same sbxd".to_string()
        };

        // --- sbx side.
        let before = pid.and_then(sys::pss_kib);
        eprintln!("[density] {n} sbx sandboxes on {where_}");
        let t = Instant::now();
        let (ids, errs) = self.fill_sbx(api, "density", n).await;
        let fill_s = t.elapsed().as_secs_f64();
        let refused = errs.iter().any(is_admission_refusal);
        if let Some(e) = errs.first() {
            eprintln!("  ! density sbx create #{}: {e:#}", ids.len() + 1);
            if refused {
                notes.push(format!(
                    "**density (sbx)**: sbxd admitted {} of {n} sandboxes, then refused with 503 \
                     compute_unavailable (admission control: memory is not overcommitted by \
                     default, so only ~22 × 1 GiB fit on this host). Start sbxd with \
                     `--memory-overcommit 8` (`./scripts/bench` starts its own for this \
                     scenario unless SBX_BENCH_DENSITY_SBXD=0), or point `--density-url` at one. \
                     The figures below are for the {} that were admitted.",
                    ids.len(),
                    ids.len()
                ));
            } else {
                let f = stats_failure(e);
                if let Failure::Error(msg) = f {
                    notes.push(format!(
                        "**density (sbx)**: create #{} failed ({msg}); figures are for the {} \
                         created.",
                        ids.len() + 1,
                        ids.len()
                    ));
                }
            }
        }
        if !ids.is_empty() {
            eprintln!(
                "[density] {} sbx sandboxes up; idle {:?}",
                ids.len(),
                o.settle
            );
            let c0 = owned_cpu_ticks(&ids, pid);
            let t = Instant::now();
            tokio::time::sleep(o.settle).await;
            let idle_cpu = idle_cpu_text(
                c0,
                owned_cpu_ticks(&ids, pid),
                ids.len(),
                t.elapsed().as_secs_f64(),
                pid.is_some(),
            );
            let fp = footprint(&ids);
            let after = pid.and_then(sys::pss_kib);
            let growth = match (before, after) {
                (Some(b), Some(a)) => a.saturating_sub(b),
                _ => 0,
            };
            let share = growth as f64 / ids.len() as f64;
            mem.sbx.ms = fp
                .per_sandbox_kib
                .iter()
                .map(|k| (*k as f64 + share) / 1024.0)
                .collect();
            let total: u64 = fp.per_sandbox_kib.iter().sum::<u64>() + growth;
            notes.push(format!(
                "density-mem (sbx): {} idle sandboxes on {where_} (filled in {fill_s:.1} s, then \
                 {:?} idle): {:.1} MiB per sandbox = ({:.0} MiB PSS of {} host processes + sbxd PSS \
                 growth {} → {}) / {}; by role per sandbox: {}{}. Cells are per-sandbox values \
                 (own processes + an equal share of sbxd's growth); the target is on the mean. \
                 Host CPU while idle: {idle_cpu}.",
                ids.len(),
                o.settle,
                total as f64 / 1024.0 / ids.len() as f64,
                fp.per_sandbox_kib.iter().sum::<u64>() as f64 / 1024.0,
                fp.procs,
                before.map(sys::mib).unwrap_or_else(|| "?".into()),
                after.map(sys::mib).unwrap_or_else(|| "? (no sbxd pid)".into()),
                ids.len(),
                fmt_roles(&fp, ids.len()),
                if fp.unreadable > 0 {
                    format!(" ({} processes unreadable)", fp.unreadable)
                } else {
                    String::new()
                },
            ));
            eprintln!("[density] one exec per sbx sandbox");
            let limit = o.op_timeout;
            let rs = each(ids.clone(), 10, |_, id| async move {
                timed_exec(limit, api.exec_ok(&id, &["true"])).await
            })
            .await;
            let mut round = Round::default();
            for r in rs {
                round.add(r);
            }
            exec.sbx.answered = Some((round.ms.len(), n));
            exec.sbx.ms = round.ms;
            if let Some(e) = round.first_error {
                notes.push(format!(
                    "**density-exec (sbx)**: {} sandboxes did not answer; first error: {}",
                    round.errors,
                    format!("{e:#}").chars().take(300).collect::<String>()
                ));
            }
        } else {
            let why = if refused {
                "admission refused; see notes"
            } else {
                "create failed; see notes"
            };
            mem.sbx = Side {
                failure: Some(Failure::NotAvailable(why.into())),
                ..Side::default()
            };
            exec.sbx = mem.sbx.clone();
            exec.sbx.answered = Some((0, n));
        }
        eprintln!("[density] destroying {} sbx sandboxes", ids.len());
        self.drain_sbx(api, &ids).await;

        // --- raw side: same rootfs and shape, PID 1 `sleep infinity`.
        eprintln!("[density] {n} raw containers");
        let t = Instant::now();
        let (cids, errs) = self.fill_raw("density", n, &["sleep", "infinity"]).await;
        let fill_s = t.elapsed().as_secs_f64();
        if let Some(e) = errs.first() {
            eprintln!("  ! density raw create #{}: {e:#}", cids.len() + 1);
            notes.push(format!(
                "**density (raw)**: `runsc run` #{} failed ({}); figures are for the {} created.",
                cids.len() + 1,
                format!("{e:#}").chars().take(300).collect::<String>(),
                cids.len()
            ));
        }
        if !cids.is_empty() {
            let c0 = owned_cpu_ticks(&cids, None);
            let t = Instant::now();
            tokio::time::sleep(o.settle).await;
            let idle_cpu = idle_cpu_text(
                c0,
                owned_cpu_ticks(&cids, None),
                cids.len(),
                t.elapsed().as_secs_f64(),
                false,
            );
            let fp = footprint(&cids);
            mem.raw.ms = fp
                .per_sandbox_kib
                .iter()
                .map(|k| *k as f64 / 1024.0)
                .collect();
            notes.push(format!(
                "density-mem (raw): {} `runsc run` containers (same rootfs, 1 vCPU / 1 GiB, PID 1 \
                 `sleep infinity`, filled in {fill_s:.1} s, then {:?} idle): {:.1} MiB per \
                 container ({} host processes); by role: {}{}. Host CPU while idle: {idle_cpu}.",
                cids.len(),
                o.settle,
                fp.per_sandbox_kib.iter().sum::<u64>() as f64 / 1024.0 / cids.len() as f64,
                fp.procs,
                fmt_roles(&fp, cids.len()),
                if fp.unreadable > 0 {
                    format!(" ({} processes unreadable)", fp.unreadable)
                } else {
                    String::new()
                },
            ));
            eprintln!("[density] one runsc exec per raw container");
            let limit = o.op_timeout;
            let raw = &self.raw;
            let rs = each(cids.clone(), 10, |_, cid| async move {
                timed_exec(limit, raw.exec_ok(&cid, &["true"])).await
            })
            .await;
            let mut round = Round::default();
            for r in rs {
                round.add(r);
            }
            exec.raw.answered = Some((round.ms.len(), n));
            exec.raw.ms = round.ms;
            if let Some(e) = round.first_error {
                notes.push(format!(
                    "**density-exec (raw)**: {} containers did not answer; first error: {}",
                    round.errors,
                    format!("{e:#}").chars().take(300).collect::<String>()
                ));
            }
        } else if let Some(e) = errs.first() {
            mem.raw.fail(e);
            exec.raw = mem.raw.clone();
        }
        eprintln!("[density] deleting {} raw containers", cids.len());
        self.drain_raw(&cids).await;

        notes.push(format!(
            "density: memory = PSS (`/proc/<pid>/smaps_rollup`) of every host process whose \
             command line names the sandbox (runsc sandbox, gofer, sbxd's `runsc exec` agent \
             relay) and their descendants, read after the sandboxes sat idle; creates run {} at \
             a time. density-exec = one `true` exec per sandbox (10 at a time) after the memory \
             read; `(a/n answered)` counts the answers.",
            o.parallel
        ));
        self.notes.extend(notes);
        self.put("density-mem", mem);
        self.put("density-exec", exec);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roles() {
        assert_eq!(
            role("runsc-sandbox --root=/r boot --bundle=/b sbx-1"),
            "sandbox (runsc boot)"
        );
        assert_eq!(role("runsc-gofer --root=/r gofer --bundle=/b"), "gofer");
        assert_eq!(
            role("runsc --root=/r exec sbx-1 /.sbx/bin/sbx-agent relay"),
            "runsc exec (agent relay)"
        );
        assert_eq!(role("something"), "other");
        assert_eq!(role(""), "sandbox children (systrap stubs)");
    }

    #[test]
    fn admission_refusal_is_recognised() {
        let e: anyhow::Error = Unsupported("503 compute_unavailable".into()).into();
        assert!(is_admission_refusal(&e));
        let e: anyhow::Error = Unsupported("501".into()).into();
        assert!(!is_admission_refusal(&e));
        assert!(!is_admission_refusal(&anyhow!("boom")));
    }

    #[tokio::test]
    async fn each_keeps_order_and_bounds() {
        let out = each((0..20u64).collect(), 3, |i, x| async move {
            tokio::time::sleep(Duration::from_millis((20 - x) % 5)).await;
            (i, x * 2)
        })
        .await;
        assert_eq!(out.len(), 20);
        for (k, (i, v)) in out.iter().enumerate() {
            assert_eq!(*i, k);
            assert_eq!(*v, k as u64 * 2);
        }
        let r: Result<()> = bounded(Duration::from_millis(10), "op", async {
            tokio::time::sleep(Duration::from_secs(5)).await;
            Ok(())
        })
        .await;
        assert!(r.unwrap_err().to_string().contains("no answer within"));
    }
}
