//! Network scenarios: create latency per egress policy (`POST /v1/sandboxes`),
//! and connect time / HTTP throughput to a local test host from inside a
//! sandbox (through its proxy env) vs from the host itself.
//!
//! The test host is a network namespace `sbxbench-<tag>` joined to the host by
//! a veth pair in [`TEST_CIDR`] (host side .1, namespace side .2) running
//! `python3 -m http.server 80` over a directory with one 100 MB file. It is
//! removed when the scenarios end, fail or are interrupted (its `Drop`). No
//! other traffic is generated. sbxd only lets a sandbox reach it when started
//! with `--network-test-public-cidr 10.213.250.0/30` (a private range is
//! otherwise refused); without that the net rows read n/a.

use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use base64::Engine;
use reqwest::Method;
use serde_json::{json, Value};

use crate::stats::{Failure, Kind, Row, Side, Target};
use crate::{stats_failure, timed_val, Bench};

/// The network scenarios, in table order.
pub const SCENARIOS: &[&str] = &[
    "create-public",
    "create-none",
    "net-connect",
    "net-throughput",
];

/// The test host's /30 (pass it to sbxd as `--network-test-public-cidr`).
pub const TEST_CIDR: &str = "10.213.250.0/30";
const HOST_SIDE_IP: &str = "10.213.250.1";
const TEST_HOST_IP: &str = "10.213.250.2";
/// Size of the served file (MB = 10^6 bytes).
const FILE_BYTES: u64 = 100_000_000;
const NOT_AVAILABLE: &str = "start sbxd with --network-test-public-cidr 10.213.250.0/30";

/// The curl both sides run (`-w`: HTTP code, connect time in s, bytes/s).
fn curl_cmd() -> String {
    format!(
        "curl -s -o /dev/null --max-time 120 -w '%{{http_code}} %{{time_connect}} %{{speed_download}}' \
         http://{TEST_HOST_IP}/100mb"
    )
}

/// One curl result.
#[derive(Debug, Clone, Copy, PartialEq)]
struct CurlOut {
    code: u16,
    connect: Duration,
    /// Time to move the file at the measured rate.
    transfer: Duration,
}

fn parse_curl(out: &str) -> Result<CurlOut> {
    let f: Vec<&str> = out.split_whitespace().collect();
    let [code, connect, speed] = f[..] else {
        bail!("unexpected curl output {out:?}");
    };
    let code: u16 = code
        .parse()
        .with_context(|| format!("curl code {code:?}"))?;
    let connect: f64 = connect.parse().with_context(|| format!("{connect:?}"))?;
    let speed: f64 = speed.parse().with_context(|| format!("{speed:?}"))?;
    let transfer = if speed > 0.0 {
        Duration::from_secs_f64(FILE_BYTES as f64 / speed)
    } else {
        Duration::ZERO
    };
    Ok(CurlOut {
        code,
        connect: Duration::from_secs_f64(connect.max(0.0)),
        transfer,
    })
}

/// The netns test host; removed on drop.
struct TestHost {
    ns: String,
    host_if: String,
    server: Option<Child>,
    _dir: tempfile::TempDir,
}

