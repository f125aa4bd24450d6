//! The `sbx` binary's help and error output.

use std::process::Command;

fn sbx(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_sbx"))
        .args(args)
        .env_remove("SBX_URL")
        .env_remove("SBX_SIGNING_KEY")
        .output()
        .expect("run sbx")
}

#[test]
fn help_lists_every_command() {
    let out = sbx(&["--help"]);
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for cmd in [
        "create",
        "list",
        "top",
        "get",
        "destroy",
        "exec",
        "ps",
        "start",
        "wait",
        "kill",
        "output",
        "logs",
        "cp",
        "ls",
        "rm",
        "mv",
        "mkdir",
        "pause",
        "resume",
        "snapshot",
        "snapshots",
        "clone",
        "snapshot-rm",
        "secret",
        "connect",
    ] {
        assert!(
            help.lines()
                .any(|l| l.split_whitespace().next() == Some(cmd)),
            "{cmd} missing from:\n{help}"
        );
    }
    assert!(help.contains("--url"));
    assert!(help.contains("--key"));

    let secret = String::from_utf8(sbx(&["secret", "--help"]).stdout).unwrap();
    for cmd in ["set", "list", "rm"] {
        assert!(secret.contains(cmd), "{secret}");
    }

    let connect = String::from_utf8(sbx(&["connect", "--help"]).stdout).unwrap();
    for cmd in [
        "package",
        "build",
        "connection",
        "run",
        "runs",
        "logs",
        "records",
    ] {
        assert!(
            connect
                .lines()
                .any(|l| l.split_whitespace().next() == Some(cmd)),
            "{cmd} missing from:\n{connect}"
        );
    }
}

#[test]
fn transport_errors_exit_1_with_an_error_line() {
    let out = sbx(&["--url", "http://127.0.0.1:9", "list"]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.starts_with("error: "), "{err}");
}
