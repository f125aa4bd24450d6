//! `sbx-bench`: latency and throughput of a running sbxd, next to the same
//! operation done with raw runsc in the same run, as one markdown table.
//!
//! ```text
//! sbx-bench --image-rootfs /var/lib/sbx/images/default-*/rootfs --agent-dir /var/lib/sbx/agent \
//!     [--url http://127.0.0.1:8731] [--iterations 20] [--scenarios create,exec,...]
//! ```
//!
//! sbx and raw iterations alternate, so both sides see the same background
//! load. Everything the bench creates is removed at the end (and on Ctrl-C):
//! sbx sandboxes and snapshots named `bench-<tag>-*`, raw containers
//! `bench-raw-<tag>-*` under the run's own runsc `--root`.

mod api;
mod connect;
mod cpu;
mod load;
mod network;
mod raw;
mod reaper;
mod stats;
mod sys;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use bytes::Bytes;
use clap::Parser;
use serde_json::json;

use api::Api;
use raw::{Raw, Shape};
use stats::{Failure, Kind, Row, Side, Target, TABLE_HEADER};

/// Scenarios in table order.
const SCENARIOS: &[&str] = &[
    "create",
    "exec",
    "destroy",
    "process-start",
    "upload-1MiB",
    "upload-100MiB",
    "download-1MiB",
    "download-100MiB",
    "pause",
    "resume",
    "snapshot-idle",
    "snapshot-50MB",
    "clone",
    "create-public",
    "create-none",
    "net-connect",
    "net-throughput",
    "exec-load",
    "density-mem",
    "density-exec",
    "sbxd-cpu",
    "connect-job",
];

/// Scenarios that run on the long-lived ("warm") sandbox pair.
const WARM_SCENARIOS: &[&str] = &[
    "exec",
    "process-start",
    "upload-1MiB",
    "upload-100MiB",
    "download-1MiB",
    "download-100MiB",
    "pause",
    "resume",
    "snapshot-idle",
    "snapshot-50MB",
    "clone",
];

/// Timed execs per side before the other side takes its turn (see `Bench::exec`).
const EXEC_BLOCK: usize = 5;
const MIB: u64 = 1024 * 1024;
const SBX_FILE: &str = "/tmp/bench.bin";
const RAW_FILE: &str = "/tmp/x";
const WRITE_50MB: &str = "head -c 50000000 /dev/urandom > /root/bench-50MB && sync";

