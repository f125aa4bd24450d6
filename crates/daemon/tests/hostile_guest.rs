//! Issue #23, item 1 and the guest-side fuzzer: sbxd holds against a hostile
//! guest. Integration tests on real runsc with real guest programs.
//!
//! * The guest cannot replace the agent sbxd talks to (the renamed-agent attack).
//! * A guest that does control what the relay runs (simulated by the hostile
//!   agent dir of `common::hostile`) wedges nothing: exec and DELETE answer,
//!   another tenant's runtime limit fires on time, a restart opens the port.
//! * A guest-side fuzzer of the agent protocol runs for a bounded time with
//!   no sbxd crash, hang or leak.
//! * A `net_dial` flood that reuses one connection id (item 2) to a test host
//!   that drops SYNs keeps sbxd's descriptors bounded, and the sandbox's
//!   agent channel is closed and reconnected.
//! * A file transfer whose in-guest `sbx-agent read-file`/`write-file` the
//!   guest freezes ends with an error within the idle deadline, and leaves
//!   no host `runsc exec` behind.
//! * The relay, like PID 1, cannot be ptraced or have its memory read.
//!
//! Network traffic goes only to a test host this file creates: a network
//! namespace `sbxg-<rand>` joined by a veth pair in 10.216.x.0/30, marked
//! public through the test-only `--network-test-public-cidr`.

mod common;

use common::netns::{Names, Veth};
use common::{hostile, Daemon};
use serde_json::{json, Value};
use std::time::{Duration, Instant};

/// Test hosts of this file (network.rs uses 10.213, connect_host 10.214, egress_hostile 10.215).
const NAMES: Names = Names {
    net: "10.216",
    ns: "sbxg-",
    host_if: "sbxgh",
    ns_if: "sbxgn",
};

/// The issue's bound for healthz under attack, held by the median sample.
const HEALTHZ_BOUND: Duration = Duration::from_millis(100);

/// No single healthz may take this long. One sample on a loaded 2-core CI host
/// can lose a scheduler slice (192 ms was seen once); a wedged sbxd takes seconds,
/// and shows in the median too.
const HEALTHZ_WORST: Duration = Duration::from_secs(2);

/// healthz latencies sampled during an attack.
#[derive(Default)]
struct Healthz(Vec<Duration>);

impl Healthz {
    async fn sample(&mut self, d: &Daemon) {
        self.0.push(healthz(d).await);
    }

    fn median(&self) -> Duration {
        let mut v = self.0.clone();
        v.sort();
        v.get(v.len() / 2).copied().unwrap_or_default()
    }

    fn worst(&self) -> Duration {
        self.0.iter().max().copied().unwrap_or_default()
    }

    /// Asserts the daemon stayed responsive: median under the issue's bound, no wedge.
    fn assert_responsive(&self) {
        assert!(!self.0.is_empty(), "no healthz samples");
        let (median, worst) = (self.median(), self.worst());
        assert!(median < HEALTHZ_BOUND, "healthz median {median:?}");
        assert!(worst < HEALTHZ_WORST, "healthz worst {worst:?}");
    }
}

/// Tries ptrace and /proc/PID/mem on PID 1, on the live relays (processes
/// whose command line is `.../sbx-agent relay`) and on a process of the
/// guest's own.
const PTRACE_PROBE: &str = r#"
import ctypes, os, subprocess, time
libc = ctypes.CDLL(None)
p = subprocess.Popen(["sleep", "30"])
time.sleep(0.1)
relays = []
for d in os.listdir("/proc"):
    try:
        argv = open("/proc/%s/cmdline" % d, "rb").read().split(b"\0")
    except (OSError, ValueError):
        continue
    if d.isdigit() and len(argv) > 1 and argv[0].endswith(b"sbx-agent") and argv[1] == b"relay":
        relays.append(int(d))
print("init", libc.ptrace(16, 1, 0, 0), "own", libc.ptrace(16, p.pid, 0, 0))
print("relays", len(relays))
for r in relays:
    print("relay", libc.ptrace(16, r, 0, 0))
