//! The egress broker against hostile guest code on real runsc (issue #23,
//! items 6 and 7): plain HTTP smuggled behind a leading 0x16 to port 443,
//! and a DNS flood.
//!
//! Traffic goes only to loopback or to a test host this file creates: a
//! network namespace `sbxe-<rand>` with a veth pair in 10.215.x.0/30, running
//! a small python server; only that /30 is marked public, through the
//! test-only `--network-test-public-cidr`. The names the flood looks up are
//! in the host's /etc/hosts (pointing at the test host), so no lookup leaves
//! this machine. Everything is removed by Drop guards.

mod common;

use common::netns::{Names, Veth};
use common::{b64, Daemon};
use serde_json::{json, Value};
use std::process::Stdio;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Test hosts of this file (network.rs uses 10.213, connect_host 10.214).
const NAMES: Names = Names {
    net: "10.215",
    ns: "sbxe-",
    host_if: "sbxeh",
    ns_if: "sbxen",
};

/// A raw TCP server on :443 that answers plain HTTP to any request it sees and
/// logs, per connection, the hex of every byte it received (one line at close).
const RECORDER_PY: &str = r#"
import socket, sys, threading
ip, port, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]
lock = threading.Lock()
def serve(c):
    got, answered = b"", False
    try:
        while True:
            d = c.recv(65536)
            if not d:
                break
            got += d
            if b"\r\n\r\n" in got and not answered:
                answered = True
                c.sendall(b"HTTP/1.0 200 OK\r\nContent-Length: 9\r\n\r\nsmuggled\n")
    except OSError:
        pass
    with lock, open(log, "a") as f:
        f.write(got.hex() + "\n")
    c.close()
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind((ip, port))
s.listen(64)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
"#;

/// In the guest: a CONNECT tunnel to argv[1]:443 through the sandbox's proxy,
/// then either the smuggled request (`smuggle`) or a real TLS ClientHello in
/// three writes and some bytes after it (`hello`); prints what came back.
const CLIENT_PY: &str = r#"
import socket, ssl, sys
ip, mode = sys.argv[1], sys.argv[2]
s = socket.create_connection(("127.0.0.1", 3128), timeout=30)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
s.sendall(b"CONNECT %s:443 HTTP/1.1\r\nHost: %s:443\r\n\r\n" % (ip.encode(), ip.encode()))
resp = b""
while b"\r\n\r\n" not in resp:
    d = s.recv(1)
    if not d:
        break
    resp += d
print("connect", resp.split(b"\r\n")[0].decode())
if mode == "smuggle":
    s.sendall(b"\x16GET /smuggled HTTP/1.1\r\nHost: x\r\n\r\n")
else:
    inb, outb = ssl.MemoryBIO(), ssl.MemoryBIO()
    tls = ssl.create_default_context().wrap_bio(inb, outb, server_hostname="egress.test")
    try:
        tls.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outb.read()
    for part in (hello[:3], hello[3:120], hello[120:]):
        s.sendall(part)
    s.sendall(b"after")
    print("sent", (hello + b"after").hex())
    s.shutdown(socket.SHUT_WR)
got = b""
try:
    while True:
        d = s.recv(65536)
        if not d:
            break
        got += d
except OSError as e:
    print("error", type(e).__name__)
print("got", got.hex())
"#;

/// In the guest: `threads` threads look names up for `seconds`; prints a JSON summary.
const FLOOD_PY: &str = r#"
import json, socket, sys, threading, time
name, seconds, threads = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
counts = {"ok": 0, "failed": 0}
lock = threading.Lock()
start = time.time()
def loop():
    while time.time() - start < seconds:
        try:
            socket.getaddrinfo(name, 443, socket.AF_INET, socket.SOCK_STREAM)
            k = "ok"
        except socket.gaierror:
            k = "failed"
        with lock:
            counts[k] += 1
ts = [threading.Thread(target=loop) for _ in range(threads)]
for t in ts:
    t.start()
for t in ts:
    t.join()
counts["start"], counts["end"] = start, time.time()
print(json.dumps(counts))
"#;

