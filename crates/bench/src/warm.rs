//! Scenarios on one long-lived ("warm") sandbox per side; snapshots, transfers in submodules.

mod files;
mod snapshots;

use crate::stats::{Failure, Kind, Row, Side, Target};
use crate::{inherit, stats_failure, timed, timed_val, Bench};
use files::MIB;

/// Timed execs per side before the other side takes its turn (see `Bench::exec`).
pub const EXEC_BLOCK: usize = 5;

impl Bench {
    /// The scenarios on one long-lived sandbox per side.
    pub(crate) async fn warm_scenarios(&mut self) {
        eprintln!("[warm] creating one sbx sandbox and one raw container");
        let sbx = match self
            .api
            .create(self.create_body(self.sbx_name("warm", 0)))
            .await
        {
            Ok(id) => Ok(id),
            Err(e) => {
                eprintln!("  ! warm sbx sandbox: {e:#}");
                Err(stats_failure(&e))
            }
        };
        let raw = match self.raw.create().await {
            Ok(cid) => Ok(cid),
            Err(e) => {
                eprintln!("  ! warm raw container: {e:#}");
                Err(stats_failure(&e))
            }
        };
        if self.wants("exec") {
            self.exec(&sbx, &raw).await;
        }
        if self.wants("process-start") {
            self.process_start(&sbx, &raw).await;
        }
        if self.wants("pause") || self.wants("resume") {
            self.pause_resume(&sbx, &raw).await;
        }
        if self.wants("snapshot-idle") || self.wants("clone") || self.wants("snapshot-50MB") {
            self.snapshots(&sbx, &raw).await;
        }
        for (size, iters, warm) in [(MIB, self.n, self.warm), (100 * MIB, self.big, 0)] {
            self.files(&sbx, &raw, size, iters, warm).await;
        }
        if let Ok(id) = &sbx {
            if let Err(e) = self.api.destroy(id).await {
                eprintln!("  ! destroying the warm sandbox: {e:#}");
            }
        }
        if let Ok(cid) = &raw {
            if let Err(e) = self.raw.destroy(cid).await {
                eprintln!("  ! deleting the warm raw container: {e:#}");
            }
        }
    }

    /// Exec samples come in blocks per side, each block led by one untimed exec: a raw
    /// `runsc exec` leaves work running after it returns (its process exiting, the sandbox
    /// tearing the exec down) that slowed an sbx sample taken right after it (measured: 0.63×
    /// alternating single samples against 0.33× with each side back to back on one sandbox).
    async fn exec(&mut self, sbx: &Result<String, Failure>, raw: &Result<String, Failure>) {
        let mut row = Row::new("exec", Kind::Latency, Target::RatioAtMost(0.4));
        seed(&mut row, sbx, raw);
        let mut done = 0;
        while done < self.n {
            let block = EXEC_BLOCK.min(self.n - done);
            // The run's warm-up iterations go before the first block.
            let lead = if done == 0 { self.warm.max(1) } else { 1 };
            for i in 0..lead + block {
                if let (true, Ok(id)) = (row.sbx.active(), sbx) {
                    let r = timed(self.api.exec_ok(id, &["true"])).await;
                    row.sbx.take(i, lead, r);
                }
            }
            for i in 0..lead + block {
                if let (true, Ok(cid)) = (row.raw.active(), raw) {
                    let r = timed(self.raw.exec_ok(cid, &["/bin/true"])).await;
                    row.raw.take(i, lead, r);
                }
            }
            done += block;
        }
        self.put("exec", row);
    }

    async fn process_start(
        &mut self,
        sbx: &Result<String, Failure>,
        raw: &Result<String, Failure>,
    ) {
        eprintln!("[process-start]");
        let mut row = Row::new("process-start", Kind::Latency, Target::None);
        seed(&mut row, sbx, raw);
        for i in 0..self.warm + self.n {
            if let (true, Ok(id)) = (row.sbx.active(), sbx) {
                match timed_val(self.api.start_process(id, &["sleep", "60"])).await {
                    Ok((pid, d)) => {
                        row.sbx.take(i, self.warm, Ok(d));
                        if let Err(e) = self.api.kill_process(id, &pid).await {
                            eprintln!("  ! killing process {pid}: {e:#}");
                        }
                    }
                    Err(e) => row.sbx.take(i, self.warm, Err(e)),
                }
            }
            if let (true, Ok(cid)) = (row.raw.active(), raw) {
                let r = timed(self.raw.exec_ok(cid, &["sleep", "0"])).await;
                row.raw.take(i, self.warm, r);
            }
        }
        self.notes.push(
            "process-start raw column: `runsc exec <cid> sleep 0` run to completion (runsc has \
             no cheaper way to confirm a started process); sbx: POST .../processes \
             `sleep 60` until the 201."
                .into(),
        );
        self.put("process-start", row);
    }

    async fn pause_resume(&mut self, sbx: &Result<String, Failure>, raw: &Result<String, Failure>) {
        eprintln!("[pause/resume]");
        let mut pause = Row::new("pause", Kind::Latency, Target::RatioAtMost(1.5));
        let mut resume = Row::new("resume", Kind::Latency, Target::RatioAtMost(1.5));
        seed(&mut pause, sbx, raw);
        seed(&mut resume, sbx, raw);
        for i in 0..self.warm + self.n {
            if let (true, true, Ok(id)) = (pause.sbx.active(), resume.sbx.active(), sbx) {
                match timed(self.api.transition(id, "pause", "PAUSED")).await {
                    Ok(d) => {
                        pause.sbx.take(i, self.warm, Ok(d));
                        let r = timed(self.api.transition(id, "resume", "RUNNING")).await;
                        resume.sbx.take(i, self.warm, r);
                    }
                    Err(e) => {
                        resume.sbx = inherit(&stats_failure(&e), "pause");
                        pause.sbx.take(i, self.warm, Err(e));
                    }
                }
            }
            if let (true, true, Ok(cid)) = (pause.raw.active(), resume.raw.active(), raw) {
                match timed(self.raw.pause(cid)).await {
                    Ok(d) => {
                        pause.raw.take(i, self.warm, Ok(d));
                        let r = timed(self.raw.resume(cid)).await;
                        resume.raw.take(i, self.warm, r);
                    }
                    Err(e) => {
                        resume.raw = Side::skipped("pause failed");
                        pause.raw.take(i, self.warm, Err(e));
                    }
                }
            }
        }
        self.put("pause", pause);
        self.put("resume", resume);
    }
}

/// Marks the sides whose warm sandbox could not be created.
fn seed(row: &mut Row, sbx: &Result<String, Failure>, raw: &Result<String, Failure>) {
    seed_one(&mut row.sbx, sbx);
    seed_one(&mut row.raw, raw);
}

fn seed_one(side: &mut Side, warm: &Result<String, Failure>) {
    if let Err(f) = warm {
        *side = inherit(f, "creating the warm sandbox");
    }
}
