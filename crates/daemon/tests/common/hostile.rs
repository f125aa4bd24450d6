//! A guest that controls what `sbx-agent relay` runs: the test double of the
//! attack in issue #23 (a guest that replaced the relay), for testing that
//! sbxd holds against a hostile agent whatever the guest manages.
//!
//! The agent dir it makes holds the real agent as `real-agent` and, as
//! `sbx-agent`, a shell script that runs it for everything (PID 1 stays the
//! real agent) except `relay`, where files the guest writes pick a hostile
//! program: `/tmp/hostile-stall` (never answers), `/tmp/hostile-fuzz` and
//! `/tmp/hostile-dialflood` (`hostile/fuzz_agent.py`).

use std::os::unix::fs::PermissionsExt;
use std::path::Path;

const WRAPPER: &str = r#"#!/bin/sh
# Test double of a guest that took over the relay (crates/daemon/tests/common/hostile.rs).
if [ "$1" = relay ]; then
  if [ -e /tmp/hostile-stall ]; then exec sleep 100000; fi
  if [ -e /tmp/hostile-fuzz ] || [ -e /tmp/hostile-dialflood ]; then exec python3 /.sbx/fuzz_agent.py; fi
fi
exec /.sbx/real-agent "$@"
"#;

/// Shell that kills every in-guest relay (this exec's own one too, after it answered).
pub const KILL_RELAYS: &str = "(sleep 0.3; for p in /proc/[0-9]*; do \
     if tr '\\0' ' ' < $p/cmdline 2>/dev/null | grep -qx '[^ ]*agent relay '; then kill -9 ${p#/proc/}; fi; \
   done) >/dev/null 2>&1 &";

/// An agent dir with the hostile wrapper; pass it as `--agent-dir`.
pub fn agent_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sbx-hostile-agent-")
        .tempdir_in("/var/tmp")
        .unwrap();
    let real = Path::new(&std::env::var("SBX_TEST_AGENT_DIR").unwrap()).join("sbx-agent");
    let put = |name: &str, bytes: &[u8]| {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    };
    put("real-agent", &std::fs::read(real).unwrap());
    put("sbx-agent", WRAPPER.as_bytes());
    put(
        "fuzz_agent.py",
        include_bytes!("../hostile/fuzz_agent.py").as_slice(),
    );
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    dir
}

/// Open file descriptors of a host process.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Host pids of the relays (`runsc exec ... agent relay`) of one sandbox.
pub fn relay_pids(id: &str) -> Vec<u32> {
    super::host_pids(&[&format!("exec sbx-{id} "), "agent relay"])
}

/// Runs `setup` in the sandbox, then kills its live relays from inside, and
/// waits until their host processes are gone: from then on every relay sbxd
/// opens is whatever `setup` chose.
pub async fn arm(d: &super::Daemon, id: &str, setup: &str) {
    let old = relay_pids(id);
    assert!(!old.is_empty(), "no relay for {id}");
    let (code, _, err) = d
        .exec(id, &["sh", "-c", &format!("{setup}; {KILL_RELAYS}")])
        .await;
    assert_eq!(code, 0, "{err}");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while old
        .iter()
        .any(|pid| Path::new(&format!("/proc/{pid}")).exists())
    {
        assert!(
            std::time::Instant::now() < deadline,
            "the relays of {id} did not die"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