for pid in [1, p.pid] + relays:
    kind = "relay" if pid in relays else str(pid)
    try:
        open("/proc/%d/mem" % pid, "rb")
        print(kind, "mem-open")
    except OSError:
        print(kind, "mem-refused")
p.kill()
"#;

/// Lists PID 1's descriptors and tries to open each socket among them
/// (the stdio channel's copies, the agent's listener) for reading and
/// writing through `/proc/1/fd`; counts the in-guest relays.
const CHANNEL_PROBE: &str = r#"
import os
sockets = 0
for fd in os.listdir("/proc/1/fd"):
    try:
        target = os.readlink("/proc/1/fd/" + fd)
    except OSError:
        continue
    if not target.startswith("socket:"):
        continue
    sockets += 1
    for mode in ("rb", "wb"):
        try:
            open("/proc/1/fd/" + fd, mode, buffering=0).close()
            print("opened", fd, mode)
        except OSError as e:
            print("refused", fd, mode, e.errno)
print("sockets", sockets)
relays = 0
for d in os.listdir("/proc"):
    try:
        argv = open("/proc/%s/cmdline" % d, "rb").read().split(b"\0")
    except (OSError, ValueError):
        continue
    if d.isdigit() and len(argv) > 1 and argv[0].endswith(b"sbx-agent") and argv[1] == b"relay":
        relays += 1
print("relays", relays)
"#;

/// Finds the in-guest `sbx-agent WHAT` processes (argv[1] is `sys.argv[1]`),
/// waiting up to 20 s for one, and freezes them with SIGSTOP; prints their pids.
const FREEZE: &str = r#"
import os, signal, sys, time
want = sys.argv[1].encode()
deadline = time.time() + 20
while time.time() < deadline:
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            argv = open("/proc/%s/cmdline" % d, "rb").read().split(b"\0")
        except OSError:
            continue
        if len(argv) > 1 and argv[0].endswith(b"sbx-agent") and argv[1] == want:
            found.append(int(d))
    if found:
        for pid in found:
            os.kill(pid, signal.SIGSTOP)
        print(" ".join(map(str, found)))
        sys.exit(0)
    time.sleep(0.01)
print("none")
sys.exit(1)
"#;

/// Creates a sandbox in another tenant scope (`x-inngest-env`) and waits for RUNNING.
async fn create_in_env(d: &Daemon, env: &str, name: &str) -> String {
    let body = json!({"name": name, "vcpu": 1, "memoryMb": 1024}).to_string();
    let (status, v) = d
        .call_with(
            "POST",
            "/v2/sandboxes",
            Some(body.into_bytes()),
            &[("x-inngest-env", env)],
        )
        .await;
    assert!(status == 201 || status == 202, "create: {status} {v}");
    v["data"]["id"].as_str().unwrap().to_string()
}

async fn get_in_env(d: &Daemon, env: &str, id: &str) -> Value {
    let (_, v) = d
        .call_with(
            "GET",
            &format!("/v2/sandboxes/{id}"),
            None,
            &[("x-inngest-env", env)],
        )
        .await;
    v["data"].clone()
}

/// Time of one `/healthz`.
async fn healthz(d: &Daemon) -> Duration {
    let t = Instant::now();
    let (code, _) = d.call("GET", "/healthz", None).await;
    assert_eq!(code, 200);
    t.elapsed()
}

