//! Network egress policy on real runsc (issue #5).
//!
//! Traffic goes only to loopback or to test hosts this file creates: a network
//! namespace `sbxt-<rand>` with a veth pair in 10.213.x.0/30, running small
//! python servers. Only those /30s are marked public, through the test-only
//! `--network-test-public-cidr`. Everything is removed by Drop guards.

mod common;

use common::netns::{make_certs, Names, Veth};
use common::Daemon;
use serde_json::{json, Value};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

const IGNORE: &str = "needs root, runsc and the image; run ./scripts/test";

/// Test hosts of this file: 10.213.x, apart from `connect_host` (10.214.x).
const NAMES: Names = Names {
    net: "10.213",
    ns: "sbxt-",
    host_if: "sbxh",
    ns_if: "sbxn",
};

/// A host in its own network namespace, reachable from the host through a veth pair.
struct TestHost {
    // Dropped first: stops the servers and removes the namespace before the certs go.
    pub veth: Veth,
    pub certs: Option<tempfile::TempDir>,
}

impl TestHost {
    fn create() -> TestHost {
        TestHost {
            veth: Veth::create(&NAMES),
            certs: None,
        }
    }

    /// Starts the plain HTTP server on :80 and the TLS server on :443 (test CA).
    pub fn serve_http_and_tls(&mut self, names: &[&str]) {
        let dir = tempfile::tempdir().unwrap();
        let certs = make_certs(dir.path(), &self.veth.ip, names);
        let script = dir.path().join("server.py");
        std::fs::write(&script, SERVER_PY).unwrap();
        // Both servers get the same script; the TLS one also gets the key pair.
        let script = script.to_string_lossy();
        let (pem, key) = (certs.pem.to_string_lossy(), certs.key.to_string_lossy());
        let ip = self.veth.ip.clone();
        for args in [
            vec![&*script, &ip, "80"],
            vec![&*script, &ip, "443", &pem, &key],
        ] {
            let mut server = self.veth.command("python3");
            server
                .args(args)
                .stdout(Stdio::null())
                .stderr(Stdio::null());
            self.veth.spawn(&mut server);
        }
        self.certs = Some(dir);
        for port in [80, 443] {
            self.wait_port(port);
        }
    }

    fn wait_port(&self, port: u16) {
        self.veth.wait_port(port);
    }

    pub fn ca_pem(&self) -> Vec<u8> {
        std::fs::read(self.certs.as_ref().unwrap().path().join("ca.pem")).unwrap()
    }
}

const SERVER_PY: &str = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        if self.path.startswith("/bulk/"):
            n = int(self.path[6:])
            self.send_response(200)
            self.send_header("Content-Length", str(n))
            self.end_headers()
            chunk = b"x" * 65536
            while n > 0:
                k = min(n, len(chunk))
                self.wfile.write(chunk[:k])
                n -= k
            return
        body = ("hello-%s\n" % ("tls" if len(sys.argv) > 3 else "plain")).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a):
        pass
s = http.server.ThreadingHTTPServer((sys.argv[1], int(sys.argv[2])), H)
if len(sys.argv) > 3:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[3], sys.argv[4])
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
s.serve_forever()
"#;

/// Serialises this binary's edits of /etc/hosts: tests run in parallel, and
/// two read-modify-write cycles at once lose one of the entries.
static HOSTS_FILE: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// A unique /etc/hosts entry, removed again on drop.
struct HostsEntry {
    name: String,
}

impl HostsEntry {
    fn set(name: &str, ip: &str) -> HostsEntry {
        let e = HostsEntry {
            name: name.to_string(),
        };
        e.point_to(ip);
        e
    }