fn run(cmd: &str, args: &[&str]) -> Result<()> {
    let out = Command::new(cmd)
        .args(args)
        .output()
        .with_context(|| format!("running {cmd}"))?;
    if !out.status.success() {
        bail!(
            "{cmd} {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

impl TestHost {
    fn start(tag: &str, parent: &Path) -> Result<TestHost> {
        let taken = Command::new("ip")
            .args(["-o", "addr", "show", "to", TEST_CIDR])
            .output()
            .context("running ip")?;
        if !String::from_utf8_lossy(&taken.stdout).trim().is_empty() {
            bail!("{TEST_CIDR} is already configured on this host (a stale test host?)");
        }
        let short = &tag[..tag.len().min(8)];
        let dir = tempfile::Builder::new()
            .prefix("sbx-bench-www-")
            .tempdir_in(parent)?;
        let file = std::fs::File::create(dir.path().join("100mb"))?;
        file.set_len(FILE_BYTES)?;
        let mut host = TestHost {
            ns: format!("sbxbench-{short}"),
            host_if: format!("sbxb{short}"),
            server: None,
            _dir: dir,
        };
        let ns_if = format!("sbxn{short}");
        let (ns, host_if) = (host.ns.clone(), host.host_if.clone());
        run("ip", &["netns", "add", &ns])?;
        run(
            "ip",
            &[
                "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
            ],
        )?;
        run("ip", &["link", "set", &ns_if, "netns", &ns])?;
        run(
            "ip",
            &[
                "addr",
                "add",
                &format!("{HOST_SIDE_IP}/30"),
                "dev",
                &host_if,
            ],
        )?;
        run("ip", &["link", "set", &host_if, "up"])?;
        let in_ns = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &ns];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        in_ns(&[
            "ip",
            "addr",
            "add",
            &format!("{TEST_HOST_IP}/30"),
            "dev",
            &ns_if,
        ])?;
        in_ns(&["ip", "link", "set", &ns_if, "up"])?;
        in_ns(&["ip", "link", "set", "lo", "up"])?;
        let child = Command::new("ip")
            .args(["netns", "exec", &ns, "python3", "-m", "http.server", "80"])
            .args(["--bind", TEST_HOST_IP, "--directory"])
            .arg(host._dir.path())
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .context("starting python3 -m http.server in the test netns")?;
        host.server = Some(child);
        let addr: SocketAddr = format!("{TEST_HOST_IP}:80").parse()?;
        let deadline = Instant::now() + Duration::from_secs(10);
        while TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
            if Instant::now() > deadline {
                bail!("the test host's http.server did not come up on {addr}");
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Ok(host)
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        if let Some(mut c) = self.server.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

/// curl on the host.
async fn host_curl() -> Result<CurlOut> {
    let out = tokio::process::Command::new("sh")
        .args(["-c", &curl_cmd()])
        .env_remove("http_proxy")
        .env_remove("HTTP_PROXY")
        .env_remove("all_proxy")
        .env_remove("ALL_PROXY")
        .output()
        .await
        .context("running curl on the host")?;
    let r = parse_curl(&String::from_utf8_lossy(&out.stdout))?;
    if r.code != 200 {
        bail!("host curl: HTTP {}", r.code);
    }
    Ok(r)
}

/// curl in the sandbox, through its proxy env (the sandbox's environment).
async fn sandbox_curl(b: &Bench, id: &str) -> Result<CurlOut> {
    let r = b
        .api
        .call(
            Method::POST,
            &format!("/v2/sandboxes/{id}/exec"),
            Some(json!({ "command": ["sh", "-c", curl_cmd()], "timeout": "150000ms" })),
        )
        .await?;
    let d = &r.body["data"];
    let stdout = d["stdout"].as_str().unwrap_or("");
    let stdout = match d["encoding"].as_str() {
        Some("base64") => String::from_utf8_lossy(
            &base64::engine::general_purpose::STANDARD
                .decode(stdout)
                .context("exec stdout")?,
        )
        .into_owned(),
        _ => stdout.to_string(),
    };
    parse_curl(&stdout).with_context(|| format!("sandbox curl (exit {})", d["exitCode"]))
}

impl Bench {
    fn create_v1_body(&self, name: String, mode: &str) -> Value {
        json!({ "name": name, "vcpu": 1, "memoryMb": 1024, "network": { "mode": mode } })
    }

    /// Every selected network scenario.
    pub(crate) async fn network(&mut self) {
        for (row_name, mode) in [("create-public", "public"), ("create-none", "none")] {
            if self.wants(row_name) {
                self.create_policy(row_name, mode).await;
            }
        }
        if self.wants("net-connect") || self.wants("net-throughput") {
            self.net_transfer().await;
        }
    }

    async fn create_policy(&mut self, row_name: &'static str, mode: &str) {
        let mut row = Row::new(row_name, Kind::Latency, Target::None);
        row.raw = Side::skipped("sbx only; compare create-public with create-none");
        for i in 0..self.warm + self.n {
            eprintln!("[{row_name}] {}/{}", i + 1, self.warm + self.n);
            if !row.sbx.active() {
                break;
            }
            let body = self.create_v1_body(self.sbx_name(row_name, i), mode);
            match timed_val(self.api.create_at("/v1/sandboxes", body)).await {
                Ok((id, d)) => {
                    row.sbx.take(i, self.warm, Ok(d));
                    if let Err(e) = self.api.destroy(&id).await {
                        eprintln!("  ! destroying {id}: {e:#}");
                    }
                }
                Err(e) => row.sbx.take(i, self.warm, Err(e)),
            }
        }
        if row_name == "create-public" {
            self.notes.push(
                "create-public / create-none: POST /v1/sandboxes {vcpu 1, memoryMb 1024, network \
                 {mode}} until RUNNING, then DELETE (untimed); no raw equivalent."
                    .into(),
            );
        }
        self.put(row_name, row);
    }

    async fn net_transfer(&mut self) {
        let mut connect = Row::new("net-connect", Kind::Latency, Target::None);
        let mut thru = Row::new(
            "net-throughput",
            Kind::Throughput { bytes: FILE_BYTES },
            Target::None,
        );
        self.notes.push(format!(
            "net-connect / net-throughput: `{}` to a netns test host (veth, {TEST_CIDR}, \
             python3 http.server, a 100 MB file), sbx column = exec'd in a `public` sandbox with \
             its default proxy env (time_connect is then the connect to the in-sandbox proxy), \
             raw column = the same curl on the host. Throughput = 100 MB / speed_download. Needs \
             sbxd started with `--network-test-public-cidr {TEST_CIDR}`.",
            curl_cmd()
        ));
        let host = match TestHost::start(&self.tag, std::env::temp_dir().as_path()) {
            Ok(h) => h,
            Err(e) => {
                eprintln!("  ! test host: {e:#}");
                connect.sbx = Side::failed(&e);
                connect.raw = Side::failed(&e);
                thru.sbx = Side::failed(&e);
                thru.raw = Side::failed(&e);
                self.put_net(connect, thru);
                return;
            }
        };
        let sbx = self
            .api
            .create_at(
                "/v1/sandboxes",
                self.create_v1_body(self.sbx_name("net", 0), "public"),
            )
            .await;
        if let Err(e) = &sbx {
            eprintln!("  ! net sandbox: {e:#}");
            connect.sbx = Side::failed(e);
            thru.sbx = Side::failed(e);
        }
        for i in 0..self.warm + self.n {
            eprintln!("[net] {}/{}", i + 1, self.warm + self.n);
            if let (true, Ok(id)) = (connect.sbx.active(), &sbx) {
                match sandbox_curl(self, id).await {
                    Ok(r) if r.code == 200 => {
                        connect.sbx.take(i, self.warm, Ok(r.connect));
                        thru.sbx.take(i, self.warm, Ok(r.transfer));
                    }
                    Ok(r) => {
                        let denied = self.denied(id).await;
                        if denied > 0 {
                            let f = Failure::NotAvailable(NOT_AVAILABLE.into());
                            connect.sbx.failure = Some(f.clone());
                            thru.sbx.failure = Some(f);
                        } else {
                            let e = anyhow!("sandbox curl: HTTP {}", r.code);
                            connect.sbx.fail(&e);
                            thru.sbx.fail(&e);
                        }
                    }
                    Err(e) => {
                        connect.sbx.fail(&e);
                        thru.sbx.take(i, self.warm, Err(e));
                    }
                }
            }
            if connect.raw.active() {
                match host_curl().await {
                    Ok(r) => {
                        connect.raw.take(i, self.warm, Ok(r.connect));
                        thru.raw.take(i, self.warm, Ok(r.transfer));
                    }
                    Err(e) => {
                        connect.raw.fail(&e);
                        thru.raw.take(i, self.warm, Err(e));
                    }
                }
            }
        }
        if let Ok(id) = &sbx {
            if let Err(e) = self.api.destroy(id).await {
                eprintln!("  ! destroying the net sandbox: {e:#}");
            }
        }
        drop(host);
        self.put_net(connect, thru);
    }

    /// `network.denied` of `GET /v1/sandboxes/{id}` (0 when unknown).
    async fn denied(&self, id: &str) -> u64 {
        match self
            .api
            .call(Method::GET, &format!("/v1/sandboxes/{id}"), None)
            .await
        {
            Ok(r) => r.body["data"]["network"]["denied"].as_u64().unwrap_or(0),
            Err(e) => {
                eprintln!("  ! GET /v1/sandboxes/{id}: {:?}", stats_failure(&e));
                0
            }
        }
    }

    fn put_net(&mut self, connect: Row, thru: Row) {
        if self.wants("net-connect") {
            self.put("net-connect", connect);
        }
        if self.wants("net-throughput") {
            self.put("net-throughput", thru);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_curl_output() {
        let r = parse_curl("200 0.000412 250000000.000").unwrap();
        assert_eq!(r.code, 200);
        assert_eq!(r.connect, Duration::from_micros(412));
        assert_eq!(r.transfer, Duration::from_millis(400));
        assert_eq!(parse_curl("403 0.0001 0").unwrap().code, 403);
        assert!(parse_curl("").is_err());
        assert!(parse_curl("200 x 1").is_err());
    }
}