/// Serialises this binary's edits of /etc/hosts (read-modify-write).
static HOSTS_FILE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A unique /etc/hosts entry, removed again on drop.
struct HostsEntry {
    name: String,
}

impl HostsEntry {
    fn set(name: &str, ip: &str) -> HostsEntry {
        let _edit = HOSTS_FILE.lock().unwrap_or_else(|p| p.into_inner());
        let mut hosts = std::fs::read_to_string("/etc/hosts").unwrap();
        hosts.push_str(&format!("{ip} {name} # sbx egress test\n"));
        // /etc/hosts may be a bind mount: rewrite in place, never rename over it.
        std::fs::write("/etc/hosts", hosts).unwrap();
        HostsEntry {
            name: name.to_string(),
        }
    }
}

impl Drop for HostsEntry {
    fn drop(&mut self) {
        let _edit = HOSTS_FILE.lock().unwrap_or_else(|p| p.into_inner());
        if let Ok(hosts) = std::fs::read_to_string("/etc/hosts") {
            let out: String = hosts
                .lines()
                .filter(|l| !l.contains(&self.name))
                .map(|l| format!("{l}\n"))
                .collect();
            let _ = std::fs::write("/etc/hosts", out);
        }
    }
}

async fn create(d: &Daemon, name: &str, mode: &str) -> String {
    let (status, body) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024, "network": {"mode": mode}})),
        )
        .await;
    assert_eq!(status, 201, "create: {body}");
    body["data"]["id"].as_str().unwrap().to_string()
}

/// Runs argv with a 60 s budget; (exitCode, stdout, stderr).
async fn run(d: &Daemon, id: &str, argv: &[&str]) -> (i64, String, String) {
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            Some(json!({"command": argv, "timeout": "60000ms"})),
        )
        .await;
    assert_eq!(status, 200, "exec {argv:?}: {body}");
    let data = &body["data"];
    (
        data["exitCode"].as_i64().unwrap(),
        b64(&data["stdout"]),
        b64(&data["stderr"]),
    )
}

async fn network_of(d: &Daemon, id: &str) -> Value {
    let (status, body) = d.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    body["data"]["network"].clone()
}

fn reasons(net: &Value) -> Vec<String> {
    net["recentDenials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["reason"].as_str().unwrap_or("").to_string())
        .collect()
}

/// The value after `key ` on a line of the client's output.
fn field<'a>(out: &'a str, key: &str) -> &'a str {
    out.lines()
        .find_map(|l| l.strip_prefix(&format!("{key} ")))
        .unwrap_or_else(|| panic!("no {key:?} in {out:?}"))
}

/// Lines the recorder logged (one per closed connection).
fn logged(path: &std::path::Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(String::from)
        .collect()
}

