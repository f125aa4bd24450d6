//! `sbxd-cpu`: sbxd's own CPU per exec, per create and per destroy, over K
//! operations. `perf stat -e instructions:u,task-clock -p <sbxd>` when perf
//! is installed (instructions need a PMU; many VMs have none, then only
//! task-clock counts), and always the `/proc/<pid>/stat` utime+stime delta
//! (which, unlike `perf -p`, also includes threads started after the
//! window opened). The idle rate, measured just before, is subtracted.

use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};

use crate::{sys, Bench};

/// Counters of one `perf stat -x,` run.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct PerfCounts {
    /// `instructions:u`, when the counter is supported.
    pub instructions: Option<f64>,
    /// `task-clock` in ms.
    pub task_clock_ms: Option<f64>,
}

/// Parses `perf stat -x,` output (`value,unit,event,...`; `<not supported>`
/// or `<not counted>` as the value when a counter is unavailable).
pub fn parse_perf_csv(text: &str) -> PerfCounts {
    let mut c = PerfCounts::default();
    for line in text.lines() {
        let f: Vec<&str> = line.split(',').collect();
        if f.len() < 3 {
            continue;
        }
        let Ok(v) = f[0].trim().parse::<f64>() else {
            continue;
        };
        let event = f[2].trim();
        if event.starts_with("instructions") {
            c.instructions = Some(v);
        } else if event.starts_with("task-clock") {
            // perf reports task-clock in msec.
            c.task_clock_ms = Some(if f[1].trim() == "ns" { v / 1e6 } else { v });
        }
    }
    c
}

/// One measured window: perf counters and /proc CPU.
#[derive(Debug, Default, Clone, Copy)]
struct Window {
    perf: Option<PerfCounts>,
    /// sbxd's own utime+stime, ms.
    own_ms: f64,
    /// CPU of sbxd's waited-for children (runsc commands), ms.
    children_ms: f64,
    wall: Duration,
}

/// A running `perf stat` on a pid.
struct Perf {
    child: tokio::process::Child,
}

impl Perf {
    async fn start(pid: u32) -> Result<Perf> {
        let child = tokio::process::Command::new("perf")
            .args([
                "stat",
                "--no-inherit",
                "-x,",
                "-e",
                "instructions:u,task-clock",
                "-p",
            ])
            .arg(pid.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .context("spawning perf")?;
        // Let perf attach before the window opens.
        tokio::time::sleep(Duration::from_millis(300)).await;
        Ok(Perf { child })
    }

    async fn stop(self) -> Result<PerfCounts> {
        let Some(id) = self.child.id() else {
            bail!("perf exited early");
        };
        // SAFETY: kill(2) on the pid of our own child process.
        unsafe { libc::kill(id as i32, libc::SIGINT) };
        let out = tokio::time::timeout(Duration::from_secs(10), self.child.wait_with_output())
            .await
            .context("perf did not stop")??;
        let text = String::from_utf8_lossy(&out.stderr);
        let c = parse_perf_csv(&text);
        if c.task_clock_ms.is_none() {
            bail!("perf counted nothing: {}", text.trim());
        }
        Ok(c)
    }
}

impl Bench {
    /// Runs `ops` inside a measured window on sbxd (`pid`).
    async fn window<F, Fut>(&self, pid: u32, use_perf: bool, ops: F) -> Result<Window>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = Result<()>>,
    {
        let perf = if use_perf {
            match Perf::start(pid).await {
                Ok(p) => Some(p),
                Err(e) => {
                    eprintln!("  ! perf: {e:#}");
                    None
                }
            }
        } else {
            None
        };
        let s0 = sys::stat(pid).context("reading sbxd's /proc stat")?;
        let t = Instant::now();
        let r = ops().await;
        let wall = t.elapsed();
        let s1 = sys::stat(pid).context("reading sbxd's /proc stat")?;
        let perf = match perf {
            Some(p) => match p.stop().await {
                Ok(c) => Some(c),
                Err(e) => {
                    eprintln!("  ! perf: {e:#}");
                    None
                }
            },
            None => None,
        };
        r?;
        let tick_ms = 1000.0 / sys::clock_ticks();
        Ok(Window {
            perf,
            own_ms: (s1.utime + s1.stime).saturating_sub(s0.utime + s0.stime) as f64 * tick_ms,
            children_ms: (s1.cutime + s1.cstime).saturating_sub(s0.cutime + s0.cstime) as f64
                * tick_ms,
            wall,
        })
    }

