//! The test API of `examples/test-api/server.mjs` in a network namespace test host with
//! its own CA, and package tarballs of `examples/`, for `tests/connect.rs`.
#![allow(dead_code)]

pub mod flow;

use crate::common::netns::{make_certs, run, Certs, Names, Veth};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

pub const API_KEY: &str = "test-key-123";
pub const API_PORT: u16 = 8443;

/// Test hosts of this file: 10.214.x, apart from `tests/network.rs` (10.213.x),
/// which may run at the same time.
const NAMES: Names = Names {
    net: "10.214",
    ns: "sbxc-",
    host_if: "sbch",
    ns_if: "sbcn",
};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The test API in its own network namespace, with its own CA.
pub struct ApiHost {
    // Dropped first: stops the server and removes the namespace before the certs go.
    veth: Veth,
    certs: Certs,
    _certs_dir: tempfile::TempDir,
}

impl ApiHost {
    /// Creates the namespace and veth pair, the certificates, and starts the server.
    pub fn start() -> ApiHost {
        let veth = Veth::create(&NAMES);
        let certs_dir = tempfile::tempdir().unwrap();
        let certs = make_certs(certs_dir.path(), &veth.ip, &[]);
        let mut h = ApiHost {
            veth,
            certs,
            _certs_dir: certs_dir,
        };
        h.serve();
        h
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
        let port = API_PORT.to_string();
        let mut server = self.veth.command(&node);
        server
            .arg(repo().join("examples/test-api/server.mjs"))
            .arg("--cert")
            .arg(&self.certs.pem)
            .arg("--key")
            .arg(&self.certs.key)
            .args(["--port", &port, "--host", &self.veth.ip])
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let child = self.veth.spawn(&mut server);
        // The server prints its port once it listens.
        let stdout = child.stdout.take().unwrap();
        let mut line = String::new();
        std::io::BufReader::new(stdout)
            .read_line(&mut line)
            .unwrap();
        assert!(line.contains(&port), "test API did not start: {line:?}");
    }

    /// `https://IP:PORT` of the test API.
    pub fn origin(&self) -> String {
        format!("https://{}:{API_PORT}", self.veth.ip)
    }

    /// sbxd flags that let the broker reach this host.
    pub fn daemon_args(&self) -> Vec<String> {
        vec![
            "--network-test-public-cidr".into(),
            self.veth.cidr.clone(),
            "--connect-test-port".into(),
            API_PORT.to_string(),
            "--connect-extra-ca".into(),
            self.certs.ca_pem.to_string_lossy().into_owned(),
        ]
    }
}

/// `examples/NAME` as a gzipped tarball under `package/`, the way `npm pack` lays it out.
pub fn tarball(name: &str) -> Vec<u8> {
    tarball_in(&repo().join("examples"), name)
}

/// `PARENT/NAME` as a gzipped tarball under `package/`.
pub fn tarball_in(examples: &Path, name: &str) -> Vec<u8> {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("p.tgz");
    let transform = format!("s,^{name},package,");
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
