//! `exec-load`: S sandboxes per side, each taking C concurrent `true` execs a round.

use std::future::Future;
use std::time::Duration;

use anyhow::Result;

use super::{timed_exec, Round};
use crate::stats::{Kind, Row, Side, Target};
use crate::Bench;

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
    /// `exec-load`: S sandboxes × C concurrent `true` per round, per side.
    pub(crate) async fn exec_load(&mut self) {
        let o = self.load.clone();
        let (s, c) = (o.sandboxes.max(1), o.concurrency.max(1));
        let rounds = self.warm + o.rounds.max(1);
        let mut row = Row::new("exec-load", Kind::Latency, Target::P99RatioAtMost(0.5));
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
}