/// Waits until the recorder has logged `n` connections (it logs at close).
async fn wait_logged(path: &std::path::Path, n: usize) -> Vec<String> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let lines = logged(path);
        if lines.len() >= n {
            return lines;
        }
        assert!(Instant::now() < deadline, "recorder logged {lines:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn https_only_never_delivers_plain_http_behind_a_leading_0x16() {
    let mut host = Veth::create(&NAMES);
    let dir = tempfile::tempdir().unwrap();
    let (script, log) = (dir.path().join("recorder.py"), dir.path().join("log"));
    std::fs::write(&script, RECORDER_PY).unwrap();
    let mut server = host.command("python3");
    server
        .args([
            script.to_str().unwrap(),
            &host.ip,
            "443",
            log.to_str().unwrap(),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    host.spawn(&mut server);
    let addr = format!("{}:443", host.ip).parse().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_err() {
        assert!(Instant::now() < deadline, "recorder did not start");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The probes above were connections too: start counting after them.
    let probes = wait_logged(&log, 1).await.len();
    let d = Daemon::start(&["--network-test-public-cidr", &host.cidr]).await;
    let id = create(&d, "egress-smuggle", "https-only").await;

    let (code, out, err) = run(&d, &id, &["python3", "-c", CLIENT_PY, &host.ip, "smuggle"]).await;
    assert_eq!(code, 0, "{out} {err}");
    assert!(field(&out, "connect").contains(" 200"), "{out}");
    // Nothing came back, and the server never saw a byte of it.
    assert_eq!(field(&out, "got"), "", "plain HTTP answered: {out}");
    let lines = wait_logged(&log, probes + 1).await;
    assert_eq!(lines[probes], "", "the server received {:?}", lines[probes]);
    let net = network_of(&d, &id).await;
    assert_eq!(
        reasons(&net).last().map(String::as_str),
        Some("not-tls"),
        "{net}"
    );

    // A real ClientHello in three writes, then more bytes: all of it arrives, in order.
    let (code, out, err) = run(&d, &id, &["python3", "-c", CLIENT_PY, &host.ip, "hello"]).await;
    assert_eq!(code, 0, "{out} {err}");
    let lines = wait_logged(&log, probes + 2).await;
    assert_eq!(lines[probes + 1], field(&out, "sent"), "{out}");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_dns_flood_is_refused_past_the_rate_and_others_stay_fast() {
    let host = Veth::create(&NAMES);
    let name = format!("flood-{}.sbx-test.invalid", host.ns);
    let _entry = HostsEntry::set(&name, &host.ip);
    let d = Daemon::start(&["--network-test-public-cidr", &host.cidr]).await;
    let flooder = create(&d, "egress-flood", "public").await;
    // It resolves, through the guest's DNS responder and the broker.
    let lookup = "import socket, sys; print(socket.gethostbyname(sys.argv[1]))";
    let (code, out, err) = run(&d, &flooder, &["python3", "-c", lookup, &name]).await;
    let net = network_of(&d, &flooder).await;
    assert_eq!((code, out.trim()), (0, host.ip.as_str()), "{err} {net}");

    let seconds = "12";
    let argv = ["python3", "-c", FLOOD_PY, &name, seconds, "4"];
    let flood = run(&d, &flooder, &argv);
    let others = async {
        // Measure only once the flood is being refused.
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let net = network_of(&d, &flooder).await;
            if reasons(&net).iter().any(|r| r == "dns-rate-limit") {
                break;
            }
            assert!(Instant::now() < deadline, "no DNS refusal seen: {net}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let mut health = Vec::new();
        let t = Instant::now();
        let other = d.create_running("egress-other").await;
        let create = t.elapsed();
        let t = Instant::now();
        let (code, out, _) = d.exec(&other, &["echo", "hi"]).await;
        let exec = t.elapsed();
        assert_eq!((code, out.as_str()), (0, "hi\n"));
        for _ in 0..20 {
            let t = Instant::now();
            let r = d.http.get(d.url("/healthz")).send().await.unwrap();
            assert!(r.status().is_success());
            health.push(t.elapsed());
        }
        let done = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        (create, exec, health, done.as_secs_f64())
    };
    let ((code, out, err), (create, exec, health, measured_at)) = tokio::join!(flood, others);
    assert_eq!(code, 0, "{err}");
    let counts: Value = serde_json::from_str(out.trim()).unwrap();
    let (ok, failed) = (
        counts["ok"].as_f64().unwrap(),
        counts["failed"].as_f64().unwrap(),
    );
    let elapsed = counts["end"].as_f64().unwrap() - counts["start"].as_f64().unwrap();
    let worst = health.iter().max().unwrap();
    eprintln!(
        "flood: {ok} resolved, {failed} refused in {elapsed:.1} s; meanwhile create {create:?}, exec {exec:?}, healthz max {worst:?}"
    );
    // The measurements ran while the flood did.
    assert!(
        measured_at < counts["end"].as_f64().unwrap(),
        "the flood ended first"
    );
    // Refused past the rate: at most the burst plus 50/s got through.
    assert!(failed > 0.0, "nothing refused: {counts}");
    assert!(
        ok <= 100.0 + 50.0 * (elapsed + 1.0),
        "{ok} lookups in {elapsed} s"
    );
    let net = network_of(&d, &flooder).await;
    assert!(net["denied"].as_u64().unwrap() > 0, "{net}");
    // Others stayed fast (generous bounds for a loaded 2-core machine).
    assert!(*worst < Duration::from_millis(500), "healthz {health:?}");
    assert!(exec < Duration::from_secs(5), "exec {exec:?}");
    assert!(create < Duration::from_secs(30), "create {create:?}");
}