    fn point_to(&self, ip: &str) {
        let _edit = HOSTS_FILE.lock().unwrap_or_else(|p| p.into_inner());
        let hosts = std::fs::read_to_string("/etc/hosts").unwrap();
        let mut out: String = hosts
            .lines()
            .filter(|l| !l.contains(&self.name))
            .map(|l| format!("{l}\n"))
            .collect();
        out.push_str(&format!("{ip} {} # sbx network test\n", self.name));
        // /etc/hosts may be a bind mount: rewrite in place, never rename over it.
        std::fs::write("/etc/hosts", out).unwrap();
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

async fn create_v1(d: &Daemon, name: &str, network: Value) -> String {
    let (status, body) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": name, "vcpu": 1, "memoryMb": 1024, "network": network})),
        )
        .await;
    assert_eq!(status, 201, "create: {body}");
    body["data"]["id"].as_str().unwrap().to_string()
}

async fn upload(d: &Daemon, id: &str, path: &str, bytes: Vec<u8>) {
    let resp = d
        .http
        .put(d.url(&format!("/v2/sandboxes/{id}/files?path={path}")))
        .body(bytes)
        .send()
        .await
        .unwrap();
    assert!(resp.status().is_success(), "upload: {}", resp.status());
}

async fn network_of(d: &Daemon, id: &str) -> Value {
    let (status, body) = d.call("GET", &format!("/v1/sandboxes/{id}"), None).await;
    assert_eq!(status, 200, "{body}");
    body["data"]["network"].clone()
}

fn denial_reasons(net: &Value) -> Vec<(String, String)> {
    net["recentDenials"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["host"].as_str().unwrap().to_string(),
                d["reason"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// `curl` through the HTTP proxy with NO_PROXY cleared (so loopback goes to the proxy too);
/// prints the HTTP status (000 when none).
fn curl_proxied(url: &str, extra: &str) -> String {
    format!("NO_PROXY= no_proxy= curl -s -o /dev/null -w '%{{http_code}}' --max-time 20 {extra} '{url}'")
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn public_allows_test_host_and_refuses_everything_internal() {
    let _ = IGNORE;
    let mut public = TestHost::create();
    public.serve_http_and_tls(&[]);
    let private = TestHost::create();
    let d = Daemon::start(&["--network-test-public-cidr", &public.veth.cidr]).await;
    let id = create_v1(&d, "net-public", json!({"mode": "public"})).await;
    upload(&d, &id, "/tmp/ca.pem", public.ca_pem()).await;

    // Proxy environment is there (and the user's environment could override it).
    let (code, env, err) = d.sh(&id, "env").await;
    assert!(
        env.contains("HTTPS_PROXY=http://127.0.0.1:3128"),
        "{code} {env} {err}"
    );
    assert!(env.contains("ALL_PROXY=socks5h://127.0.0.1:1080"), "{env}");
    assert!(env.contains("NODE_USE_ENV_PROXY=1"), "{env}");

    // 443 with the test CA, through the env proxy.
    let (code, out, err) = d
        .sh(
            &id,
            &format!(
                "curl -sS --max-time 20 --cacert /tmp/ca.pem https://{}/",
                public.veth.ip
            ),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "hello-tls\n"), "{err}");
    // Plain HTTP through the proxy (absolute form) and through SOCKS5.
    let (code, out, err) = d
        .sh(
            &id,
            &format!("curl -sS --max-time 20 http://{}/", public.veth.ip),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "hello-plain\n"), "{err}");
    let (code, out, err) = d
        .sh(
            &id,
            &format!(
            "curl -sS --max-time 20 -x socks5h://127.0.0.1:1080 --cacert /tmp/ca.pem https://{}/",
            public.veth.ip
        ),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "hello-tls\n"), "{err}");
    // A larger transfer crosses many credit windows intact.
    let (code, out, err) = d
        .sh(
            &id,
            &format!(
                "curl -sS --max-time 60 http://{}/bulk/20000000 | wc -c",
                public.veth.ip
            ),
        )
        .await;
    assert_eq!((code, out.trim()), (0, "20000000"), "{err}");

    // Refused by policy (403 from the proxy), never dialled.
    let sbxd = format!("http://127.0.0.1:{}/healthz", d.port);
    let host_addr = format!("http://{}:{}/healthz", public.veth.host_ip, d.port);
    for (url, reason) in [
        (format!("http://{}/", private.veth.ip), "private"),
        (sbxd.clone(), "loopback"),
        (format!("http://[::1]:{}/healthz", d.port), "loopback"),
        (host_addr, "host-address"),
        (
            "http://169.254.169.254/latest/meta-data/".to_string(),
            "link-local",
        ),
        ("http://[::ffff:127.0.0.1]/".to_string(), "loopback"),
    ] {
        let (_, status, _) = d.sh(&id, &curl_proxied(&url, "")).await;
        assert_eq!(status, "403", "{url} must be refused");
        let net = network_of(&d, &id).await;
        let last = denial_reasons(&net).pop().unwrap();
        assert_eq!(last.1, reason, "{url}: {net}");
    }
    // Issue #23 item 5: every IPv6 form that carries an IPv4 address, and the
    // special-purpose IPv6 blocks the old hand list called public. Refused
    // by policy on the host before any dial, so nothing leaves this machine.
    for url in [
        "http://[64:ff9b:1::a9fe:a9fe]/", // local-use NAT64 of the metadata address
        "http://[64:ff9b::7f00:1]/",      // well-known NAT64 of loopback
        "http://[::ffff:0:7f00:1]/",      // SIIT (IPv4-translated) loopback
        "http://[::127.0.0.1]/",          // IPv4-compatible loopback
        "http://[2002:7f00:1::1]/",       // 6to4 of loopback
        "http://[2002:a9fe:a9fe::1]/",    // 6to4 of the metadata address
        "http://[2001:0:4136:e378:8000:63bf:80ff:fffe]/", // Teredo (client 127.0.0.1)
        "http://[3fff::1]/",              // documentation (RFC 9637)
        "http://[5f00::1]/",              // SRv6 SIDs
    ] {
        let before = network_of(&d, &id).await["denied"].as_u64().unwrap();
        let (_, status, _) = d.sh(&id, &curl_proxied(url, "")).await;
        assert_eq!(status, "403", "{url} must be refused");
        let net = network_of(&d, &id).await;
        assert_eq!(net["denied"].as_u64().unwrap(), before + 1, "{url}: {net}");
        println!("{url} refused: {:?}", denial_reasons(&net).pop());
    }
    // SOCKS refuses too (curl exit 97: the proxy refused the connection).
    let (code, _, _) = d
        .sh(
            &id,
            &format!("curl -s --max-time 20 -x socks5h://127.0.0.1:1080 {sbxd}"),
        )
        .await;
    assert_ne!(code, 0);
    let (code, _, _) = d
        .sh(
            &id,
            "curl -s --max-time 20 -x socks5h://127.0.0.1:1080 http://169.254.169.254/",
        )
        .await;
    assert_ne!(code, 0);

    let net = network_of(&d, &id).await;
    assert_eq!(net["policy"]["mode"], "public");
    assert!(net["allowed"].as_u64().unwrap() >= 4, "{net}");
    assert!(net["denied"].as_u64().unwrap() >= 16, "{net}");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn https_only_refuses_port_80_and_plain_http_on_443() {
    let mut host = TestHost::create();
    host.serve_http_and_tls(&[]);
    let d = Daemon::start(&["--network-test-public-cidr", &host.veth.cidr]).await;
    let id = create_v1(&d, "net-https", json!({"mode": "https-only"})).await;
    upload(&d, &id, "/tmp/ca.pem", host.ca_pem()).await;
    let (code, out, err) = d
        .sh(
            &id,
            &format!(
                "curl -sS --max-time 20 --cacert /tmp/ca.pem https://{}/",
                host.veth.ip
            ),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "hello-tls\n"), "{err}");
    let (_, status, _) = d
        .sh(&id, &curl_proxied(&format!("http://{}/", host.veth.ip), ""))
        .await;
    assert_eq!(status, "403");
    let net = network_of(&d, &id).await;
    assert_eq!(denial_reasons(&net).pop().unwrap().1, "port", "{net}");
    // Plain HTTP tunnelled to 443 is cut: the first bytes are not a TLS handshake.
    let (code, _, _) = d
        .sh(
            &id,
            &format!(
                "curl -s --max-time 20 -p -x http://127.0.0.1:3128 http://{}:443/",
                host.veth.ip
            ),
        )
        .await;
    assert_ne!(code, 0);
    let net = network_of(&d, &id).await;
    assert_eq!(denial_reasons(&net).pop().unwrap().1, "not-tls", "{net}");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn allowlisted_name_rebound_to_loopback_is_refused() {
    let mut host = TestHost::create();
    let name = format!("{}.sbx-test.invalid", host.veth.ns);
    host.serve_http_and_tls(&[&name]);
    let d = Daemon::start(&["--network-test-public-cidr", &host.veth.cidr]).await;
    let hosts = HostsEntry::set(&name, &host.veth.ip);
    let id = create_v1(
        &d,
        "net-allow",
        json!({"mode": "allowlist", "allow": [{"host": name, "ports": [443]}]}),
    )
    .await;
    upload(&d, &id, "/tmp/ca.pem", host.ca_pem()).await;
    let (code, out, err) = d
        .sh(
            &id,
            &format!("curl -sS --max-time 20 --cacert /tmp/ca.pem https://{name}/"),
        )
        .await;
    assert_eq!((code, out.as_str()), (0, "hello-tls\n"), "{err}");
    // Not listed: the address itself, another port.
    let (_, status, _) = d
        .sh(&id, &curl_proxied(&format!("http://{}/", host.veth.ip), ""))
        .await;
    assert_eq!(status, "403");
    let (_, status, _) = d
        .sh(&id, &curl_proxied(&format!("http://{name}/"), ""))
        .await;
    assert_eq!(status, "403");
    // Rebinding: the allowed name now points at the host's loopback.
    hosts.point_to("127.0.0.1");
    let (code, _, _) = d
        .sh(
            &id,
            &format!("curl -s --max-time 20 --cacert /tmp/ca.pem https://{name}/"),
        )
        .await;
    assert_ne!(code, 0);
    let net = network_of(&d, &id).await;
    assert_eq!(
        denial_reasons(&net).pop().unwrap(),
        (name.clone(), "loopback".to_string()),
        "{net}"
    );
    drop(hosts);
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn none_has_only_loopback_and_no_proxy() {
    let d = Daemon::start(&[]).await;
    let id = create_v1(&d, "net-none", json!({"mode": "none"})).await;
    let (code, out, _) = d
        .sh(
            &id,
            "python3 -c 'import socket; print(sorted(n for _, n in socket.if_nameindex()))'",
        )
        .await;
    assert_eq!((code, out.trim()), (0, "['lo']"));
    let (code, _, _) = d
        .sh(
            &id,
            "curl -s --max-time 5 -x http://127.0.0.1:3128 http://example.com/",
        )
        .await;
    assert_eq!(code, 7, "connection refused on 3128");
    let (code, _, _) = d
        .sh(
            &id,
            "curl -s --max-time 5 -x socks5h://127.0.0.1:1080 http://example.com/",
        )
        .await;
    assert_eq!(code, 7, "connection refused on 1080");
    let (_, env, _) = d.sh(&id, "env").await;
    assert!(!env.contains("127.0.0.1:3128"), "{env}");
    let net = network_of(&d, &id).await;
    assert_eq!(net["policy"]["mode"], "none");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn v2_default_is_public_and_node_fetch_uses_the_proxy() {
    let mut host = TestHost::create();
    host.serve_http_and_tls(&[]);
    let d = Daemon::start(&["--network-test-public-cidr", &host.veth.cidr]).await;
    let id = d.create_running("net-sdk").await;
    upload(&d, &id, "/tmp/ca.pem", host.ca_pem()).await;
    let net = network_of(&d, &id).await;
    assert_eq!(net["policy"]["mode"], "public");
    let script = format!(
        "NODE_EXTRA_CA_CERTS=/tmp/ca.pem node -e \"fetch('https://{}/').then(r => r.text()).then(t => process.stdout.write(t))\"",
        host.veth.ip
    );
    let (code, out, err) = d.sh(&id, &script).await;
    assert_eq!((code, out.as_str()), (0, "hello-tls\n"), "{err}");
    // Another sandbox's server is not reachable: it has no address, and loopback is refused.
    let other = d.create_running("net-sdk-2").await;
    d.call(
        "POST",
        &format!("/v2/sandboxes/{other}/processes"),
        Some(json!({"command": ["python3", "-m", "http.server", "8000", "--bind", "0.0.0.0"]})),
    )
    .await;
    let (_, status, _) = d.sh(&id, &curl_proxied("http://127.0.0.1:8000/", "")).await;
    assert_eq!(status, "403");
    let (code, _, _) = d
        .sh(
            &id,
            "curl -s --max-time 5 --noproxy '*' http://127.0.0.1:8000/",
        )
        .await;
    assert_eq!(code, 7, "nothing listens on this sandbox's own loopback");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn policy_survives_snapshot_clone_and_daemon_restart() {
    let mut host = TestHost::create();
    host.serve_http_and_tls(&[]);
    let mut d = Daemon::start(&["--network-test-public-cidr", &host.veth.cidr]).await;
    let id = create_v1(&d, "net-snap", json!({"mode": "https-only"})).await;
    upload(&d, &id, "/tmp/ca.pem", host.ca_pem()).await;
    let fetch = format!(
        "curl -sS --max-time 20 --cacert /tmp/ca.pem https://{}/",
        host.veth.ip
    );
    // Name idempotency compares the policy.
    let (status, _) = d
        .call(
            "POST",
            "/v1/sandboxes",
            Some(json!({"name": "net-snap", "vcpu": 1, "memoryMb": 1024, "network": {"mode": "public"}})),
        )
        .await;
    assert_eq!(status, 409);
    // A clone keeps the policy.
    let (status, body) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/snapshots"),
            Some(json!({})),
        )
        .await;
    assert!(status == 201 || status == 202, "{body}");
    let snap = body["data"]["id"].as_str().unwrap().to_string();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, b) = d.call("GET", &format!("/v2/snapshots/{snap}"), None).await;
        if b["data"]["status"] == "READY" {
            break;
        }
        assert!(Instant::now() < deadline, "snapshot never READY: {b}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (status, body) = d
        .call(
            "POST",
            "/v2/sandboxes",
            Some(json!({"name": "net-clone", "snapshotId": snap})),
        )
        .await;
    assert!(status == 201 || status == 202, "{body}");
    let clone = body["data"]["id"].as_str().unwrap().to_string();
    d.wait_status(&clone, "RUNNING", Duration::from_secs(60))
        .await;
    let net = network_of(&d, &clone).await;
    assert_eq!(net["policy"]["mode"], "https-only");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let (code, out, _) = d.sh(&clone, &fetch).await;
        if code == 0 {
            assert_eq!(out, "hello-tls\n");
            break;
        }
        assert!(Instant::now() < deadline, "clone never reached the host");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let (_, status, _) = d
        .sh(
            &clone,
            &curl_proxied(&format!("http://{}/", host.veth.ip), ""),
        )
        .await;
    assert_eq!(status, "403");
    // After a daemon restart the broker is back (reattach sends a new net_serve).
    d.kill9();
    d.spawn().await;
    let (code, out, err) = d.sh(&id, &fetch).await;
    assert_eq!((code, out.as_str()), (0, "hello-tls\n"), "{err}");
    let _ = PathBuf::new();
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn dns_in_the_sandbox_answers_through_the_policy() {
    let host = TestHost::create();
    let good = format!("dns-{}.sbx-test.invalid", host.veth.ns);
    let bad = format!("dns-lo-{}.sbx-test.invalid", host.veth.ns);
    let d = Daemon::start(&["--network-test-public-cidr", &host.veth.cidr]).await;
    let good_entry = HostsEntry::set(&good, &host.veth.ip);
    let bad_entry = HostsEntry::set(&bad, "127.0.0.1");
    let id = create_v1(&d, "net-dns", json!({"mode": "public"})).await;
    let (code, conf, _) = d.sh(&id, "cat /etc/resolv.conf").await;
    assert_eq!(code, 0);
    assert!(conf.contains("nameserver 127.0.0.1"), "{conf}");
    let lookup = |name: &str| {
        format!(
            "python3 -c \"import socket\ntry:\n  print(socket.gethostbyname('{name}'))\nexcept socket.gaierror as e:\n  print('gaierror', e)\""
        )
    };
    let (code, out, err) = d.sh(&id, &lookup(&good)).await;
    assert_eq!((code, out.trim()), (0, host.veth.ip.as_str()), "{err}");
    // Resolves on the host, but only to an address the policy refuses: nothing.
    let (code, out, err) = d.sh(&id, &lookup(&bad)).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.starts_with("gaierror"), "{out}");
    let net = network_of(&d, &id).await;
    assert!(
        denial_reasons(&net).contains(&(bad.clone(), "loopback".to_string())),
        "{net}"
    );
    drop(good_entry);
    drop(bad_entry);
}

/// Fetches `http://localhost:8123/` with the sandbox's proxy environment (its
/// `NO_PROXY` sends `localhost` direct), retrying while the server starts.
const FETCH_LOCALHOST: &str = r#"
import time, urllib.request
for _ in range(100):
    try:
        print(urllib.request.urlopen("http://localhost:8123/", timeout=5).status)
        break
    except OSError as e:
        err = e
        time.sleep(0.1)
else:
    print("failed", err)
"#;

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn localhost_resolves_to_the_sandbox_loopback() {
    // Only the sandboxes' own loopback is used: no test host, no other address.
    let d = Daemon::start(&[]).await;
    let lookup = |name: &str, family: &str| {
        format!(
            "python3 -c 'import socket; print(socket.getaddrinfo(\"{name}\", 80, socket.{family})[0][4][0])'"
        )
    };
    // `public`: the DNS responder runs; `none`: no responder, `/etc/hosts` alone.
    for mode in ["public", "none"] {
        let id = create_v1(&d, &format!("net-lo-{mode}"), json!({"mode": mode})).await;
        let (code, hosts, err) = d.sh(&id, "cat /etc/hosts").await;
        assert_eq!(code, 0, "{mode}: {err}");
        for line in [
            "127.0.0.1 localhost",
            "::1 localhost ip6-localhost ip6-loopback",
        ] {
            assert!(hosts.lines().any(|l| l == line), "{mode}: {hosts}");
        }
        let (code, out, err) = d.sh(&id, &lookup("localhost", "AF_UNSPEC")).await;
        assert_eq!(code, 0, "{mode}: {err}");
        assert!(["127.0.0.1", "::1"].contains(&out.trim()), "{mode}: {out}");
        // A server on the sandbox's 127.0.0.1 is reachable as `localhost`.
        let (status, body) = d
            .call(
                "POST",
                &format!("/v2/sandboxes/{id}/processes"),
                Some(json!({"command": ["python3", "-m", "http.server", "8123", "--bind", "127.0.0.1"], "cwd": "/tmp"})),
            )
            .await;
        assert!(status < 300, "{mode}: start server: {status} {body}");
        let (code, out, err) = d.exec(&id, &["python3", "-c", FETCH_LOCALHOST]).await;
        assert_eq!((code, out.trim()), (0, "200"), "{mode}: {err}");
        if mode == "public" {
            // Names `/etc/hosts` does not list come from the responder, any case.
            for name in ["foo.localhost", "Dev.App.LOCALHOST."] {
                let (code, out, err) = d.sh(&id, &lookup(name, "AF_INET")).await;
                assert_eq!((code, out.trim()), (0, "127.0.0.1"), "{name}: {err}");
                let (code, out, err) = d.sh(&id, &lookup(name, "AF_INET6")).await;
                assert_eq!((code, out.trim()), (0, "::1"), "{name}: {err}");
            }
            // Answered in the sandbox: not a lookup the policy refused.
            let net = network_of(&d, &id).await;
            assert_eq!(net["denied"], 0, "{net}");
            assert_eq!(net["recentDenials"], json!([]), "{net}");
        }
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_running_sandboxs_policy_changes_for_its_next_connections() {
    let mut host = TestHost::create();
    host.serve_http_and_tls(&[]);
    let d = Daemon::start(&["--network-test-public-cidr", &host.veth.cidr]).await;
    let id = create_v1(&d, "net-update", json!({"mode": "none"})).await;
    let url = format!("http://{}/", host.veth.ip);
    let put = |policy: Value| {
        let d = &d;
        let id = id.clone();
        async move {
            d.call("PUT", &format!("/v1/sandboxes/{id}/network"), Some(policy))
                .await
        }
    };

    // Created without a network: no proxy to talk to.
    let (code, _, _) = d
        .sh(&id, &curl_proxied(&url, "-x http://127.0.0.1:3128"))
        .await;
    assert_eq!(code, 7, "connection refused on 3128");

    // Bad policies are refused and change nothing.
    for (bad, code) in [
        (json!({"mode": "allowlist"}), "invalid_field_format"),
        (
            json!({"mode": "public", "allow": [{"host": "x.example"}]}),
            "invalid_field_format",
        ),
        (json!({"mode": "everything"}), "invalid_request"),
        (json!({"mode": "public", "extra": 1}), "invalid_request"),
    ] {
        let (status, body) = put(bad.clone()).await;
        assert_eq!(status, 400, "{bad}: {body}");
        assert_eq!(body["errors"][0]["code"], code, "{bad}: {body}");
    }
    let (status, body) = d
        .call("PUT", &format!("/v1/sandboxes/{id}/network"), None)
        .await;
    assert_eq!(status, 400, "{body}");
    assert_eq!(body["errors"][0]["code"], "missing_field", "{body}");
    assert_eq!(network_of(&d, &id).await["policy"]["mode"], "none");

    // none → public: the proxies start, and a new process gets their variables.
    let (status, body) = put(json!({"mode": "public"})).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(
        body["data"]["network"]["policy"]["mode"], "public",
        "{body}"
    );
    let (_, env, _) = d.sh(&id, "env").await;
    assert!(env.contains("HTTP_PROXY=http://127.0.0.1:3128"), "{env}");
    let (code, out, err) = d.sh(&id, &format!("curl -sS --max-time 20 {url}")).await;
    assert_eq!((code, out.as_str()), (0, "hello-plain\n"), "{err}");

    // public → an allowlist without the host: refused by policy from the next connection.
    let (status, body) =
        put(json!({"mode": "allowlist", "allow": [{"host": "only.example"}]})).await;
    assert_eq!(status, 200, "{body}");
    let (_, status, _) = d.sh(&id, &curl_proxied(&url, "")).await;
    assert_eq!(status, "403");
    let last = denial_reasons(&network_of(&d, &id).await).pop().unwrap();
    assert_eq!(last.1, "not-allowlisted");

    // An allowlist with the host's address: allowed again.
    let cidr = format!("{}/32", host.veth.ip);
    let (status, body) = put(json!({"mode": "allowlist", "allow": [{"cidr": cidr}]})).await;
    assert_eq!(status, 200, "{body}");
    let (code, out, err) = d.sh(&id, &format!("curl -sS --max-time 20 {url}")).await;
    assert_eq!((code, out.as_str()), (0, "hello-plain\n"), "{err}");

    // → none: refused, and new processes lose the proxy variables.
    let (status, body) = put(json!({"mode": "none"})).await;
    assert_eq!(status, 200, "{body}");
    let (_, status, _) = d
        .sh(&id, &curl_proxied(&url, "-x http://127.0.0.1:3128"))
        .await;
    assert_eq!(status, "403");
    let (_, env, _) = d.sh(&id, "env").await;
    assert!(!env.contains("127.0.0.1:3128"), "{env}");

    // Only a running sandbox; never another tenant's or an unknown one.
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{id}/pause"), None)
        .await;
    assert!(status == 200 || status == 202, "{body}");
    d.wait_status(&id, "PAUSED", Duration::from_secs(120)).await;
    let (status, body) = put(json!({"mode": "public"})).await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(network_of(&d, &id).await["policy"]["mode"], "none");
    let (status, body) = d
        .call(
            "PUT",
            "/v1/sandboxes/00000000-0000-4000-8000-000000000001/network",
            Some(json!({"mode": "public"})),
        )
        .await;
    assert_eq!(status, 404, "{body}");
}