#[derive(Parser, Debug)]
#[command(
    name = "sbx-bench",
    about = "Benchmarks a running sbxd against raw runsc and prints a markdown table"
)]
struct Args {
    /// Base URL of the running sbxd (dev mode: no key needed).
    #[arg(long, env = "SBX_URL", default_value = "http://127.0.0.1:8731")]
    url: String,
    /// Timed iterations per scenario (per side).
    #[arg(long, default_value_t = 20)]
    iterations: usize,
    /// Timed iterations of the 100 MiB transfers.
    #[arg(long, default_value_t = 3)]
    big_iterations: usize,
    /// Untimed iterations before the timed ones (not for 100 MiB transfers).
    #[arg(long, default_value_t = 1)]
    warmup: usize,
    /// Comma-separated scenarios (default: all). `snapshot` means both
    /// snapshot rows.
    #[arg(long, value_delimiter = ',')]
    scenarios: Vec<String>,
    /// Parent directory of this run's raw runsc state (a fresh
    /// `sbx-bench-*` directory is made inside and removed at the end).
    #[arg(long, default_value = "/var/tmp")]
    data_dir: PathBuf,
    /// Keep the raw state directory (bundles, console logs) for inspection.
    #[arg(long)]
    keep_data_dir: bool,
    /// Root filesystem of the image sbxd uses.
    #[arg(long)]
    image_rootfs: PathBuf,
    /// Directory holding `sbx-agent` (bind-mounted at /.sbx/bin).
    #[arg(long)]
    agent_dir: PathBuf,
    /// runsc binary.
    #[arg(long, default_value = sbx_runsc::DEFAULT_BINARY)]
    runsc: PathBuf,
    /// pid of sbxd for the RSS samples (default: the process listening on
    /// the URL's port).
    #[arg(long)]
    sbxd_pid: Option<u32>,
    /// Interval of client-side status polling, in ms.
    #[arg(long, default_value_t = 10)]
    poll_ms: u64,
    /// Do not act as child subreaper for the raw sandboxes (sbxd is one; without
    /// it raw `delete` waits for the host's init to reap, ~1.5 s on some hosts).
    #[arg(long)]
    no_subreaper: bool,
    /// `--compression=` of the raw `runsc checkpoint` (sbxd uses `none`;
    /// empty = runsc's default, flate-best-speed).
    #[arg(long, default_value = "none")]
    raw_compression: String,
    /// Uploads are streamed (chunked transfer encoding) in pieces of this
    /// many KiB; 0 sends one body with a Content-Length.
    #[arg(long, default_value_t = 256)]
    upload_chunk_kib: usize,
    /// exec-load: sandboxes per side.
    #[arg(long, default_value_t = 10)]
    load_sandboxes: usize,
    /// exec-load: concurrent `true` execs per sandbox in each round.
    #[arg(long, default_value_t = 10)]
    load_concurrency: usize,
    /// exec-load: timed rounds (each gives sandboxes × concurrency samples).
    #[arg(long, default_value_t = 10)]
    load_rounds: usize,
    /// density: idle 1 vCPU / 1024 MiB sandboxes held at once per side.
    #[arg(long, default_value_t = 100)]
    density_count: usize,
    /// Creates / destroys in flight at once while filling and emptying
    /// (exec-load, density).
    #[arg(long, default_value_t = 4)]
    fill_parallel: usize,
    /// density: seconds the sandboxes sit idle before their memory is read.
    #[arg(long, default_value_t = 5)]
    density_settle_secs: u64,
    /// density: run the sbx side on this sbxd instead of --url (one started
    /// with `--memory-overcommit`, so 100 × 1 GiB pass admission).
    #[arg(long)]
    density_url: Option<String>,
    /// pid of the --density-url sbxd (default: the process listening on its port).
    #[arg(long)]
    density_sbxd_pid: Option<u32>,
    /// sbxd-cpu: execs in the exec window.
    #[arg(long, default_value_t = 200)]
    cpu_execs: usize,
    /// sbxd-cpu: creates in the create window (and destroys in the destroy one).
    #[arg(long, default_value_t = 10)]
    cpu_creates: usize,
    /// Upper bound on one exec / create / destroy in exec-load and density, seconds.
    #[arg(long, default_value_t = 120)]
    op_timeout_secs: u64,
}

/// Expands and checks `--scenarios`.
fn select(names: &[String]) -> Result<Vec<&'static str>> {
    if names.is_empty() || names.iter().any(|n| n.eq_ignore_ascii_case("all")) {
        return Ok(SCENARIOS.to_vec());
    }
    let mut out = Vec::new();
    for n in names {
        let n = n.trim();
        if n.is_empty() {
            continue;
        }
        if n.eq_ignore_ascii_case("snapshot") {
            out.extend(["snapshot-idle", "snapshot-50MB"]);
            continue;
        }
        if n.eq_ignore_ascii_case("density") {
            out.extend(["density-mem", "density-exec"]);
            continue;
        }
        match SCENARIOS.iter().find(|s| s.eq_ignore_ascii_case(n)) {
            Some(s) => out.push(*s),
            None => bail!(
                "unknown scenario {n:?}; known: {} (or snapshot, density, all)",
                SCENARIOS.join(", ")
            ),
        }
    }
    Ok(out)
}

/// Awaits `f` and returns how long it took.
async fn timed<T>(f: impl Future<Output = Result<T>>) -> Result<Duration> {
    let t = Instant::now();
    f.await?;
    Ok(t.elapsed())
}

/// Like [`timed`] but also returns the value.
async fn timed_val<T>(f: impl Future<Output = Result<T>>) -> Result<(T, Duration)> {
    let t = Instant::now();
    let v = f.await?;
    Ok((v, t.elapsed()))
}

