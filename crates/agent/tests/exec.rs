mod common;

use common::*;
use sbx_agent_proto::{AgentErrorCode, Reply, Request};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

#[tokio::test]
async fn exec_output_exit_code_and_signals() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    assert_eq!(
        c.exec(&["echo", "hello"]).await,
        (0, "hello\n".into(), String::new())
    );
    let (code, out, err) = c
        .exec(&["sh", "-c", "echo out; echo err >&2; exit 3"])
        .await;
    assert_eq!((code, out.as_str(), err.as_str()), (3, "out\n", "err\n"));
    // Killed by a signal: 128 + signal.
    assert_eq!(c.exec(&["sh", "-c", "kill -9 $$"]).await.0, 137);
    // stdin is /dev/null: cat ends at once.
    assert_eq!(c.exec(&["cat"]).await, (0, String::new(), String::new()));
}

#[tokio::test]
async fn exec_environment_layers() {
    let agent =
        TestAgent::start_with_env(&[("SBX_AGENT_SECRET", "hidden"), ("SBX_T_GUEST", "guest")]);
    let mut c = agent.connect().await;
    let script = "echo ${SBX_AGENT_SECRET:-none} $SBX_T_GUEST $A $B";
    assert_eq!(c.exec(&["sh", "-c", script]).await.1, "none guest\n");
    c.ok(Request::Configure {
        env: [
            ("A".to_string(), "base".to_string()),
            ("B".into(), "base".into()),
        ]
        .into(),
    })
    .await;
    let mut s = spec(&["sh", "-c", script]);
    s.env.insert("B".into(), "call".into());
    assert_eq!(c.exec_spec(s).await.1, "none guest base call\n");
    // Configure replaces the base environment.
    c.ok(Request::Configure {
        env: [("SBX_T_GUEST".to_string(), "over".to_string())].into(),
    })
    .await;
    assert_eq!(c.exec(&["sh", "-c", script]).await.1, "none over\n");
}

#[tokio::test]
async fn exec_cwd_and_path_resolution() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    assert_eq!(c.exec(&["pwd"]).await.1, "/\n");
    let mut s = spec(&["pwd"]);
    s.cwd = Some(agent.path(""));
    let dir = agent.dir.path().canonicalize().unwrap();
    assert_eq!(c.exec_spec(s).await.1.trim_end(), dir.to_str().unwrap());

    let bin = agent.dir.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    let tool = bin.join("mytool");
    std::fs::write(&tool, "#!/bin/sh\necho tool \"$@\"\n").unwrap();
    std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
    let plain = bin.join("plain");
    std::fs::write(&plain, "not executable").unwrap();

    // Through PATH of the merged environment.
    let mut s = spec(&["mytool", "x"]);
    s.env
        .insert("PATH".into(), format!("{}:/usr/bin:/bin", bin.display()));
    assert_eq!(c.exec_spec(s).await, (0, "tool x\n".into(), String::new()));
    // Relative to cwd.
    let mut s = spec(&["./mytool"]);
    s.cwd = Some(bin.to_string_lossy().into_owned());
    assert_eq!(c.exec_spec(s).await.0, 0);

    // Missing executable: 127 with a shell-like message.
    assert_eq!(
        c.exec(&["nope-not-here-xyz"]).await,
        (
            127,
            String::new(),
            "sbx: nope-not-here-xyz: No such file or directory\n".into()
        )
    );
    // Not executable: 126.
    let (code, _, err) = c.exec(&[plain.to_str().unwrap()]).await;
    assert_eq!(code, 126);
    assert!(err.contains("Permission denied"), "{err}");
    // Bad cwd: 127.
    let mut s = spec(&["pwd"]);
    s.cwd = Some("/nonexistent-dir-xyz".into());
    let (code, _, err) = c.exec_spec(s).await;
    assert_eq!(code, 127);
    assert!(err.contains("/nonexistent-dir-xyz"), "{err}");
    // Empty argv is a malformed request.
    let e = c.exec_full(spec(&[]), 1000, 1000).await.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
}

#[tokio::test]
async fn exec_timeout_kills_the_whole_group() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let pidfile = agent.dir.path().join("pid");
    let script = format!("sleep 100 & echo $! > {}; sleep 100", pidfile.display());
    let started = Instant::now();
    let e = c
        .exec_full(spec(&["sh", "-c", &script]), 500, 1 << 20)
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::TimedOut);
    assert!(started.elapsed() < Duration::from_secs(10));
    let grandchild = read_pid_file(&pidfile).await;
    eventually("grandchild killed", || !pid_alive(grandchild)).await;
}

#[tokio::test]
async fn exec_output_too_large_kills() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let e = c
        .exec_full(spec(&["yes"]), 20_000, 100_000)
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::OutputTooLarge);
    // Exactly at the limit is fine.
    let (r, payload) = c
        .exec_full(spec(&["head", "-c", "1000", "/dev/zero"]), 20_000, 1000)
        .await
        .unwrap();
    assert!(matches!(
        r,
        Reply::Exec {
            exit_code: 0,
            stdout_len: 1000,
            ..
        }
    ));
    assert_eq!(payload.len(), 1000);
    // Still serving.
    assert_eq!(c.exec(&["echo", "ok"]).await.1, "ok\n");
}

#[tokio::test]
async fn exec_does_not_hang_on_a_grandchild_holding_the_pipe() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let pidfile = agent.dir.path().join("pid");
    let script = format!("sleep 100 & echo $! > {}; echo done", pidfile.display());
    let started = Instant::now();
    assert_eq!(c.exec(&["sh", "-c", &script]).await.1, "done\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    let pid = read_pid_file(&pidfile).await;
    unsafe { libc::kill(pid, libc::SIGKILL) };
}

#[tokio::test]
async fn exec_cancel_kills_the_command() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let pidfile = agent.dir.path().join("pid");
    let script = format!("echo $$ > {}; exec sleep 100", pidfile.display());
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::Exec {
            command: spec(&["sh", "-c", &script]),
            timeout_ms: 60_000,
            max_output_bytes: 1000,
        },
    )
    .await;
    let pid = read_pid_file(&pidfile).await;
    c.send(id, sbx_agent_proto::Body::Cancel, Vec::new()).await;
    eventually("cancelled exec killed", || !pid_alive(pid)).await;
    // No reply for the cancelled id; the connection keeps working.
    c.ok(Request::Ping).await;
}