/// Polls until the sandbox is `want`; returns its resource and when it got there.
async fn wait_for(d: &Daemon, id: &str, want: &str, limit: Duration) -> (Value, Instant) {
    let deadline = Instant::now() + limit;
    loop {
        let (_, v) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
        if v["data"]["status"] == want {
            return (v["data"].clone(), Instant::now());
        }
        assert!(Instant::now() < deadline, "{id} never reached {want}: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn the_guest_cannot_replace_the_agent_sbxd_runs() {
    // Relays only exist when asked for (or after a restart): this test is about them.
    let d = Daemon::start(&["--agent-channel", "relay"]).await;
    let id = d.create_running("renamer").await;

    // The attack of the issue, step by step. Each step must be refused.
    let (code, out, err) = d.sh(&id, "mv /.sbx /.sbx-old; echo mv=$?").await;
    println!("mv: {code} {out} {err}");
    assert!(out.contains("mv=") && !out.contains("mv=0"), "{out} {err}");
    let (_, out, _) = d
        .sh(
            &id,
            "umount /.sbx 2>/dev/null; echo umount=$?; umount -l /.sbx 2>/dev/null; echo lazy=$?; \
         mount -t tmpfs none /.sbx 2>/dev/null; echo mount=$?; \
         rm -rf /.sbx 2>/dev/null; echo rm=$?; ls /.sbx",
        )
        .await;
    println!("{out}");
    for refused in ["umount=0", "lazy=0", "mount=0", "rm=0"] {
        assert!(!out.contains(refused), "{refused} in {out}");
    }
    assert!(out.contains("sbx-agent"), "the agent is gone: {out}");
    // The agent's socket cannot be squatted: it is abstract, and held.
    let (_, out, _) = d.sh(&id,
        "python3 -c 'import socket\ns=socket.socket(socket.AF_UNIX)\n\
         try:\n  s.bind(\"\\0sbx-agent\"); print(\"bound\")\nexcept OSError as e: print(\"refused\", e.errno)'",
    )
    .await;
    assert!(out.starts_with("refused"), "{out}");
    // PID 1 is not dumpable: the guest can neither ptrace it nor read its
    // memory (it could otherwise make the real agent speak for it). A
    // process of the guest's own is the contrast: both work on it.
    let (_, out, _) = d.exec(&id, &["python3", "-c", PTRACE_PROBE]).await;
    println!("{out}");
    assert!(out.contains("init -1 own 0"), "{out}");
    assert!(out.contains("1 mem-refused"), "{out}");
    assert!(out.lines().any(|l| l.ends_with(" mem-open")), "{out}");
    // The relay carrying this very exec is as closed as PID 1: the guest
    // cannot take it over to speak for the agent.
    assert!(!out.contains("relays 0"), "no relay found: {out}");
    assert!(!out.contains("relay 0"), "a relay was ptraced: {out}");
    assert!(!out.contains("relay mem-open"), "{out}");

    // Kill the relay from inside: sbxd reconnects through its own binary.
    hostile::arm(&d, &id, "true").await;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let (status, v) = d
            .call(
                "POST",
                &format!("/v2/sandboxes/{id}/exec"),
                Some(json!({"command": ["sha256sum", "/.sbx/sbx-agent"], "timeout": "10000ms"})),
            )
            .await;
        if status == 200 {
            assert_eq!(v["data"]["exitCode"], 0, "{v}");
            // The binary the relay runs is the host's, byte for byte.
            let host = std::process::Command::new("sha256sum")
                .arg(
                    std::path::Path::new(&std::env::var("SBX_TEST_AGENT_DIR").unwrap())
                        .join("sbx-agent"),
                )
                .output()
                .unwrap();
            let host = String::from_utf8_lossy(&host.stdout)
                .split(' ')
                .next()
                .unwrap_or_default()
                .to_string();
            let guest = common::b64(&v["data"]["stdout"]);
            assert!(
                !host.is_empty() && guest.starts_with(&host),
                "{guest} vs {host}"
            );
            break;
        }
        assert!(
            Instant::now() < deadline,
            "no answer after the relay was killed: {v}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (code, _, _) = d.sh(&id, "test -x /.sbx/sbx-agent").await;
    assert_eq!(code, 0);
    let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status == 204 || status == 202, "{status}");
}

/// sbxd reaches the agent over PID 1's stdin/stdout (a host socket pair): no
/// relay runs in the guest, and the guest cannot open the channel's
/// descriptors through `/proc/1/fd` to speak for sbxd or for the agent.
#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn the_guest_cannot_open_the_agents_stdio_channel() {
    let d = Daemon::start(&[]).await;
    let id = d.create_running("channel").await;
    let (code, out, err) = d.exec(&id, &["python3", "-c", CHANNEL_PROBE]).await;
    println!("{out}{err}");
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("relays 0\n"), "{out}");
    assert!(
        !out.contains("sockets 0\n"),
        "no socket found in PID 1: {out}"
    );
    assert!(!out.contains("opened"), "{out}");
    assert!(out.contains("refused"), "{out}");
    // And it still answers afterwards.
    assert_eq!(d.sh(&id, "true").await.0, 0);
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn an_agent_that_never_answers_wedges_nothing() {
    let agent = hostile::agent_dir();
    let limit_secs = 30u64;
    let limit = limit_secs.to_string();
    let mut d = Daemon::start(&[
        "--agent-dir",
        &agent.path().to_string_lossy(),
        "--agent-channel",
        "relay",
        "--active-runtime-secs",
        &limit,
    ])
    .await;
    // Another tenant's sandbox: its runtime limit must fire on time whatever happens.
    let control = create_in_env(&d, "victim", "control").await;
    let control_started = Instant::now();
    let a = d.create_running("stall-exec").await;
    let b = d.create_running("stall-delete").await;
    let c = d.create_running("stall-restart").await;
    // c waits, paused, for the restart part at the end: its active-runtime clock stops
    // meanwhile, so the daemon-wide 30 s limit cannot end it before then.
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{c}/pause"), None)
        .await;
    assert!(status == 200 || status == 202, "pause c: {status} {body}");
    wait_for(&d, &c, "PAUSED", Duration::from_secs(60)).await;

    // The guest makes every later relay of a, b and c hang, then kills the live ones.
    for id in [&a, &b] {
        hostile::arm(&d, id, "touch /tmp/hostile-stall").await;
    }

    // DELETE answers at once: no lock is held across the stalled handshake.
    let t = Instant::now();
    let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{b}"), None).await;
    let answered = t.elapsed();
    assert!(status == 204 || status == 202, "{status}");
    assert!(
        answered < Duration::from_secs(15),
        "DELETE of a stalled sandbox answered after {answered:?}"
    );
    let (gone, _) = wait_for(&d, &b, "TERMINATED", Duration::from_secs(30)).await;
    println!("DELETE of a stalled sandbox: {:?} ({gone})", t.elapsed());

    // Exec answers (an error) within its deadlines instead of hanging.
    let t = Instant::now();
    let (status, v) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{a}/exec"),
            Some(json!({"command": ["true"], "timeout": "5000ms"})),
        )
        .await;
    let took = t.elapsed();
    println!("exec on a stalled agent: {status} after {took:?}: {v}");
    assert_ne!(status, 200, "{v}");
    assert!(took < Duration::from_secs(45), "{took:?}");
    // And the sandbox is reported: FAILED with the reason.
    let (failed, _) = wait_for(&d, &a, "FAILED", Duration::from_secs(60)).await;
    let reason = failed["error"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("agent"), "{failed}");

    // healthz stays fast meanwhile.
    let mut samples = Healthz::default();
    for _ in 0..20 {
        samples.sample(&d).await;
    }
    println!(
        "healthz of 20 while stalled: median {:?}, worst {:?}",
        samples.median(),
        samples.worst()
    );
    samples.assert_responsive();

    // The other tenant's runtime limit fired on time.
    let deadline = control_started + Duration::from_secs(limit_secs + 60);
    let ended = loop {
        let v = get_in_env(&d, "victim", &control).await;
        if v["status"] == "TERMINATED" {
            break v;
        }
        assert!(Instant::now() < deadline, "runtime limit never fired: {v}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let lived = control_started.elapsed();
    println!("control sandbox ended after {lived:?}: {}", ended["error"]);
    assert!(
        ended["error"]
            .as_str()
            .is_some_and(|e| e.contains("active runtime limit")),
        "{ended}"
    );
    assert!(lived < Duration::from_secs(limit_secs + 15), "{lived:?}");

    // A restart opens the port within a bound although c's agent stalls:
    // c is still RUNNING in the store when sbxd dies (its monitor had not
    // given up yet), so reconciliation must reattach to a stalled agent.
    let (status, body) = d
        .call("POST", &format!("/v2/sandboxes/{c}/resume"), None)
        .await;
    assert!(status == 200 || status == 202, "resume c: {status} {body}");
    wait_for(&d, &c, "RUNNING", Duration::from_secs(60)).await;
    hostile::arm(&d, &c, "touch /tmp/hostile-stall").await;
    let c_status =
        d.call("GET", &format!("/v2/sandboxes/{c}"), None).await.1["data"]["status"].clone();
    println!("c before the restart: {c_status}");
    assert_eq!(c_status, "RUNNING");
    d.kill9();
    let t = Instant::now();
    d.spawn().await;
    let took = t.elapsed();
    println!("restart with a stalled agent: port open after {took:?}");
    assert!(took < Duration::from_secs(25), "{took:?}");
    assert!(healthz(&d).await < Duration::from_secs(1));
    // c ends: FAILED (its agent never answers), or TERMINATED if its own
    // runtime limit came first.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, v) = d.call("GET", &format!("/v2/sandboxes/{c}"), None).await;
        if v["data"]["status"] == "FAILED" || v["data"]["status"] == "TERMINATED" {
            println!(
                "c after the restart: {} {}",
                v["data"]["status"], v["data"]["error"]
            );
            // Not "lost": its container was there, its agent did not answer.
            if v["data"]["status"] == "FAILED" {
                let reason = v["data"]["error"].as_str().unwrap_or_default();
                assert!(
                    reason.contains("did not answer after sbxd restarted"),
                    "{reason}"
                );
            }
            break;
        }
        assert!(Instant::now() < deadline, "c never ended: {v}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for id in [&a, &c] {
        let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 204 || status == 202, "{status}");
    }
    d.assert_no_containers(
        Duration::from_secs(60),
        "after the stalled sandboxes were destroyed",
    )
    .await;
}

/// How long the fuzzer runs.
const FUZZ_TIME: Duration = Duration::from_secs(40);
/// Fuzzed sandboxes alive at once.
const FUZZ_SANDBOXES: usize = 2;

/// Arms a fresh sandbox: every later relay is the fuzzer; the live one dies.
async fn arm(d: &Daemon, name: &str, seed: u64) -> String {
    let id = d.create_running(name).await;
    hostile::arm(d, &id, &format!("echo {seed} > /tmp/hostile-fuzz")).await;
    id
}

/// One round of API calls against a fuzzed sandbox; every answer is accepted,
/// but none may take longer than the request timeout.
async fn poke(http: &reqwest::Client, base: &str, id: &str, round: u64) -> Result<(), String> {
    let url = |p: &str| format!("{base}/v2/sandboxes/{id}{p}");
    let json = |v: Value| v.to_string();
    let requests: Vec<reqwest::RequestBuilder> = vec![
        http.post(url("/exec"))
            .header("content-type", "application/json")
            .body(json(
                json!({"command": ["echo", round.to_string()], "timeout": "2000ms"}),
            )),
        http.get(url("/processes")),
        http.post(url("/processes"))
            .header("content-type", "application/json")
            .body(json(json!({"command": ["sleep", "1"]}))),
        http.put(url(&format!("/files?path=/tmp/f{round}&mode=0644")))
            .body(vec![b'x'; 4096]),
        http.get(url(&format!("/files?path=/tmp/f{round}"))),
        http.get(format!("{base}/v1/sandboxes/{id}/fs/list?path=/tmp")),
        http.get(format!("{base}/v1/sandboxes/{id}/fs/stat?path=/tmp")),
        http.get(url("")),
    ];
    for req in requests {
        let t = Instant::now();
        match req.timeout(Duration::from_secs(150)).send().await {
            Ok(resp) => {
                let _ = resp.bytes().await;
            }
            Err(e) if e.is_timeout() => {
                return Err(format!("a request hung for {:?}", t.elapsed()));
            }
            Err(e) if e.is_connect() => return Err(format!("sbxd unreachable: {e}")),
            Err(_) => {}
        }
    }
    Ok(())
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn guest_side_fuzzer_of_the_agent_protocol() {
    let agent = hostile::agent_dir();
    let mut d = Daemon::start(&[
        "--agent-dir",
        &agent.path().to_string_lossy(),
        "--agent-channel",
        "relay",
    ])
    .await;
    let pid = d.sbxd_pid().unwrap();
    let control = d.create_running("control").await;
    assert_eq!(d.exec(&control, &["true"]).await.0, 0);
    let fds_before = hostile::fd_count(pid);
    let rss_before = common::rss_kib(pid).unwrap();
    let seed: u64 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        * 1000;
    println!("fuzz base seed {seed} (per connection: base + its number)");

    let mut fuzzed = Vec::new();
    for i in 0..FUZZ_SANDBOXES {
        fuzzed.push(arm(&d, &format!("fuzz-{i}"), seed + (i as u64) * 100_000).await);
    }
    let started = Instant::now();
    let (mut rounds, mut healthz_worst, mut fds_worst, mut rss_worst, mut rearmed) =
        (0u64, Duration::ZERO, 0usize, 0u64, 0usize);
    while started.elapsed() < FUZZ_TIME {
        rounds += 1;
        let pokes = fuzzed.iter().map(|id| poke(&d.http, &d.base, id, rounds));
        for result in futures::future::join_all(pokes).await {
            if let Err(e) = result {
                panic!("seed {seed}, round {rounds}: {e}");
            }
        }
        assert!(
            d.child.as_mut().unwrap().try_wait().unwrap().is_none(),
            "sbxd died (seed {seed})"
        );
        healthz_worst = healthz_worst.max(healthz(&d).await);
        fds_worst = fds_worst.max(hostile::fd_count(pid));
        rss_worst = rss_worst.max(common::rss_kib(pid).unwrap_or(0));
        // A fuzzed sandbox that sbxd gave up on (FAILED) is replaced.
        for slot in fuzzed.iter_mut() {
            let (_, v) = d.call("GET", &format!("/v2/sandboxes/{slot}"), None).await;
            if v["data"]["status"] != "RUNNING" {
                println!(
                    "{slot} ended: {} {}",
                    v["data"]["status"], v["data"]["error"]
                );
                rearmed += 1;
                let n = FUZZ_SANDBOXES + rearmed;
                *slot = arm(&d, &format!("fuzz-{n}"), seed + (n as u64) * 100_000).await;
            }
        }
    }
    println!(
        "fuzzed {FUZZ_TIME:?}: {rounds} rounds, {rearmed} sandboxes replaced, healthz worst \
         {healthz_worst:?}, fds {fds_before} → worst {fds_worst}, RSS {rss_before} → worst {rss_worst} KiB"
    );
    // The control sandbox never noticed.
    assert_eq!(d.exec(&control, &["echo", "ok"]).await.1, "ok\n");
    // Everything can be destroyed, and what sbxd held is given back.
    for id in &fuzzed {
        let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 204 || status == 202, "{status}");
    }
    for id in &fuzzed {
        // FAILED if sbxd gave up on its agent just before the DELETE.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let (_, v) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
            if v["data"]["status"] == "TERMINATED" || v["data"]["status"] == "FAILED" {
                break;
            }
            assert!(Instant::now() < deadline, "{id} did not end: {v}");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    let fds_after = loop {
        let n = hostile::fd_count(pid);
        if n <= fds_before + 16 || Instant::now() > deadline {
            break n;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let rss_after = common::rss_kib(pid).unwrap();
    println!("after: fds {fds_after}, RSS {rss_after} KiB");
    assert!(
        fds_after <= fds_before + 16,
        "fd leak: {fds_before} → {fds_after}"
    );
    assert!(fds_worst < 2_000, "fds peaked at {fds_worst}");
    assert!(
        rss_worst < rss_before + 512 * 1024,
        "RSS peaked at {rss_worst} KiB"
    );
    assert!(healthz_worst < Duration::from_secs(1), "{healthz_worst:?}");
    // A restart still reconciles promptly.
    d.kill9();
    let t = Instant::now();
    d.spawn().await;
    assert!(t.elapsed() < Duration::from_secs(25));
    assert_eq!(d.exec(&control, &["echo", "ok"]).await.1, "ok\n");
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_reused_connection_id_flood_keeps_descriptors_bounded() {
    // A destination that never answers a SYN: every dial stays in flight.
    let host = Veth::create(&NAMES);
    host.run_in(&["nft", "add table inet sbxdrop"]);
    host.run_in(&[
        "nft",
        "add chain inet sbxdrop in { type filter hook input priority 0 ; }",
    ]);
    host.run_in(&["nft", "add rule inet sbxdrop in tcp dport 9 drop"]);
    let agent = hostile::agent_dir();
    let d = Daemon::start(&[
        "--agent-dir",
        &agent.path().to_string_lossy(),
        "--agent-channel",
        "relay",
        "--network-test-public-cidr",
        &host.cidr,
    ])
    .await;
    let pid = d.sbxd_pid().unwrap();
    let control = d.create_running("control").await;
    let id = d.create_running("dialflood").await;
    let before = hostile::fd_count(pid);
    let dials = 20_000;
    hostile::arm(
        &d,
        &id,
        &format!("echo {}:9 {dials} > /tmp/hostile-dialflood", host.ip),
    )
    .await;
    // Sample for 10 s: the flood is sent at once by the hostile relay.
    let (mut worst, mut samples) = (0usize, Healthz::default());
    let until = Instant::now() + Duration::from_secs(10);
    while Instant::now() < until {
        worst = worst.max(hostile::fd_count(pid));
        samples.sample(&d).await;
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    println!(
        "{dials} net_dial with one conn id: sbxd fds {before} → worst {worst}; healthz median {:?}, worst {:?}",
        samples.median(),
        samples.worst()
    );
    // The per-sandbox cap on dials in flight is 64; the reuse closes the channel first.
    assert!(worst < before + 100, "fds {before} → {worst}");
    samples.assert_responsive();
    assert_eq!(d.exec(&control, &["echo", "ok"]).await.1, "ok\n");
    // The reuse closed the flooding sandbox's agent channel, so sbxd
    // reconnected: the flood runs once per arming, and the relay after it is
    // the real agent's, which answers (it would not if only net_serve had ended).
    let (status, v) = d
        .call(
            "POST",
            &format!("/v2/sandboxes/{id}/exec"),
            Some(json!({"command": ["echo", "back"], "timeout": "10000ms"})),
        )
        .await;
    if status == 200 {
        assert_eq!(common::b64(&v["data"]["stdout"]), "back\n", "{v}");
    } else {
        // A channel closed again and again uses up the reconnect budget: the
        // sandbox is then FAILED with that reason (seen once on a loaded CI
        // host), never left RUNNING without egress.
        let (_, got) = d.call("GET", &format!("/v2/sandboxes/{id}"), None).await;
        assert_eq!(got["data"]["status"], "FAILED", "{status} {v} {got}");
        println!(
            "the flooding sandbox ended FAILED: {}",
            got["data"]["error"]
        );
    }
    for id in [&id, &control] {
        let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
        assert!(status == 204 || status == 202, "{status}");
    }
}

/// The idle deadline of file transfers in the test below, seconds.
const TRANSFER_IDLE_SECS: u64 = 3;

/// Host `runsc exec` processes of sandbox `id` that run `sbx-agent WHAT`.
fn transfer_pids(id: &str, what: &str) -> Vec<u32> {
    common::host_pids(&[&format!("sbx-{id}"), &format!("sbx-agent {what} ")])
}

#[tokio::test]
#[ignore = "needs root, runsc and the image; run ./scripts/test"]
async fn a_frozen_file_transfer_ends_within_the_idle_deadline() {
    let idle = TRANSFER_IDLE_SECS.to_string();
    let d = Daemon::start(&["--file-transfer-idle-secs", &idle]).await;
    let id = d.create_running("frozen-transfer").await;
    let bound = Duration::from_secs(TRANSFER_IDLE_SECS + 10);

    // A download on the direct path (over 2 MiB), too big for every buffer
    // between read-file and the client: read-file is still writing when the
    // guest freezes it.
    let (code, _, err) = d.sh(&id, "head -c 67108864 /dev/zero > /tmp/big").await;
    assert_eq!(code, 0, "{err}");
    let resp = d
        .http
        .get(d.url(&format!("/v2/sandboxes/{id}/files?path=/tmp/big")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let (code, out, err) = d.exec(&id, &["python3", "-c", FREEZE, "read-file"]).await;
    assert_eq!(code, 0, "read-file not found: {out} {err}");
    println!("froze read-file: {out}");
    let t = Instant::now();
    let mut resp = resp;
    let mut got = 0usize;
    let ended = loop {
        match tokio::time::timeout(bound, resp.chunk()).await {
            Ok(Ok(Some(bytes))) => got += bytes.len(),
            Ok(Ok(None)) => break Ok(()),
            Ok(Err(e)) => break Err(e.to_string()),
            Err(_) => panic!("the download hung for {bound:?} after {got} bytes"),
        }
    };
    let took = t.elapsed();
    println!("frozen download: {ended:?} after {took:?}, {got} bytes");
    assert!(ended.is_err(), "a frozen download ended whole: {got} bytes");
    assert!(got < 64 << 20, "{got}");
    assert!(took < bound, "{took:?}");
    assert_eq!(transfer_pids(&id, "read-file"), Vec::<u32>::new());

    // An upload on the direct path: the body stays open until the guest has
    // frozen write-file, then ends.
    let (tx, rx) = futures::channel::mpsc::channel::<Result<Vec<u8>, std::io::Error>>(4);
    let body = reqwest::Body::wrap_stream(rx);
    let url = d.url(&format!("/v2/sandboxes/{id}/files?path=/tmp/up&mode=0644"));
    let upload = tokio::spawn(d.http.put(url).body(body).send());
    let mut tx = tx;
    for _ in 0..9 {
        futures::SinkExt::send(&mut tx, Ok(vec![b'u'; 256 * 1024]))
            .await
            .unwrap();
    }
    let (code, out, err) = d.exec(&id, &["python3", "-c", FREEZE, "write-file"]).await;
    assert_eq!(code, 0, "write-file not found: {out} {err}");
    println!("froze write-file: {out}");
    futures::SinkExt::send(&mut tx, Ok(vec![b'u'; 256 * 1024]))
        .await
        .unwrap();
    drop(tx);
    let t = Instant::now();
    let resp = tokio::time::timeout(bound, upload)
        .await
        .expect("the upload answers within the bound")
        .unwrap()
        .unwrap();
    let took = t.elapsed();
    let status = resp.status().as_u16();
    let v: Value = resp.json().await.unwrap();
    println!("frozen upload: {status} after {took:?}: {v}");
    common::assert_error(&(status, v.clone()), 503, "compute_unavailable");
    let message = v["errors"][0]["message"].as_str().unwrap_or_default();
    assert!(message.contains("did not answer"), "{message}");
    assert!(took < bound, "{took:?}");
    assert_eq!(transfer_pids(&id, "write-file"), Vec::<u32>::new());
    let (code, _, _) = d.sh(&id, "test -e /tmp/up").await;
    assert_ne!(code, 0, "the frozen upload replaced the file");

    // The sandbox itself is fine: a whole transfer still works.
    let (status, _) = d
        .call(
            "GET",
            &format!("/v2/sandboxes/{id}/files?path=/etc/hostname"),
            None,
        )
        .await;
    assert_eq!(status, 200);
    let (status, _) = d.call("DELETE", &format!("/v2/sandboxes/{id}"), None).await;
    assert!(status == 204 || status == 202, "{status}");
}