/// A side that inherits why a prerequisite failed.
fn inherit(f: &Failure, what: &str) -> Side {
    Side {
        failure: Some(match f {
            Failure::Unsupported(c) => Failure::Unsupported(c.clone()),
            _ => Failure::Skipped(format!("{what} failed")),
        }),
        ..Side::default()
    }
}

/// Fast deterministic filler bytes (incompressible enough for a transfer test).
fn filler(len: usize) -> Bytes {
    let mut v = Vec::with_capacity(len);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    Bytes::from(v)
}

struct Bench {
    api: Api,
    raw: Raw,
    tag: String,
    n: usize,
    big: usize,
    warm: usize,
    selected: Vec<&'static str>,
    rows: BTreeMap<&'static str, Row>,
    notes: Vec<String>,
    sbxd_pid: Option<u32>,
    raw_compression: String,
    load: load::LoadOpts,
    /// The sbxd of the density scenario when it is not `api`'s.
    density_api: Option<Api>,
    density_url: String,
    density_pid: Option<u32>,
    cpu_execs: usize,
    cpu_creates: usize,
}

impl Bench {
    fn wants(&self, s: &str) -> bool {
        self.selected.contains(&s)
    }

    fn sbx_name(&self, what: &str, i: usize) -> String {
        format!("bench-{}-{what}-{i:03}", self.tag)
    }

    fn create_body(&self, name: String) -> serde_json::Value {
        json!({ "name": name, "vcpu": 1, "memoryMb": 1024 })
    }

    fn put(&mut self, name: &'static str, row: Row) {
        self.rows.insert(name, row);
    }

    /// `create` and `destroy`: one sandbox at a time, each side in turn.
    async fn lifecycle(&mut self) {
        let mut create = Row::new("create", Kind::Latency, Target::RatioAtMost(1.3));
        let mut destroy = Row::new("destroy", Kind::Latency, Target::None);
        for i in 0..self.warm + self.n {
            eprintln!("[create/destroy] {}/{}", i + 1, self.warm + self.n);
            if create.sbx.active() && destroy.sbx.active() {
                let body = self.create_body(self.sbx_name("life", i));
                match timed_val(self.api.create(body)).await {
                    Ok((id, d)) => {
                        create.sbx.take(i, self.warm, Ok(d));
                        let r = timed(self.api.destroy(&id)).await;
                        destroy.sbx.take(i, self.warm, r);
                    }
                    Err(e) => {
                        destroy.sbx = inherit(&stats_failure(&e), "create");
                        create.sbx.take(i, self.warm, Err(e));
                    }
                }
            }
            if create.raw.active() && destroy.raw.active() {
                match timed_val(self.raw.create()).await {
                    Ok((cid, d)) => {
                        create.raw.take(i, self.warm, Ok(d));
                        let r = timed(self.raw.delete(&cid)).await;
                        self.raw.forget(&cid);
                        destroy.raw.take(i, self.warm, r);
                    }
                    Err(e) => {
                        destroy.raw = Side::skipped("create failed");
                        create.raw.take(i, self.warm, Err(e));
                    }
                }
            }
        }
        self.put("create", create);
        self.put("destroy", destroy);
    }

