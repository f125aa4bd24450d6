//! `density-mem` and `density-exec`: N idle sandboxes per side, their memory, one exec each.

use std::collections::BTreeMap;
use std::time::Instant;

use super::{each, timed_exec, Round};
use crate::api::Api;
use crate::stats::{Failure, Kind, Row, Side, Target, Unsupported};
use crate::{stats_failure, sys, Bench};

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
    /// Processes not summed: they share their parent's address space.
    shared_mm: usize,
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
        // A systrap stub thread shares its parent's address space: that
        // one's PSS already counts it.
        if owners.contains_key(&p.ppid) && sys::same_address_space(p.pid, p.ppid) {
            f.shared_mm += 1;
            continue;
        }
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

/// utime+stime (clock ticks) of the host processes belonging to each of
/// `keys`, and of `daemon` (sbxd) when given.
fn owned_cpu_ticks(keys: &[String], daemon: Option<u32>) -> (Vec<u64>, u64) {
    let procs = sys::processes();
    let owners = sys::owners(&procs, keys);
    let mut own = vec![0; keys.len()];
    for (pid, k) in &owners {
        if let Some(s) = sys::stat(*pid) {
            own[*k] += s.utime + s.stime;
        }
    }
    let d = daemon
        .and_then(sys::stat)
        .map(|s| s.utime + s.stime)
        .unwrap_or(0);
    (own, d)
}

/// % of one core used between tick counts `x` and `y`, `secs` apart.
fn core_pct(x: u64, y: u64, secs: f64) -> f64 {
    y.saturating_sub(x) as f64 / sys::clock_ticks() / secs.max(1e-3) * 100.0
}

/// Each sandbox's % of a core between the readings `a` and `b` (the
/// density-cpu samples).
fn per_sandbox_pct(a: &(Vec<u64>, u64), b: &(Vec<u64>, u64), secs: f64) -> Vec<f64> {
    a.0.iter()
        .zip(&b.0)
        .map(|(x, y)| core_pct(*x, *y, secs))
        .collect()
}

/// "x % of a core per sandbox ..." for CPU tick counts `a` → `b` over `secs`.
fn idle_cpu_text(
    a: &(Vec<u64>, u64),
    b: &(Vec<u64>, u64),
    n: usize,
    secs: f64,
    daemon: bool,
) -> String {
    let pct = |x: u64, y: u64| core_pct(x, y, secs);
    let own = pct(a.0.iter().sum(), b.0.iter().sum());
    let mut t = format!(
        "{:.2} % of a core per sandbox ({own:.0} % for all {n})",
        own / n.max(1) as f64
    );
    if daemon {
        t.push_str(&format!(", sbxd {:.1} %", pct(a.1, b.1)));
    }
    t
}

/// The processes of a footprint that added no PSS of their own.
fn fmt_skipped(f: &Footprint) -> String {
    let mut s = String::new();
    if f.shared_mm > 0 {
        s += &format!(
            " ({} of them stub threads sharing their parent's address space, counted once)",
            f.shared_mm
        );
    }
    if f.unreadable > 0 {
        s += &format!(" ({} processes unreadable)", f.unreadable);
    }
    s
}

fn fmt_roles(f: &Footprint, n: usize) -> String {
    f.by_role_kib
        .iter()
        .map(|(r, k)| format!("{r} {:.1} MiB", *k as f64 / 1024.0 / n.max(1) as f64))
        .collect::<Vec<_>>()
        .join(", ")
}

impl Bench {
    fn density_api(&self) -> &Api {
        self.density_api.as_ref().unwrap_or(&self.api)
    }