    /// `sbxd-cpu`: K execs, K creates, K destroys, each in its own window.
    pub(crate) async fn sbxd_cpu(&mut self) {
        let Some(pid) = self.sbxd_pid else {
            self.notes
                .push("sbxd-cpu: not measured (sbxd's pid unknown; pass --sbxd-pid).".into());
            return;
        };
        let k_exec = self.cpu_execs.max(1);
        let k_create = self.cpu_creates.max(1);
        let use_perf = std::process::Command::new("perf")
            .arg("--version")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success());
        eprintln!("[sbxd-cpu] idle baseline");
        let idle = match self
            .window(pid, use_perf, || async {
                tokio::time::sleep(Duration::from_secs(3)).await;
                Ok(())
            })
            .await
        {
            Ok(w) => w,
            Err(e) => {
                self.notes.push(format!("sbxd-cpu: not measured: {e:#}"));
                return;
            }
        };
        let mut lines = Vec::new();
        let fmt = |what: &str, k: usize, w: &Window| -> String {
            let secs = w.wall.as_secs_f64();
            let idle_s = idle.wall.as_secs_f64().max(1e-3);
            let net = |gross: f64, idle_total: f64| (gross - idle_total / idle_s * secs).max(0.0);
            let mut parts = Vec::new();
            if let (Some(p), Some(pi)) = (w.perf, idle.perf) {
                if let (Some(i), Some(ii)) = (p.instructions, pi.instructions) {
                    parts.push(format!(
                        "{:.2} M instructions:u/{what}",
                        net(i, ii) / k as f64 / 1e6
                    ));
                }
                if let (Some(t), Some(ti)) = (p.task_clock_ms, pi.task_clock_ms) {
                    parts.push(format!(
                        "perf task-clock {:.2} ms/{what} (gross {:.2})",
                        net(t, ti) / k as f64,
                        t / k as f64
                    ));
                }
            }
            parts.push(format!(
                "/proc utime+stime {:.2} ms/{what} (gross {:.2})",
                net(w.own_ms, idle.own_ms) / k as f64,
                w.own_ms / k as f64
            ));
            parts.push(format!(
                "reaped children {:.2} ms/{what}",
                w.children_ms / k as f64
            ));
            format!("{k} {what}s in {secs:.1} s: {}", parts.join(", "))
        };

        // Execs on one sandbox.
        eprintln!("[sbxd-cpu] {k_exec} execs");
        let body = self.create_body(self.sbx_name("cpu", 0));
        match self.api.create(body).await {
            Ok(id) => {
                let _ = self.api.exec_ok(&id, &["true"]).await;
                let api = &self.api;
                let idr = &id;
                match self
                    .window(pid, use_perf, || async move {
                        for _ in 0..k_exec {
                            api.exec_ok(idr, &["true"]).await?;
                        }
                        Ok(())
                    })
                    .await
                {
                    Ok(w) => lines.push(fmt("exec", k_exec, &w)),
                    Err(e) => lines.push(format!("exec: error {e:#}")),
                }
                if let Err(e) = self.api.destroy(&id).await {
                    eprintln!("  ! destroying {id}: {e:#}");
                }
            }
            Err(e) => lines.push(format!("exec: could not create the sandbox: {e:#}")),
        }

        // Creates (kept until the destroy window), then destroys.
        eprintln!("[sbxd-cpu] {k_create} creates, then {k_create} destroys");
        let mut ids = Vec::new();
        let api = &self.api;
        let names: Vec<_> = (0..k_create)
            .map(|i| self.create_body(self.sbx_name("cpu-create", i)))
            .collect();
        let idsr = &mut ids;
        let created = self
            .window(pid, use_perf, || async move {
                for body in names {
                    idsr.push(api.create(body).await?);
                }
                Ok(())
            })
            .await;
        match created {
            Ok(w) => {
                lines.push(fmt("create", k_create, &w));
                let idsr = &ids;
                match self
                    .window(pid, use_perf, || async move {
                        for id in idsr {
                            api.destroy(id).await?;
                        }
                        Ok(())
                    })
                    .await
                {
                    Ok(w) => lines.push(fmt("destroy", ids.len(), &w)),
                    Err(e) => lines.push(format!("destroy: error {e:#}")),
                }
            }
            Err(e) => lines.push(format!("create: error {e:#}")),
        }
        for id in &ids {
            let _ = self.api.destroy(id).await;
        }

        let perf_state = match (use_perf, idle.perf) {
            (false, _) => "perf not installed: /proc only".to_string(),
            (true, None) => "perf could not count: /proc only".to_string(),
            (true, Some(p)) if p.instructions.is_none() => {
                "`perf stat --no-inherit -e instructions:u,task-clock`: instructions:u <not \
                 supported> (no PMU in this VM), task-clock counted"
                    .to_string()
            }
            (true, Some(_)) => "`perf stat --no-inherit -e instructions:u,task-clock`".to_string(),
        };
        self.notes.push(format!(
            "sbxd-cpu (pid {pid}; {perf_state}; idle baseline {:.1} ms CPU/s subtracted, `gross` \
             includes it): {}. Operations run one after another (creates: POST /v2/sandboxes \
             until RUNNING, kept until the destroy window). perf counts sbxd's threads that exist \
             when it attaches (`--no-inherit`, so the runsc processes sbxd forks are not \
             counted); /proc utime+stime is sbxd's own CPU, all threads, 10 ms ticks. `reaped \
             children` = CPU of child processes sbxd reaped in the window (runsc commands; at \
             destroy also the sandbox's runsc processes, whole lifetime): not sbxd's own.",
            idle.own_ms / idle.wall.as_secs_f64().max(1e-3),
            lines.join("; ")
        ));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn perf_csv() {
        let out = "<not supported>,,instructions:u,0,100.00,,\n\
                   10.35,msec,task-clock,10346994,100.00,0.010,CPUs utilized\n";
        assert_eq!(
            parse_perf_csv(out),
            PerfCounts {
                instructions: None,
                task_clock_ms: Some(10.35)
            }
        );
        let out = "# started on ...\n\n123456789,,instructions:u,2000,100.00,0.50,insn per cycle\n\
                   2.50,msec,task-clock,2500000,100.00,0.001,CPUs utilized\n";
        let c = parse_perf_csv(out);
        assert_eq!(c.instructions, Some(123456789.0));
        assert_eq!(c.task_clock_ms, Some(2.5));
        assert_eq!(parse_perf_csv("garbage\n"), PerfCounts::default());
    }
}
