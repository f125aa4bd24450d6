//! Test hosts in their own network namespace, reachable from this machine
//! through a veth pair, and a throwaway CA with a server certificate for them.
//!
//! Each suite passes its own [`Names`] (10.x prefix and name prefixes), so
//! suites that run at the same time never pick the same addresses or names.

use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicU32, Ordering};

/// Runs `cmd args` on the host and panics with its stderr if it fails.
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

/// One suite's address range and name prefixes.
pub struct Names {
    /// The first two octets of the suite's range, e.g. `"10.213"`.
    pub net: &'static str,
    /// Prefix of the namespace name.
    pub ns: &'static str,
    /// Prefix of the veth end that stays on the host.
    pub host_if: &'static str,
    /// Prefix of the veth end moved into the namespace.
    pub ns_if: &'static str,
}

/// Hosts made by this test binary so far: spreads its hosts over the range.
static NEXT: AtomicU32 = AtomicU32::new(0);

/// A network namespace joined to the host by a veth pair on a /30: the host
/// end is `host_ip`, the namespace end is `ip`. Drop kills the servers started
/// with [`Veth::spawn`], then deletes the namespace and the link.
pub struct Veth {
    pub ns: String,
    host_if: String,
    pub host_ip: String,
    pub ip: String,
    pub cidr: String,
    servers: Vec<Child>,
}

impl Veth {
    pub fn create(names: &Names) -> Veth {
        let n = NEXT.fetch_add(1, Ordering::SeqCst);
        // The pid and the counter spread the hosts of concurrent runs over the
        // range; the random tag keeps their names apart.
        let seed = std::process::id()
            .wrapping_mul(7919)
            .wrapping_add(n.wrapping_mul(131))
            % 16000;
        let tag = format!("{:08x}", rand_u32() ^ n);
        let (b, c) = (seed / 64 % 250 + 1, (seed % 64) * 4);
        let net = names.net;
        let ns_if = format!("{}{tag}", names.ns_if);
        // Built before the first `ip` command, so Drop cleans up after a failed step.
        let veth = Veth {
            ns: format!("{}{tag}", names.ns),
            host_if: format!("{}{tag}", names.host_if),
            host_ip: format!("{net}.{b}.{}", c + 1),
            ip: format!("{net}.{b}.{}", c + 2),
            cidr: format!("{net}.{b}.{c}/30"),
            servers: Vec::new(),
        };
        run("ip", &["netns", "add", &veth.ns]);
        run(
            "ip",
            &[
                "link",
                "add",
                &veth.host_if,
                "type",
                "veth",
                "peer",
                "name",
                &ns_if,
            ],
        );
        run("ip", &["link", "set", &ns_if, "netns", &veth.ns]);
        let host_addr = format!("{}/30", veth.host_ip);
        run("ip", &["addr", "add", &host_addr, "dev", &veth.host_if]);
        run("ip", &["link", "set", &veth.host_if, "up"]);
        let addr = format!("{}/30", veth.ip);
        veth.run_in(&["ip", "addr", "add", &addr, "dev", &ns_if]);
        veth.run_in(&["ip", "link", "set", &ns_if, "up"]);
        veth.run_in(&["ip", "link", "set", "lo", "up"]);
        veth
    }

    /// Runs a command inside the namespace and panics if it fails.
    pub fn run_in(&self, args: &[&str]) {
        let mut all = vec!["netns", "exec", self.ns.as_str()];
        all.extend_from_slice(args);
        run("ip", &all);
    }

    /// `program` inside the namespace; add arguments, then start it with [`Veth::spawn`].
    pub fn command(&self, program: &str) -> Command {
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", &self.ns, program]);
        cmd
    }

    /// Returns once something in the namespace accepts connections on `port`
    /// (a server just started with [`Veth::spawn`]); panics after 10 s.
    pub fn wait_port(&self, port: u16) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let addr = format!("{}:{port}", self.ip).parse().unwrap();
        while std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_millis(200))
            .is_err()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "test server :{port} did not start"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
    }

    /// Starts a server made with [`Veth::command`] and keeps it, so Drop stops it
    /// before the namespace goes.
    pub fn spawn(&mut self, cmd: &mut Command) -> &mut Child {
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {cmd:?}: {e}"));
        self.servers.push(child);
        self.servers.last_mut().unwrap()
    }
}

impl Drop for Veth {
    fn drop(&mut self) {
        for c in &mut self.servers {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = Command::new("ip").args(["netns", "del", &self.ns]).output();
        let _ = Command::new("ip")
            .args(["link", "del", &self.host_if])
            .output();
    }
}

/// The files [`make_certs`] wrote.
pub struct Certs {
    /// The CA certificate, for the clients' trust store.
    pub ca_pem: PathBuf,
    /// The server's private key.
    pub key: PathBuf,
    /// The server's certificate, signed by the CA.
    pub pem: PathBuf,
}

/// Writes a CA and a server certificate for `ip` and the DNS `names` into
/// `dir`, both valid for a day, with openssl (P-256 keys).
pub fn make_certs(dir: &Path, ip: &str, names: &[&str]) -> Certs {
    let p = |f: &str| dir.join(f).to_string_lossy().into_owned();
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let (ca_key, ca_pem) = (p("ca.key"), p("ca.pem"));
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
        "/CN=sbx-test-ca",
    ]);
    run("openssl", &ca);
    let (key, csr, pem, ext) = (p("srv.key"), p("srv.csr"), p("srv.pem"), p("ext"));
    let mut req = vec!["req"];
    req.extend_from_slice(&ec);
    req.extend_from_slice(&["-keyout", &key, "-out", &csr, "-subj", "/CN=sbx-test-host"]);
    run("openssl", &req);
    // Clients check the subjectAltName, not the CN.
    let mut san = format!("IP:{ip}");
    for n in names {
        san.push_str(&format!(",DNS:{n}"));
    }
    std::fs::write(
        &ext,
        format!("subjectAltName={san}\nbasicConstraints=CA:FALSE\n"),
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
    Certs {
        ca_pem: ca_pem.into(),
        key: key.into(),
        pem: pem.into(),
    }
}
