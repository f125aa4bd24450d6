//! The wrapper against a fake `runsc` (see `common/mod.rs`): argv layout,
//! output parsing and error mapping. No root needed.

mod common;

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use common::Fake;
use sbx_runsc::{
    CheckpointOptions, CreateOptions, Error, ExecOptions, GlobalOptions, IoTarget, Network,
    ProcessIo, RestoreOptions, RunOptions, Runsc, Status,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn run_argv_and_console_log() {
    let f = Fake::new();
    f.respond("run", "stdout", "console out\n");
    f.respond("run", "stderr", "console err\n");
    let log = f.root().join("console.log");
    let opts = RunOptions {
        bundle: "/b/sbx-1".into(),
        io: ProcessIo::console_log(&log),
        pid_file: Some("/p/pid".into()),
        user_log: None,
        overlay2: Some("root:dir=/ov/sbx-1".into()),
    };
    f.runsc.run("sbx-1", &opts).await.expect("run");
    assert_eq!(
        f.only_call(),
        f.expect(&[
            "--overlay2=root:dir=/ov/sbx-1",
            "run",
            "--detach",
            "--bundle=/b/sbx-1",
            "--pid-file=/p/pid",
            "sbx-1"
        ])
    );
    let console = std::fs::read_to_string(&log).expect("console log");
    assert_eq!(console, "console out\nconsole err\n");
}

#[tokio::test]
async fn run_failure_keeps_only_new_console_bytes() {
    let f = Fake::new();
    let log = f.root().join("console.log");
    std::fs::write(&log, "from an earlier boot\n").expect("seed log");
    f.respond("run", "stderr", "creating container: boom\n");
    f.respond("run", "exit", "128");
    let opts = RunOptions {
        bundle: "/b".into(),
        io: ProcessIo::console_log(&log),
        ..Default::default()
    };
    let err = f.runsc.run("sbx-1", &opts).await.expect_err("must fail");
    match &err {
        Error::Failed {
            argv,
            status,
            stdout,
            stderr,
        } => {
            assert_eq!(status.code(), Some(128));
            assert_eq!(stderr, "creating container: boom\n");
            assert_eq!(stdout, "");
            assert!(argv.iter().any(|a| a == "run"));
            assert!(argv.last().is_some_and(|a| a == "sbx-1"));
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    assert!(err.to_string().contains("creating container: boom"));
    assert_eq!(err.stderr(), Some("creating container: boom\n"));
    assert!(!err.is_not_found());
}

#[tokio::test]
async fn create_then_start() {
    let f = Fake::new();
    f.container("c1");
    let opts = CreateOptions {
        bundle: "/b".into(),
        user_log: Some("/u.log".into()),
        ..Default::default()
    };
    f.runsc.create("c1", &opts).await.expect("create");
    f.runsc.start("c1").await.expect("start");
    assert_eq!(
        f.calls(),
        vec![
            f.expect(&["create", "--bundle=/b", "--user-log=/u.log", "c1"]),
            f.expect(&["start", "c1"]),
        ]
    );
}

#[tokio::test]
async fn global_flags_precede_every_subcommand() {
    let f = Fake::new();
    f.container("c");
    let global = GlobalOptions {
        platform: Some("systrap".into()),
        network: Network::Host,
        overlay2: Some("root:memory".into()),
        debug_log: Some("/dbg/".into()),
        debug: false,
        ignore_cgroups: true,
        extra: vec!["--host-uds=none".into()],
    };
    let rs = f.runsc.clone().with_global(global);
    f.respond(
        "state",
        "stdout",
        r#"{"id":"c","status":"running","pid":1}"#,
    );
    f.respond("list", "stdout", "[]");
    let run = RunOptions::default();
    rs.run("c", &run).await.expect("run");
    rs.create("c", &CreateOptions::default())
        .await
        .expect("create");
    rs.start("c").await.expect("start");
    rs.state("c").await.expect("state");
    rs.list().await.expect("list");
    rs.kill("c", "KILL", false).await.expect("kill");
    rs.pause("c").await.expect("pause");
    rs.resume("c").await.expect("resume");
    rs.checkpoint("c", &CheckpointOptions::default())
        .await
        .expect("checkpoint");
    rs.restore("c", &RestoreOptions::default())
        .await
        .expect("restore");
    rs.exec("c", &ExecOptions::default()).await.expect("exec");
    rs.delete("c", true).await.expect("delete");
    let subs = [
        "run",
        "create",
        "start",
        "state",
        "list",
        "kill",
        "pause",
        "resume",
        "checkpoint",
        "restore",
        "exec",
        "delete",
    ];
    let calls = f.calls();
    assert_eq!(calls.len(), subs.len());
    let prefix = [
        f.root_flag(),
        "--platform=systrap".into(),
        "--network=host".into(),
        "--overlay2=root:memory".into(),
        "--debug-log=/dbg/".into(),
        "--ignore-cgroups".into(),
        "--host-uds=none".into(),
    ];
    for (call, sub) in calls.iter().zip(subs) {
        assert_eq!(&call[..prefix.len()], &prefix[..], "{call:?}");
        assert_eq!(call[prefix.len()], sub, "{call:?}");
    }
}

#[tokio::test]
async fn state_parses_json() {
    let f = Fake::new();
    f.container("sbx-1");
    f.respond(
        "state",
        "stdout",
        r#"{
  "ociVersion": "1.0.2-dev",
  "id": "sbx-1",
  "status": "paused",
  "pid": 4242,
  "bundle": "/b/sbx-1"
}"#,
    );
    let st = f.runsc.state("sbx-1").await.expect("state");
    assert_eq!(f.only_call(), f.expect(&["state", "sbx-1"]));
    assert_eq!(st.id, "sbx-1");
    assert_eq!(st.status, Status::Paused);
    assert_eq!(st.pid, 4242);
    assert_eq!(st.bundle, PathBuf::from("/b/sbx-1"));
}

#[tokio::test]
async fn state_of_missing_container_is_not_found() {
    let f = Fake::new();
    f.container("gone");
    f.respond(
        "state",
        "stderr",
        "loading container: file does not exist\n",
    );
    f.respond("state", "exit", "128");
    let err = f.runsc.state("gone").await.expect_err("missing");
    assert!(err.is_not_found(), "{err:?}");
    assert!(matches!(err, Error::NotFound { ref id } if id == "gone"));
}

#[tokio::test]
async fn state_garbage_is_parse_error_with_stdout() {
    let f = Fake::new();
    f.container("x");
    f.respond("state", "stdout", "not json");
    match f.runsc.state("x").await {
        Err(Error::Parse { stdout, argv, .. }) => {
            assert_eq!(stdout, "not json");
            assert!(argv.iter().any(|a| a == "state"));
        }
        other => panic!("expected Parse, got {other:?}"),
    }
}

#[tokio::test]
async fn list_parses_json_and_null() {
    let f = Fake::new();
    f.respond(
        "list",
        "stdout",
        r#"[{"ociVersion":"1.0.2-dev","id":"a","status":"running","pid":10,"bundle":"/b/a"},
            {"ociVersion":"1.0.2-dev","id":"b","status":"stopped","pid":-1,"bundle":"/b/b"}]"#,
    );
    let list = f.runsc.list().await.expect("list");
    assert_eq!(f.only_call(), f.expect(&["list", "--format=json"]));
    assert_eq!(list.len(), 2);
    assert_eq!(list[0].id, "a");
    assert_eq!(list[0].status, Status::Running);
    assert_eq!(list[1].status, Status::Stopped);
    assert_eq!(list[1].pid, -1);

    let empty = Fake::new();
    empty.respond("list", "stdout", "null\n");
    assert!(empty.runsc.list().await.expect("null list").is_empty());
    let blank = Fake::new();
    assert!(blank.runsc.list().await.expect("blank list").is_empty());
}

#[tokio::test]
async fn kill_argv_and_failure_keeps_stderr() {
    let f = Fake::new();
    f.container("c");
    f.runsc.kill("c", "TERM", true).await.expect("kill");
    assert_eq!(f.only_call(), f.expect(&["kill", "--all", "c", "TERM"]));

    let g = Fake::new();
    g.container("c");
    g.respond("kill", "stderr", "sandbox is not running\n");
    g.respond("kill", "exit", "128");
    match g.runsc.kill("c", "9", false).await {
        Err(Error::Failed { stderr, status, .. }) => {
            assert_eq!(stderr, "sandbox is not running\n");
            assert_eq!(status.code(), Some(128));
        }
        other => panic!("expected Failed, got {other:?}"),
    }
    let h = Fake::new();
    h.container("c");
    h.respond("kill", "stderr", "loading container: file does not exist\n");
    h.respond("kill", "exit", "128");
    let err = h.runsc.kill("c", "KILL", false).await.expect_err("missing");
    assert!(err.is_not_found());
}

#[tokio::test]
async fn delete_argv_and_not_found() {
    let f = Fake::new();
    f.container("c");
    f.runsc.delete("c", true).await.expect("delete");
    f.runsc.delete("c", false).await.expect("delete");
    assert_eq!(
        f.calls(),
        vec![
            f.expect(&["delete", "--force", "c"]),
            f.expect(&["delete", "c"])
        ]
    );
    let g = Fake::new();
    g.container("c");
    g.respond(
        "delete",
        "stderr",
        "loading container \"c\": file does not exist\n",
    );
    g.respond("delete", "exit", "128");
    let err = g.runsc.delete("c", false).await.expect_err("missing");
    assert!(err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn pause_resume_argv() {
    let f = Fake::new();
    f.container("c");
    f.runsc.pause("c").await.expect("pause");
    f.runsc.resume("c").await.expect("resume");
    assert_eq!(
        f.calls(),
        vec![f.expect(&["pause", "c"]), f.expect(&["resume", "c"])]
    );
}

#[tokio::test]
async fn checkpoint_and_restore_argv() {
    let f = Fake::new();
    f.container("a");
    let ck = CheckpointOptions {
        image_path: "/img/1".into(),
        leave_running: true,
        compression: Some("none".into()),
    };
    f.runsc.checkpoint("a", &ck).await.expect("checkpoint");
    let ro = RestoreOptions {
        bundle: "/b/clone".into(),
        image_path: "/img/1".into(),
        detach: true,
        io: ProcessIo::default(),
        pid_file: None,
        user_log: None,
        overlay2: Some("root:dir=/ov/clone".into()),
    };
    f.runsc.restore("clone", &ro).await.expect("restore");
    assert_eq!(
        f.calls(),
        vec![
            f.expect(&[
                "checkpoint",
                "--image-path=/img/1",
                "--leave-running",
                "--compression=none",
                "a"
            ]),
            f.expect(&[
                "--overlay2=root:dir=/ov/clone",
                "restore",
                "--bundle=/b/clone",
                "--image-path=/img/1",
                "--detach",
                "clone"
            ]),
        ]
    );
    let cmd = f.runsc.restore_command("clone", &ro);
    let args: Vec<String> = cmd
        .as_std()
        .get_args()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    assert_eq!(args, f.calls()[1]);
}

#[tokio::test]
async fn exec_argv_output_and_status() {
    let f = Fake::new();
    f.container("c");
    f.respond("exec", "stdout", "hi\n");
    f.respond("exec", "stderr", "warn\n");
    f.respond("exec", "exit", "3");
    let opts = ExecOptions {
        argv: vec!["echo".into(), "hi".into()],
        env: vec!["A=1".into(), "B=2".into()],
        cwd: Some("/work".into()),
        user: Some("1000:1000".into()),
    };
    let out = f.runsc.exec("c", &opts).await.expect("exec");
    assert_eq!(out.stdout, b"hi\n");
    assert_eq!(out.stderr, b"warn\n");
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(
        f.only_call(),
        f.expect(&[
            "exec",
            "--env=A=1",
            "--env=B=2",
            "--cwd=/work",
            "--user=1000:1000",
            "c",
            "echo",
            "hi"
        ])
    );
    let dash = Fake::new();
    dash.container("c");
    let opts = ExecOptions {
        argv: vec!["-weird".into()],
        ..Default::default()
    };
    dash.runsc.exec("c", &opts).await.expect("exec");
    assert_eq!(
        dash.only_call(),
        dash.expect(&["exec", "c", "--", "-weird"])
    );
}

#[tokio::test]
async fn exec_in_missing_container_is_not_found() {
    let f = Fake::new();
    f.container("gone");
    f.respond("exec", "stderr", "loading sandbox: file does not exist\n");
    f.respond("exec", "exit", "128");
    let err = f
        .runsc
        .exec("gone", &ExecOptions::default())
        .await
        .expect_err("missing");
    assert!(err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn exec_command_is_a_pipe_relay() {
    let f = Fake::new();
    f.respond("exec", "cat", "");
    let opts = ExecOptions {
        argv: vec!["/.sbx/bin/sbx-agent".into(), "relay".into()],
        ..Default::default()
    };
    let mut cmd = f.runsc.exec_command("sbx-1", &opts);
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true);
    let mut child = cmd.spawn().expect("spawn relay");
    let mut stdin = child.stdin.take().expect("stdin");
    let mut stdout = child.stdout.take().expect("stdout");
    stdin.write_all(b"frame-1").await.expect("write");
    drop(stdin);
    let mut got = Vec::new();
    stdout.read_to_end(&mut got).await.expect("read");
    assert_eq!(got, b"frame-1");
    assert!(child.wait().await.expect("wait").success());
    assert_eq!(
        f.only_call(),
        f.expect(&["exec", "sbx-1", "/.sbx/bin/sbx-agent", "relay"])
    );
}

#[tokio::test]
async fn missing_binary_is_spawn_error() {
    let rs = Runsc::new("/nonexistent/runsc", "/tmp/none");
    match rs.list().await {
        Err(Error::Spawn { argv, .. }) => assert_eq!(argv[0], "/nonexistent/runsc"),
        other => panic!("expected Spawn, got {other:?}"),
    }
}

#[tokio::test]
async fn missing_console_file_dir_is_io_error() {
    let f = Fake::new();
    let opts = RunOptions {
        io: ProcessIo {
            stdin: IoTarget::Null,
            stdout: IoTarget::File("/nonexistent/dir/console.log".into()),
            stderr: IoTarget::Null,
        },
        ..Default::default()
    };
    let err = f.runsc.run("c", &opts).await.expect_err("io");
    assert!(matches!(err, Error::Io { .. }), "{err:?}");
    assert!(f.calls().is_empty());
}

#[tokio::test]
async fn slow_runsc_times_out() {
    let f = Fake::new();
    f.container("c");
    f.respond("pause", "sleep", "5");
    let rs = f
        .runsc
        .clone()
        .with_timeout(Some(Duration::from_millis(200)));
    let t = std::time::Instant::now();
    let err = rs.pause("c").await.expect_err("timeout");
    assert!(matches!(err, Error::Timeout { .. }), "{err:?}");
    assert!(t.elapsed() < Duration::from_secs(3));
}

#[tokio::test]
async fn exact_id_guard_never_reaches_a_prefix_match() {
    let f = Fake::new();
    f.container("sbx-10");
    // runsc would resolve "sbx-1" to "sbx-10": the wrapper must not ask it.
    f.runsc
        .delete("sbx-1", true)
        .await
        .expect("forced delete of missing");
    for res in [
        f.runsc.delete("sbx-1", false).await,
        f.runsc.kill("sbx-1", "KILL", true).await,
        f.runsc.pause("sbx-1").await,
        f.runsc.resume("sbx-1").await,
        f.runsc.start("sbx-1").await,
        f.runsc
            .checkpoint("sbx-1", &CheckpointOptions::default())
            .await,
    ] {
        assert!(res.expect_err("guarded").is_not_found());
    }
    assert!(f
        .runsc
        .state("sbx-1")
        .await
        .expect_err("state")
        .is_not_found());
    let exec = f.runsc.exec("sbx-1", &ExecOptions::default()).await;
    assert!(exec.expect_err("exec").is_not_found());
    assert!(f.calls().is_empty(), "{:?}", f.calls());
    assert!(f.runsc.exists("sbx-10"));
    assert!(!f.runsc.exists("sbx-1"));
    assert!(!f.runsc.exists(""));
}

#[tokio::test]
async fn state_answer_for_another_id_is_not_found() {
    let f = Fake::new();
    f.container("sbx-1");
    f.respond(
        "state",
        "stdout",
        r#"{"id":"sbx-10","status":"running","pid":7}"#,
    );
    let err = f.runsc.state("sbx-1").await.expect_err("prefix answer");
    assert!(err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn guard_can_be_disabled() {
    let f = Fake::new();
    let mut rs = f.runsc.clone();
    rs.exact_ids = false;
    rs.pause("anything").await.expect("pause");
    assert_eq!(f.only_call(), f.expect(&["pause", "anything"]));
}
