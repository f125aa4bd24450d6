//! A fake `runsc`: a shell script that records its argv and answers with
//! canned output.
//!
//! The script is written once per test binary. It finds its per-test
//! directory from the `--root=DIR` flag the wrapper always passes, appends
//! its argv (one argument per line, then `---`) to `DIR/argv.log`, and for
//! subcommand SUB prints `DIR/resp/SUB.stdout` to stdout and
//! `DIR/resp/SUB.stderr` to stderr, sleeps `DIR/resp/SUB.sleep` seconds,
//! copies stdin to stdout when `DIR/resp/SUB.cat` exists, and exits with
//! `DIR/resp/SUB.exit` (default 0).

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use sbx_runsc::Runsc;

const SCRIPT: &str = r#"#!/bin/sh
root=""
sub=""
for a in "$@"; do
  case "$a" in
    --root=*) root="${a#--root=}" ;;
    -*) ;;
    *) if [ -z "$sub" ]; then sub="$a"; fi ;;
  esac
done
{ for a in "$@"; do printf '%s\n' "$a"; done; printf '%s\n' '---'; } >> "$root/argv.log"
r="$root/resp/$sub"
[ -f "$r.stdout" ] && cat "$r.stdout"
[ -f "$r.stderr" ] && cat "$r.stderr" >&2
[ -f "$r.sleep" ] && sleep "$(cat "$r.sleep")"
[ -f "$r.cat" ] && cat
[ -f "$r.exit" ] && exit "$(cat "$r.exit")"
exit 0
"#;

/// Path of the fake binary (written on first use, before any spawn).
fn script() -> &'static Path {
    static SCRIPT_PATH: OnceLock<(tempfile::TempDir, PathBuf)> = OnceLock::new();
    let (_, p) = SCRIPT_PATH.get_or_init(|| {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("runsc");
        std::fs::write(&p, SCRIPT).expect("write fake runsc");
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o755)).expect("chmod");
        (dir, p)
    });
    p
}

/// One test's fake installation: its own root dir and canned answers.
pub struct Fake {
    /// Holds the root dir alive.
    pub dir: tempfile::TempDir,
    /// A wrapper pointed at the fake binary and this root.
    pub runsc: Runsc,
}

impl Fake {
    /// A fresh fake with no canned answers (every subcommand exits 0).
    pub fn new() -> Fake {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::create_dir(dir.path().join("resp")).expect("mkdir resp");
        let runsc = Runsc::new(script(), dir.path());
        Fake { dir, runsc }
    }

    /// Creates runsc's state file for `id` (as a root container), so the
    /// wrapper's exact-id guard lets commands on `id` through.
    pub fn container(&self, id: &str) -> &Fake {
        let p = self.root().join(format!("{id}_sandbox:{id}.state"));
        std::fs::write(p, "{}").expect("write state file");
        self
    }

    /// The root dir as the wrapper passes it.
    pub fn root(&self) -> &Path {
        self.dir.path()
    }

    /// `--root=...` as it appears in argv.
    pub fn root_flag(&self) -> String {
        format!("--root={}", self.root().display())
    }

    /// Sets a canned answer file `resp/SUB.KIND`.
    pub fn respond(&self, sub: &str, kind: &str, content: &str) {
        let p = self.root().join("resp").join(format!("{sub}.{kind}"));
        std::fs::write(p, content).expect("write response");
    }

    /// Every recorded invocation, without the binary path.
    pub fn calls(&self) -> Vec<Vec<String>> {
        let log = std::fs::read_to_string(self.root().join("argv.log")).unwrap_or_default();
        let mut calls = Vec::new();
        let mut cur = Vec::new();
        for line in log.lines() {
            if line == "---" {
                calls.push(std::mem::take(&mut cur));
            } else {
                cur.push(line.to_string());
            }
        }
        calls
    }

    /// The single recorded invocation.
    pub fn only_call(&self) -> Vec<String> {
        let calls = self.calls();
        assert_eq!(calls.len(), 1, "expected one call, got {calls:?}");
        calls.into_iter().next().unwrap_or_default()
    }

    /// Expected argv: root flag, `--network=none`, then `rest`.
    pub fn expect(&self, rest: &[&str]) -> Vec<String> {
        let mut v = vec![self.root_flag(), "--network=none".to_string()];
        v.extend(rest.iter().map(|s| s.to_string()));
        v
    }
}
