//! Scenarios with many sandboxes at once: `exec-load` (S sandboxes × C
//! concurrent `true` execs per round) and `density` (N idle sandboxes held
//! at once: host memory per sandbox from PSS, and whether every one still
//! answers an exec). Each side runs on its own (not interleaved) so the two
//! sides never hold their sandboxes at the same time; everything is
//! destroyed at the end of the scenario, and by the final cleanup when a
//! scenario is cut short.
//!
//! This module holds what both share (the knobs, bounded operations, filling and
//! draining a side); each scenario is in its own submodule.

mod density;
mod exec_load;

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{anyhow, Result};
use futures::stream::{self, StreamExt};

use crate::api::Api;
use crate::Bench;

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
    /// density: time between the last create and the idle window.
    pub quiet: Duration,
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

impl Bench {
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
}

#[cfg(test)]
mod tests {
    use super::*;

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
