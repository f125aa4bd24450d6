//! Connect rows: what one job costs (a sync run that commits one record,
//! against raw `runsc run` + `node -e 0` + delete) and records per second
//! committed end to end by one sync producing 1,000,000 small records
//! (sandbox start, runner, channel, spool, one transaction; target ≥ 50,000/s).

use crate::stats::{Kind, Row, Target};
use crate::{timed, Bench};
use anyhow::{anyhow, bail, Context, Result};
use bytes::Bytes;
use reqwest::Method;
use serde_json::{json, Value};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// The example package whose `generate` sync needs no network.
const PACKAGE: &str = "connector-items";
/// Records of the throughput run.
const BIG_RECORDS: u64 = 1_000_000;
/// The target, records per second.
const TARGET_RECORDS_PER_SEC: f64 = 50_000.0;
/// Longest build or run the bench waits for.
const WAIT: Duration = Duration::from_secs(600);

/// An example package in this repository.
fn package_dir(package: &str) -> PathBuf {
    let here = Path::new("examples").join(package);
    if here.is_dir() {
        return here;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../../examples")
        .join(package)
}

/// An example package as a gzip tarball, with a version of its own so that every
/// bench run uploads and builds a new immutable version.
pub(crate) async fn tarball(package: &str, version: &str) -> Result<Bytes> {
    let src = package_dir(package);
    let tmp = tempfile::tempdir()?;
    for entry in std::fs::read_dir(&src).with_context(|| format!("reading {}", src.display()))? {
        let entry = entry?;
        if entry.file_type()?.is_file() {
            std::fs::copy(entry.path(), tmp.path().join(entry.file_name()))?;
        }
    }
    let manifest = tmp.path().join("package.json");
    let mut pkg: Value = serde_json::from_slice(&std::fs::read(&manifest)?)?;
    pkg["version"] = json!(version);
    std::fs::write(&manifest, serde_json::to_vec_pretty(&pkg)?)?;
    let out = tokio::process::Command::new("tar")
        .arg("-C")
        .arg(tmp.path())
        .args(["-czf", "-", "."])
        .output()
        .await?;
    if !out.status.success() {
        bail!("tar: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(Bytes::from(out.stdout))
}

impl Bench {
    /// `connect-job` row and the records/s note.
    pub(crate) async fn connect(&mut self) {
        let mut job = Row::new("connect-job", Kind::Latency, Target::None);
        eprintln!("[connect] package, build, connection");
        match self.connect_sbx(&mut job).await {
            Ok(note) => self.notes.push(note),
            Err(e) => {
                eprintln!("  ! connect: {e:#}");
                self.notes.push(format!("Connect: not measured ({e:#})."));
                job.sbx.fail(&e);
            }
        }
        eprintln!("[connect] raw: runsc run + node -e 0 + delete");
        for i in 0..self.warm + self.n {
            let raw = &self.raw;
            let r = timed(async {
                let cid = raw.create().await?;
                let ran = raw.exec_ok(&cid, &["/usr/local/bin/node", "-e", "0"]).await;
                raw.destroy(&cid).await?;
                ran
            })
            .await;
            job.raw.take(i, self.warm, r);
            if !job.raw.active() {
                break;
            }
        }
        self.notes.push(
            "`connect-job`: one sync run that commits one record, from `POST .../runs` until the \
             run is succeeded (fresh sandbox, runner, channel, commit, teardown), against raw \
             `runsc run` + `runsc exec node -e 0` + `runsc delete`."
                .into(),
        );
        self.put("connect-job", job);
    }

    /// Uploads the example package `package` as `version` and builds it.
    pub(crate) async fn upload_and_build(&self, package: &str, version: &str) -> Result<()> {
        let up = self
            .api
            .post_bytes(
                "/v1/connect/packages",
                "application/gzip",
                tarball(package, version).await?,
            )
            .await?;
        if !up.status.is_success() {
            bail!("upload: {}", up.body);
        }
        let build = self
            .api
            .call(
                Method::POST,
                &format!("/v1/connect/packages/{package}/versions/{version}/builds"),
                None,
            )
            .await?
            .data_str("id")?;
        let built = self
            .wait_for(
                &format!("/v1/connect/builds/{build}"),
                &["succeeded", "failed"],
            )
            .await?;
        if built["status"] != "succeeded" {
            bail!("build failed: {}", built["log"]);
        }
        Ok(())
    }

    async fn connect_sbx(&self, job: &mut Row) -> Result<String> {
        let version = format!("1.0.0-bench.{}", self.tag);
        self.upload_and_build(PACKAGE, &version).await?;
        let conn = self
            .api
            .call(
                Method::POST,
                "/v1/connect/connections",
                Some(json!({
                    "name": format!("bench-{}", self.tag),
                    "package": PACKAGE,
                    "version": version,
                    "config": {"generateCount": 1},
                    "origin": "https://example.invalid",
                    "credentials": {"type": "apiKey", "key": "bench-key"},
                })),
            )
            .await?
            .data_str("id")?;
        let result = self.connect_runs(&conn, job).await;
        let _ = self
            .api
            .call(
                Method::DELETE,
                &format!("/v1/connect/connections/{conn}"),
                None,
            )
            .await;
        result
    }

    async fn connect_runs(&self, conn: &str, job: &mut Row) -> Result<String> {
        for i in 0..self.warm + self.n {
            eprintln!("[connect] job {}/{}", i + 1, self.warm + self.n);
            let r = timed(self.run_sync(conn)).await;
            job.sbx.take(i, self.warm, r);
            if !job.sbx.active() {
                break;
            }
        }
        self.api
            .call(
                Method::PATCH,
                &format!("/v1/connect/connections/{conn}"),
                Some(json!({"config": {"generateCount": BIG_RECORDS}})),
            )
            .await?;
        eprintln!("[connect] one sync of {BIG_RECORDS} records");
        let started = Instant::now();
        let run = self.run_sync(conn).await?;
        let secs = started.elapsed().as_secs_f64();
        let committed = run["recordsCommitted"].as_u64().unwrap_or(0);
        if committed != BIG_RECORDS {
            bail!("the big run committed {committed} records, not {BIG_RECORDS}: {run}");
        }
        let rate = committed as f64 / secs;
        let met = if rate >= TARGET_RECORDS_PER_SEC {
            "met"
        } else {
            "**not met**"
        };
        Ok(format!(
            "Connect end to end: one sync run producing {BIG_RECORDS} small records (batches of \
             1,000, spooled, committed in one transaction) took {secs:.1} s from `POST .../runs` \
             to succeeded (server-side `durationMs` {}): **{rate:.0} records/s** (target ≥ \
             {TARGET_RECORDS_PER_SEC:.0}/s: {met}).",
            run["durationMs"]
        ))
    }

    /// Starts the `generate` sync and waits until the run ends; fails unless it succeeded.
    async fn run_sync(&self, conn: &str) -> Result<Value> {
        let run = self
            .api
            .call(
                Method::POST,
                &format!("/v1/connect/connections/{conn}/syncs/generate/runs"),
                None,
            )
            .await?
            .data_str("id")?;
        let done = self
            .wait_for(&format!("/v1/connect/runs/{run}"), &["succeeded", "failed"])
            .await?;
        if done["status"] != "succeeded" {
            return Err(anyhow!("run {run} failed: {done}"));
        }
        Ok(done)
    }

    /// Polls `path` until `data.status` is one of `ends`; returns `data`.
    pub(crate) async fn wait_for(&self, path: &str, ends: &[&str]) -> Result<Value> {
        let deadline = Instant::now() + WAIT;
        loop {
            let got = self.api.call(Method::GET, path, None).await?.body["data"].clone();
            if ends.iter().any(|e| got["status"] == *e) {
                return Ok(got);
            }
            if Instant::now() > deadline {
                bail!("{path} still {} after {WAIT:?}", got["status"]);
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}