    /// The scenarios on one long-lived sandbox per side.
    async fn warm_scenarios(&mut self) {
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
        let mut row = Row::new("exec", Kind::Latency, Target::RatioAtMost(0.5));
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

    /// `snapshot-idle`, `clone` (from the last idle snapshot), then
    /// `snapshot-50MB` after writing 50 MB inside.
    async fn snapshots(&mut self, sbx: &Result<String, Failure>, raw: &Result<String, Failure>) {
        if self.wants("snapshot-idle") || self.wants("snapshot-50MB") {
            let compression = match self.raw_compression.as_str() {
                "" => "runsc's default compression".to_string(),
                c => format!("`--compression={c}`"),
            };
            self.notes.push(format!(
                "snapshots: sbx = POST .../snapshots until READY (201, or 202 then GET \
                 /v2/snapshots/{{id}}); raw = `runsc checkpoint --leave-running` with \
                 {compression} (sbxd uses none). snapshot-50MB is taken after writing 50 MB of \
                 /dev/urandom to /root inside (root overlay)."
            ));
        }
        // Idle snapshots; the last one of each side is kept for `clone`.
        let mut idle = Row::new("snapshot-idle", Kind::Latency, Target::None);
        seed(&mut idle, sbx, raw);
        let iters = if self.wants("snapshot-idle") {
            self.warm + self.n
        } else if self.wants("clone") {
            1
        } else {
            0
        };
        let mut sbx_snap: Option<String> = None;
        let mut raw_image: Option<PathBuf> = None;
        for i in 0..iters {
            eprintln!("[snapshot-idle] {}/{iters}", i + 1);
            if let (true, Ok(id)) = (idle.sbx.active(), sbx) {
                let name = self.sbx_name("snap-idle", i);
                match timed_val(self.api.snapshot(id, &name)).await {
                    Ok((sid, d)) => {
                        idle.sbx.take(i, self.warm, Ok(d));
                        if let Some(old) = sbx_snap.replace(sid) {
                            let _ = self.api.delete_snapshot(&old).await;
                        }
                    }
                    Err(e) => idle.sbx.take(i, self.warm, Err(e)),
                }
            }
            if let (true, Ok(cid)) = (idle.raw.active(), raw) {
                let image = self.raw.image_dir(&format!("idle-{i:03}"));
                match timed(self.raw.checkpoint(cid, &image, &self.raw_compression)).await {
                    Ok(d) => {
                        idle.raw.take(i, self.warm, Ok(d));
                        if let Some(old) = raw_image.replace(image) {
                            let _ = std::fs::remove_dir_all(old);
                        }
                    }
                    Err(e) => idle.raw.take(i, self.warm, Err(e)),
                }
            }
        }

        if self.wants("clone") {
            let mut clone = Row::new("clone", Kind::Latency, Target::RatioAtMost(1.3));
            match (&sbx_snap, &idle.sbx.failure) {
                (Some(_), _) => {}
                (None, Some(f)) => clone.sbx = inherit(f, "snapshot"),
                (None, None) => clone.sbx = Side::skipped("no snapshot"),
            }
            match (&raw_image, &idle.raw.failure) {
                (Some(_), _) => {}
                (None, Some(f)) => clone.raw = inherit(f, "checkpoint"),
                (None, None) => clone.raw = Side::skipped("no checkpoint"),
            }
            for i in 0..self.warm + self.n {
                eprintln!("[clone] {}/{}", i + 1, self.warm + self.n);
                if let (true, Some(sid)) = (clone.sbx.active(), &sbx_snap) {
                    let body = json!({ "name": self.sbx_name("clone", i), "snapshotId": sid });
                    match timed_val(self.api.create(body)).await {
                        Ok((id, d)) => {
                            clone.sbx.take(i, self.warm, Ok(d));
                            if let Err(e) = self.api.destroy(&id).await {
                                eprintln!("  ! destroying clone {id}: {e:#}");
                            }
                        }
                        Err(e) => clone.sbx.take(i, self.warm, Err(e)),
                    }
                }
                if let (true, Some(image)) = (clone.raw.active(), &raw_image) {
                    match timed_val(self.raw.restore(image)).await {
                        Ok((cid, d)) => {
                            clone.raw.take(i, self.warm, Ok(d));
                            if let Err(e) = self.raw.destroy(&cid).await {
                                eprintln!("  ! deleting raw clone {cid}: {e:#}");
                            }
                        }
                        Err(e) => clone.raw.take(i, self.warm, Err(e)),
                    }
                }
            }
            self.notes.push(
                "clone: sbx = POST /v2/sandboxes {snapshotId} until RUNNING; raw = new bundle + \
                 `runsc restore --detach` of the last idle checkpoint + `runsc state` until \
                 running; each clone is destroyed (untimed) before the next."
                    .into(),
            );
            self.put("clone", clone);
        }
        if let Some(sid) = sbx_snap {
            let _ = self.api.delete_snapshot(&sid).await;
        }
        if let Some(image) = raw_image {
            let _ = std::fs::remove_dir_all(image);
        }
        if self.wants("snapshot-idle") {
            self.put("snapshot-idle", idle);
        }

        if self.wants("snapshot-50MB") {
            let mut big = Row::new("snapshot-50MB", Kind::Latency, Target::None);
            seed(&mut big, sbx, raw);
            if let Ok(id) = sbx {
                if let Err(e) = self.api.exec_ok(id, &["sh", "-c", WRITE_50MB]).await {
                    eprintln!("  ! writing 50 MB (sbx): {e:#}");
                    big.sbx.fail(&e);
                }
            }
            if let Ok(cid) = raw {
                if let Err(e) = self.raw.exec_ok(cid, &["sh", "-c", WRITE_50MB]).await {
                    eprintln!("  ! writing 50 MB (raw): {e:#}");
                    big.raw.fail(&e);
                }
            }
            for i in 0..self.warm + self.n {
                eprintln!("[snapshot-50MB] {}/{}", i + 1, self.warm + self.n);
                if let (true, Ok(id)) = (big.sbx.active(), sbx) {
                    let name = self.sbx_name("snap-50mb", i);
                    match timed_val(self.api.snapshot(id, &name)).await {
                        Ok((sid, d)) => {
                            big.sbx.take(i, self.warm, Ok(d));
                            let _ = self.api.delete_snapshot(&sid).await;
                        }
                        Err(e) => big.sbx.take(i, self.warm, Err(e)),
                    }
                }
                if let (true, Ok(cid)) = (big.raw.active(), raw) {
                    let image = self.raw.image_dir(&format!("50mb-{i:03}"));
                    let r = timed(self.raw.checkpoint(cid, &image, &self.raw_compression)).await;
                    let _ = std::fs::remove_dir_all(&image);
                    big.raw.take(i, self.warm, r);
                }
            }
            self.put("snapshot-50MB", big);
        }
    }

    /// Upload then download of `size` bytes, `iters` times each.
    async fn files(
        &mut self,
        sbx: &Result<String, Failure>,
        raw: &Result<String, Failure>,
        size: u64,
        iters: usize,
        warm: usize,
    ) {
        let label = if size >= MIB { size / MIB } else { 0 };
        let up_name = SCENARIOS
            .iter()
            .copied()
            .find(|s| *s == format!("upload-{label}MiB"));
        let down_name = SCENARIOS
            .iter()
            .copied()
            .find(|s| *s == format!("download-{label}MiB"));
        let (Some(up_name), Some(down_name)) = (up_name, down_name) else {
            return;
        };
        let (want_up, want_down) = (self.wants(up_name), self.wants(down_name));
        if !want_up && !want_down {
            return;
        }
        let big = size >= 100 * MIB;
        let target = if big {
            Target::MinMbps(300.0)
        } else {
            Target::None
        };
        let data = filler(size as usize);
        let rss_pid = if big { self.sbxd_pid } else { None };
        if let Some(pid) = rss_pid {
            if let Some(k) = sys::rss_kib(pid) {
                self.notes.push(format!(
                    "sbxd RSS (pid {pid}) before the 100 MiB transfers: {}",
                    sys::mib(k)
                ));
            }
        }

        let mut up = Row::new(up_name, Kind::Throughput { bytes: size }, target);
        seed(&mut up, sbx, raw);
        let mut rss_max = 0u64;
        let mut rss_n = 0usize;
        // Without a timed upload, the download still needs the file once.
        let up_iters = if want_up { warm + iters } else { 1 };
        for i in 0..up_iters {
            eprintln!("[{up_name}] {}/{up_iters}", i + 1);
            if let (true, Ok(id)) = (up.sbx.active(), sbx) {
                let sampler = rss_pid.map(|p| sys::RssSampler::start(p, Duration::from_millis(50)));
                let r = timed(self.api.upload(id, SBX_FILE, &data)).await;
                if let Some(s) = sampler {
                    let (m, n) = s.finish().await;
                    rss_max = rss_max.max(m);
                    rss_n += n;
                }
                up.sbx.take(i, warm, r);
            }
            if let (true, Ok(cid)) = (up.raw.active(), raw) {
                let r = timed(self.raw.upload(cid, RAW_FILE, &data)).await;
                up.raw.take(i, warm, r);
            }
        }
        if let (Some(pid), true) = (rss_pid, rss_n > 0) {
            self.notes.push(format!(
                "sbxd RSS (pid {pid}) max during the 100 MiB uploads: {} ({rss_n} samples every 50 ms)",
                sys::mib(rss_max)
            ));
        }

        if want_down {
            let mut down = Row::new(down_name, Kind::Throughput { bytes: size }, target);
            match &up.sbx.failure {
                Some(f) => down.sbx = inherit(f, "upload"),
                None => seed_one(&mut down.sbx, sbx),
            }
            match &up.raw.failure {
                Some(f) => down.raw = inherit(f, "upload"),
                None => seed_one(&mut down.raw, raw),
            }
            let (mut rss_max, mut rss_n) = (0u64, 0usize);
            for i in 0..warm + iters {
                eprintln!("[{down_name}] {}/{}", i + 1, warm + iters);
                if let (true, Ok(id)) = (down.sbx.active(), sbx) {
                    let sampler =
                        rss_pid.map(|p| sys::RssSampler::start(p, Duration::from_millis(50)));
                    let r = timed_val(self.api.download(id, SBX_FILE)).await;
                    if let Some(s) = sampler {
                        let (m, n) = s.finish().await;
                        rss_max = rss_max.max(m);
                        rss_n += n;
                    }
                    down.sbx.take(i, warm, check_len(r, size));
                }
                if let (true, Ok(cid)) = (down.raw.active(), raw) {
                    let r = timed_val(self.raw.download(cid, RAW_FILE)).await;
                    down.raw.take(i, warm, check_len(r, size));
                }
            }
            if let (Some(pid), true) = (rss_pid, rss_n > 0) {
                self.notes.push(format!(
                    "sbxd RSS (pid {pid}) max during the 100 MiB downloads: {} ({rss_n} samples)",
                    sys::mib(rss_max)
                ));
            }
            self.put(down_name, down);
        }
        if want_up {
            self.put(up_name, up);
        }
        if big {
            if let Some(k) = rss_pid.and_then(sys::rss_kib) {
                self.notes.push(format!(
                    "sbxd RSS after the 100 MiB transfers: {}",
                    sys::mib(k)
                ));
            }
        }
        if let Ok(id) = sbx {
            let _ = self.api.exec(id, &["rm", "-f", SBX_FILE]).await;
        }
        if let Ok(cid) = raw {
            let _ = self.raw.exec_ok(cid, &["rm", "-f", RAW_FILE]).await;
        }
    }
}

/// A transfer result whose byte count must be `want`.
fn check_len(r: Result<(u64, Duration)>, want: u64) -> Result<Duration> {
    let (n, d) = r?;
    if n != want {
        bail!("downloaded {n} bytes, want {want}");
    }
    Ok(d)
}

fn stats_failure(e: &anyhow::Error) -> Failure {
    Side::failed(e)
        .failure
        .unwrap_or(Failure::Error(String::new()))
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

/// The report: header, table, notes.
fn report(b: &Bench, machine: &str, url: &str, started: &str, interrupted: bool) -> String {
    let mut out = String::new();
    out.push_str(&format!("Machine: {machine}. Date: {started}.\n\n"));
    out.push_str(&format!(
        "sbxd at {url}; {} timed iterations per scenario ({} for 100 MiB transfers) after {} untimed warm-up; sbx and raw iterations alternate.{}\n\n",
        b.n,
        b.big,
        b.warm,
        if interrupted { " **Interrupted: partial results.**" } else { "" }
    ));
    out.push_str(TABLE_HEADER);
    out.push('\n');
    for name in SCENARIOS {
        if let Some(row) = b.rows.get(name) {
            out.push_str(&row.markdown());
            out.push('\n');
        }
    }
    out.push('\n');
    let mut notes: Vec<String> = vec![
        "create: sbx = POST /v2/sandboxes {vcpu 1, memoryMb 1024} until RUNNING (201, or 202 then \
         GET every poll interval); it includes sbxd's agent handshake. raw = write the same OCI \
         bundle (SpecBuilder, agent dir bound at /.sbx/bin, PID 1 `sbx-agent init`) + `runsc run \
         --detach` + `runsc state` until running. destroy: DELETE until TERMINATED vs `runsc \
         delete --force`."
            .into(),
        format!(
            "exec: POST .../exec `[\"true\"]` on a warm sandbox vs `runsc exec <cid> /bin/true`; \
             the sides alternate in blocks of {EXEC_BLOCK} timed execs, each block led by one \
             untimed exec (what a raw exec leaves running slowed the next sbx exec)."
        ),
        "Transfers: MB = 10^6 bytes; each throughput cell is the rate at that latency percentile \
         (so p95 is the slower tail); the ratio is sbx MB/s ÷ raw MB/s. Raw = `runsc exec sh -c \
         'cat > /tmp/x'` fed from memory / `runsc exec cat /tmp/x`."
            .into(),
    ];
    notes.extend(b.notes.iter().cloned());
    for row in b.rows.values() {
        for (side, s) in [("sbx", &row.sbx), ("raw", &row.raw)] {
            if let Some(Failure::Error(e)) = &s.failure {
                let e: String = e.replace('\n', " ").chars().take(400).collect();
                notes.push(format!("**{} ({side}) error**: {e}", row.name));
            }
        }
    }
    for n in notes {
        out.push_str(&format!("- {n}\n"));
    }
    out
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    let selected = select(&args.scenarios)?;
    let image_rootfs = std::fs::canonicalize(&args.image_rootfs)
        .with_context(|| format!("image rootfs {}", args.image_rootfs.display()))?;
    let agent_dir = std::fs::canonicalize(&args.agent_dir)
        .with_context(|| format!("agent dir {}", args.agent_dir.display()))?;
    if !agent_dir.join("sbx-agent").is_file() {
        bail!("{} has no sbx-agent", agent_dir.display());
    }
    let api = Api::new(
        &args.url,
        Duration::from_millis(args.poll_ms.max(1)),
        args.upload_chunk_kib * 1024,
    )?;
    api.health()
        .await
        .with_context(|| format!("sbxd is not answering at {}", args.url))?;
    let pid_of = |url: &str| {
        reqwest::Url::parse(url)
            .ok()
            .and_then(|u| u.port_or_known_default())
            .and_then(sys::pid_listening_on)
    };
    let sbxd_pid = args.sbxd_pid.or_else(|| pid_of(&args.url));
    let density_api = match &args.density_url {
        Some(u) if u.trim_end_matches('/') != args.url.trim_end_matches('/') => {
            let a = Api::new(u, Duration::from_millis(args.poll_ms.max(1)), 0)?;
            a.health()
                .await
                .with_context(|| format!("the density sbxd is not answering at {u}"))?;
            Some(a)
        }
        _ => None,
    };
    let density_url = args.density_url.clone().unwrap_or_else(|| args.url.clone());
    let density_pid = args.density_sbxd_pid.or_else(|| pid_of(&density_url));
    if sbxd_pid.is_none() {
        eprintln!("note: sbxd pid not found (pass --sbxd-pid); no RSS samples");
    }

    std::fs::create_dir_all(&args.data_dir)?;
    let work = tempfile::Builder::new()
        .prefix("sbx-bench-")
        .tempdir_in(&args.data_dir)
        .context("creating the raw state directory")?;
    let tag = uuid::Uuid::new_v4().simple().to_string()[..8].to_string();
    let shape = Shape {
        vcpu: 1,
        memory_mb: 1024,
    };
    let raw = Raw::new(
        &args.runsc,
        work.path(),
        &image_rootfs,
        &agent_dir,
        &tag,
        shape,
    )?;
    let subreaper = !args.no_subreaper && reaper::start();
    let machine = sys::machine_line(&args.runsc);
    let started = chrono::Utc::now().format("%Y-%m-%d %H:%M UTC").to_string();
    eprintln!(
        "sbx-bench {tag}: {machine}; raw state in {}",
        work.path().display()
    );

    let mut bench = Bench {
        api,
        raw,
        tag: tag.clone(),
        n: args.iterations.max(1),
        big: args.big_iterations.max(1),
        warm: args.warmup,
        selected,
        rows: BTreeMap::new(),
        notes: Vec::new(),
        sbxd_pid,
        raw_compression: args.raw_compression.clone(),
        load: load::LoadOpts {
            sandboxes: args.load_sandboxes,
            concurrency: args.load_concurrency,
            rounds: args.load_rounds,
            density: args.density_count,
            parallel: args.fill_parallel,
            settle: Duration::from_secs(args.density_settle_secs),
            op_timeout: Duration::from_secs(args.op_timeout_secs.max(1)),
        },
        density_api,
        density_url,
        density_pid,
        cpu_execs: args.cpu_execs,
        cpu_creates: args.cpu_creates,
    };
    bench.notes.push(match args.upload_chunk_kib {
        0 => "sbx uploads are sent as one body with a Content-Length.".to_string(),
        k => format!(
            "sbx uploads are streamed from memory with chunked transfer encoding, {k} KiB per \
             chunk (`--upload-chunk-kib`; sbxd's upload rate depends on it)."
        ),
    });
    bench.notes.push(if subreaper {
        "The bench is a child subreaper that reaps runsc sandbox/gofer zombies every 20 ms, as \
         sbxd does, so raw `delete` does not wait for the host's init."
            .into()
    } else {
        "The bench is NOT a child subreaper: raw `delete --force` waits for the host's init to \
         reap the sandbox processes (sbxd reaps its own)."
            .into()
    });

    let interrupted = {
        let b = &mut bench;
        let run = async move {
            if b.wants("create") || b.wants("destroy") {
                b.lifecycle().await;
            }
            if WARM_SCENARIOS.iter().any(|s| b.wants(s)) {
                b.warm_scenarios().await;
            }
            if network::SCENARIOS.iter().any(|s| b.wants(s)) {
                b.network().await;
            }
            if b.wants("sbxd-cpu") {
                b.sbxd_cpu().await;
            }
            if b.wants("exec-load") {
                b.exec_load().await;
            }
            if b.wants("density-mem") || b.wants("density-exec") {
                b.density().await;
            }
            if b.wants("connect-job") {
                b.connect().await;
            }
        };
        tokio::select! {
            _ = run => false,
            _ = tokio::signal::ctrl_c() => {
                eprintln!("interrupted: cleaning up");
                true
            }
        }
    };

    eprintln!("[cleanup]");
    let mut leftovers = bench.api.cleanup(&format!("bench-{tag}-")).await;
    if let Some(d) = &bench.density_api {
        leftovers.extend(d.cleanup(&format!("bench-{tag}-")).await);
    }
    leftovers.extend(bench.raw.cleanup().await);
    for l in &leftovers {
        eprintln!("  ! cleanup: {l}");
    }
    if args.keep_data_dir {
        let kept = work.keep();
        eprintln!("raw state kept in {}", kept.display());
    } else {
        drop(work);
    }

    print!(
        "{}",
        report(&bench, &machine, &args.url, &started, interrupted)
    );
    if !leftovers.is_empty() {
        bail!("cleanup left {} item(s) behind", leftovers.len());
    }
    if interrupted {
        std::process::exit(130);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scenario_selection() {
        assert_eq!(select(&[]).unwrap(), SCENARIOS);
        assert_eq!(
            select(&["Exec".into(), "snapshot".into()]).unwrap(),
            ["exec", "snapshot-idle", "snapshot-50MB"]
        );
        assert!(select(&["nope".into()]).is_err());
        assert_eq!(
            select(&["exec-load".into(), "density".into(), "sbxd-cpu".into()]).unwrap(),
            ["exec-load", "density-mem", "density-exec", "sbxd-cpu"]
        );
        for s in WARM_SCENARIOS.iter().chain(network::SCENARIOS) {
            assert!(SCENARIOS.contains(s));
        }
    }

    #[test]
    fn filler_has_the_length() {
        assert_eq!(filler(1_000_003).len(), 1_000_003);
        let f = filler(64);
        assert_ne!(f[0..8], f[8..16]);
    }
}