    /// `density`: N idle sandboxes at once per side; PSS per sandbox and
    /// one exec each.
    pub(crate) async fn density(&mut self) {
        let o = self.load.clone();
        let n = o.density.max(1);
        let mut mem = Row::new("density-mem", Kind::Mib, Target::MeanMibAtMost(12.0));
        let mut exec = Row::new("density-exec", Kind::Latency, Target::AllAnswer(n));
        // Issue 21: an idle sandbox takes at most 0.5 % of a core.
        let mut cpu = Row::new("density-cpu", Kind::CorePct, Target::MeanPctAtMost(0.5));
        // The goal: `/metrics` answers in under 50 ms with 100 sandboxes.
        let mut scrape = Row::new("density-metrics", Kind::Latency, Target::P99Below(50.0));
        scrape.raw = Side::skipped("sbx only: runsc has no metrics endpoint");
        let wants_raw =
            self.wants("density-mem") || self.wants("density-exec") || self.wants("density-cpu");
        let wants_scrape = self.wants("density-metrics");
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
            tokio::time::sleep(o.quiet).await;
            let c0 = owned_cpu_ticks(&ids, pid);
            let t = Instant::now();
            tokio::time::sleep(o.settle).await;
            let c1 = owned_cpu_ticks(&ids, pid);
            let secs = t.elapsed().as_secs_f64();
            cpu.sbx.ms = per_sandbox_pct(&c0, &c1, secs);
            let idle_cpu = idle_cpu_text(&c0, &c1, ids.len(), secs, pid.is_some());
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
                 {:?} quiet and {:?} idle): {:.1} MiB per sandbox = ({:.0} MiB PSS of {} host processes + sbxd PSS \
                 growth {} → {}) / {}; by role per sandbox: {}{}. Cells are per-sandbox values \
                 (own processes + an equal share of sbxd's growth); the target is on the mean. \
                 Host CPU while idle: {idle_cpu}.",
                ids.len(),
                o.quiet,
                o.settle,
                total as f64 / 1024.0 / ids.len() as f64,
                fp.per_sandbox_kib.iter().sum::<u64>() as f64 / 1024.0,
                fp.procs,
                before.map(sys::mib).unwrap_or_else(|| "?".into()),
                after.map(sys::mib).unwrap_or_else(|| "? (no sbxd pid)".into()),
                ids.len(),
                fmt_roles(&fp, ids.len()),
                fmt_skipped(&fp),
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
            if wants_scrape {
                eprintln!("[density] {SCRAPES} scrapes of /metrics");
                match scrape_metrics(api).await {
                    Ok((ms, bytes, gauge)) => {
                        scrape.sbx.ms = ms;
                        notes.push(format!(
                            "density-metrics: `GET /metrics` on the sbxd holding the {} idle \
                             sandboxes, {SCRAPES} sequential scrapes after 1 untimed one (the \
                             store read of the node's sandboxes included); the exposition was \
                             {bytes} bytes and its `sbx_sandboxes` gauge summed to {gauge}.",
                            ids.len()
                        ));
                    }
                    Err(e) => scrape.sbx.fail(&e),
                }
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
            cpu.sbx = mem.sbx.clone();
            exec.sbx.answered = Some((0, n));
        }
        eprintln!("[density] destroying {} sbx sandboxes", ids.len());
        self.drain_sbx(api, &ids).await;

        if !wants_raw {
            self.notes.extend(notes);
            self.put("density-metrics", scrape);
            return;
        }
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
            tokio::time::sleep(o.quiet).await;
            let c0 = owned_cpu_ticks(&cids, None);
            let t = Instant::now();
            tokio::time::sleep(o.settle).await;
            let c1 = owned_cpu_ticks(&cids, None);
            let secs = t.elapsed().as_secs_f64();
            cpu.raw.ms = per_sandbox_pct(&c0, &c1, secs);
            let idle_cpu = idle_cpu_text(&c0, &c1, cids.len(), secs, false);
            let fp = footprint(&cids);
            mem.raw.ms = fp
                .per_sandbox_kib
                .iter()
                .map(|k| *k as f64 / 1024.0)
                .collect();
            notes.push(format!(
                "density-mem (raw): {} `runsc run` containers (same rootfs, 1 vCPU / 1 GiB, PID 1 \
                 `sleep infinity`, filled in {fill_s:.1} s, then {:?} quiet and {:?} idle): {:.1} \
                 MiB per container ({} host processes); by role: {}{}. Host CPU while idle: \
                 {idle_cpu}.",
                cids.len(),
                o.quiet,
                o.settle,
                fp.per_sandbox_kib.iter().sum::<u64>() as f64 / 1024.0 / cids.len() as f64,
                fp.procs,
                fmt_roles(&fp, cids.len()),
                fmt_skipped(&fp),
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
            cpu.raw = mem.raw.clone();
        }
        eprintln!("[density] deleting {} raw containers", cids.len());
        self.drain_raw(&cids).await;

        notes.push(format!(
            "density: memory = PSS (`/proc/<pid>/smaps_rollup`) of every host process whose \
             command line names the sandbox (runsc sandbox, gofer, sbxd's `runsc exec` agent \
             relay) and their descendants, each address space once (a systrap stub's threads \
             are processes sharing it), read after the sandboxes sat idle; creates run {} at \
             a time. density-exec = one `true` exec per sandbox (10 at a time) after the memory \
             read; `(a/n answered)` counts the answers. density-cpu = each sandbox's host CPU \
             (utime+stime of the same processes) over the idle window, in % of one core; \
             the target is on the mean.",
            o.parallel
        ));
        self.notes.extend(notes);
        self.put("density-mem", mem);
        self.put("density-exec", exec);
        self.put("density-cpu", cpu);
        if wants_scrape {
            self.put("density-metrics", scrape);
        }
    }
}

/// Timed scrapes of `/metrics` in `density-metrics`.
const SCRAPES: usize = 50;

/// [`SCRAPES`] timed scrapes after one untimed: latencies (ms), the last body's size
/// and the sum of its `sbx_sandboxes` samples.
async fn scrape_metrics(api: &Api) -> anyhow::Result<(Vec<f64>, usize, f64)> {
    api.metrics().await?;
    let mut ms = Vec::with_capacity(SCRAPES);
    let mut last = String::new();
    for _ in 0..SCRAPES {
        let t = Instant::now();
        last = api.metrics().await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    let gauge = last
        .lines()
        .filter(|l| l.starts_with("sbx_sandboxes{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    Ok((ms, last.len(), gauge))
}

#[cfg(test)]
mod tests {
    use super::*;
    use anyhow::anyhow;

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
}
