//! The test API of `examples/test-api/server.mjs` in a network namespace test host with
//! its own CA, and package tarballs of `examples/`, for `tests/connect.rs`.
#![allow(dead_code)]

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

pub const API_KEY: &str = "test-key-123";
pub const API_PORT: u16 = 8443;

pub fn run(cmd: &str, args: &[&str]) {
    let out = Command::new(cmd).args(args).output().expect(cmd);
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| std::io::Read::read_exact(&mut f, &mut b))
        .unwrap();
    u32::from_ne_bytes(b)
}

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

static NEXT: AtomicU32 = AtomicU32::new(0);

/// The test API in its own network namespace, with its own CA.
pub struct ApiHost {
    ns: String,
    host_if: String,
    ip: String,
    cidr: String,
    server: Option<Child>,
    certs: tempfile::TempDir,
}

impl ApiHost {
    /// Creates the namespace and veth pair, the certificates, and starts the server.
    pub fn start() -> ApiHost {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        let seed = (std::process::id().wrapping_mul(7919) + n * 131) % 16000;
        let tag = format!("{:08x}", rand_u32() ^ n);
        let (b, c) = (seed / 64 % 250 + 1, (seed % 64) * 4);
        let ns = format!("sbxc-{tag}");
        let host_if = format!("sbch{tag}");
        let ns_if = format!("sbcn{tag}");
        let host_ip = format!("10.214.{b}.{}", c + 1);
        let ip = format!("10.214.{b}.{}", c + 2);
        let mut h = ApiHost {
            ns: ns.clone(),
            host_if: host_if.clone(),
            ip: ip.clone(),
            cidr: format!("10.214.{b}.{c}/30"),
            server: None,
            certs: tempfile::tempdir().unwrap(),
        };
        run("ip", &["netns", "add", &ns]);
        run(
            "ip",
            &[
                "link", "add", &host_if, "type", "veth", "peer", "name", &ns_if,
            ],
        );
        run("ip", &["link", "set", &ns_if, "netns", &ns]);
        run(
            "ip",
            &["addr", "add", &format!("{host_ip}/30"), "dev", &host_if],
        );
        run("ip", &["link", "set", &host_if, "up"]);
        let addr = format!("{ip}/30");
        for args in [
            ["ip", "addr", "add", addr.as_str(), "dev", ns_if.as_str()].as_slice(),
            ["ip", "link", "set", ns_if.as_str(), "up"].as_slice(),
            ["ip", "link", "set", "lo", "up"].as_slice(),
        ] {
            let mut all = vec!["netns", "exec", ns.as_str()];
            all.extend_from_slice(args);
            run("ip", &all);
        }
        h.make_certs();
        h.serve();
        h
    }

    fn path(&self, f: &str) -> String {
        self.certs.path().join(f).to_string_lossy().into_owned()
    }

    /// A CA and a server certificate for the host's IP.
    fn make_certs(&self) {
        let ec = [
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
            "-nodes",
        ];
        let (ca_key, ca_pem) = (self.path("ca.key"), self.path("ca.pem"));
        let mut ca = vec!["req", "-x509"];
        ca.extend_from_slice(&ec);
        ca.extend_from_slice(&[
            "-keyout",
            &ca_key,
            "-out",
            &ca_pem,
            "-days",
            "1",
            "-subj",
            "/CN=sbx-connect-test-ca",
        ]);
        run("openssl", &ca);
        let (key, csr, pem, ext) = (
            self.path("srv.key"),
            self.path("srv.csr"),
            self.path("srv.pem"),
            self.path("ext"),
        );
        let mut req = vec!["req"];
        req.extend_from_slice(&ec);
        req.extend_from_slice(&["-keyout", &key, "-out", &csr, "-subj", "/CN=test-api"]);
        run("openssl", &req);
        std::fs::write(
            &ext,
            format!("subjectAltName=IP:{}\nbasicConstraints=CA:FALSE\n", self.ip),
        )
        .unwrap();
        run(
            "openssl",
            &[
                "x509",
                "-req",
                "-in",
                &csr,
                "-CA",
                &ca_pem,
                "-CAkey",
                &ca_key,
                "-CAcreateserial",
                "-out",
                &pem,
                "-days",
                "1",
                "-extfile",
                &ext,
            ],
        );
    }

    /// `node examples/test-api/server.mjs` inside the namespace (the host's node, else the image's).
    fn serve(&mut self) {
        let node = if Command::new("node").arg("--version").output().is_ok() {
            "node".to_string()
        } else {
            format!(
                "{}/usr/local/bin/node",
                std::env::var("SBX_TEST_IMAGE_ROOTFS").unwrap()
            )
        };
        let server = repo().join("examples/test-api/server.mjs");
        let port = API_PORT.to_string();
        let mut child = Command::new("ip")
            .args(["netns", "exec", &self.ns, &node])
            .arg(server)
            .args([
                "--cert",
                &self.path("srv.pem"),
                "--key",
                &self.path("srv.key"),
            ])
            .args(["--port", &port, "--host", &self.ip])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the test API");
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains(&port), "test API did not start: {line:?}");
        self.server = Some(child);
    }

    /// `https://IP:PORT` of the test API.
    pub fn origin(&self) -> String {
        format!("https://{}:{API_PORT}", self.ip)
    }

    /// sbxd flags that let the broker reach this host.
    pub fn daemon_args(&self) -> Vec<String> {
        vec![
            "--network-test-public-cidr".into(),
            self.cidr.clone(),
            "--connect-test-port".into(),
            API_PORT.to_string(),
            "--connect-extra-ca".into(),
            self.path("ca.pem"),
        ]
    }
}

impl Drop for ApiHost {
    fn drop(&mut self) {
        if let Some(c) = &mut self.server {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

/// `examples/NAME` as a gzipped tarball under `package/`, the way `npm pack` lays it out.
pub fn tarball(name: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.tgz");
    let transform = format!("s,^{name},package,");
    let examples = repo().join("examples");
    run(
        "tar",
        &[
            "-czf",
            out.to_str().unwrap(),
            "-C",
            examples.to_str().unwrap(),
            "--transform",
            &transform,
            name,
        ],
    );
    std::fs::read(out).unwrap()
}
