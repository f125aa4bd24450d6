//! Protocol v2 process options: user, stdin pipe, terminal, tag, kill deadline.

mod common;

use common::*;
use sbx_agent::users::UserDb;
use sbx_agent_proto::{
    AgentErrorCode, Body, ProcessOptions, ProcessState, PtySize, Reply, Request, StreamKind,
};
use std::collections::BTreeMap;
use uuid::Uuid;

fn as_user(name: &str) -> ProcessOptions {
    ProcessOptions {
        user: Some(name.to_string()),
        ..Default::default()
    }
}

fn in_dir(argv: &[&str], cwd: &str) -> sbx_agent_proto::CommandSpec {
    let mut s = spec(argv);
    s.cwd = Some(cwd.to_string());
    s
}

#[tokio::test]
async fn a_user_gets_its_ids_groups_home_and_environment() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    // The base environment overrides the user's LOGNAME; the call's env wins over both.
    c.ok(Request::Configure {
        env: BTreeMap::from([
            ("LOGNAME".to_string(), "configured".to_string()),
            ("X".to_string(), "base".to_string()),
        ]),
    })
    .await;
    let mut command = in_dir(
        &[
            "sh",
            "-c",
            "echo ids=$(id -u):$(id -g); echo groups=$(id -G); echo home=$HOME user=$USER \
             logname=$LOGNAME x=$X; pwd",
        ],
        "/tmp",
    );
    command.env.insert("X".into(), "call".into());
    let p = c.start_with(command, as_user("nobody")).await;
    assert_eq!(p.state, ProcessState::Running, "{p:?}");
    assert_eq!(p.user.as_deref(), Some("nobody"));
    let done = c.wait(p.id).await;
    assert_eq!(done.exit_code, Some(0), "{done:?}");
    let out = c.output_text(p.id).await;
    let nobody = UserDb::default().user("nobody").unwrap();
    let groups: Vec<String> = nobody.groups.iter().map(u32::to_string).collect();
    assert_eq!(
        out,
        format!(
            "ids={}:{}\ngroups={}\nhome={} user=nobody logname=configured x=call\n/tmp\n",
            nobody.uid,
            nobody.gid,
            groups.join(" "),
            nobody.home
        )
    );
    assert_ne!(nobody.uid, 0);
}

#[tokio::test]
async fn the_working_directory_defaults_to_the_users_home() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let root = c.start_with(spec(&["pwd"]), as_user("root")).await;
    c.wait(root.id).await;
    assert_eq!(c.output_text(root.id).await, "/root\n");
    assert_eq!(root.cwd, None, "cwd is reported as requested");
    // Without a user the default stays `/`.
    let plain = c.start(&["pwd"]).await;
    c.wait(plain.id).await;
    assert_eq!(c.output_text(plain.id).await, "/\n");
    // nobody's home does not exist on Debian: the start fails on it.
    let home = UserDb::default().user("nobody").unwrap().home;
    if !std::path::Path::new(&home).exists() {
        let p = c.start_with(spec(&["pwd"]), as_user("nobody")).await;
        assert_eq!(p.state, ProcessState::Failed);
        assert!(p.error.as_deref().unwrap_or("").contains(&home), "{p:?}");
    }
    // A directory only root may enter: the child enters it as the user.
    let private = agent.dir.path().join("private");
    std::fs::create_dir(&private).unwrap();
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    let p = c
        .start_with(
            in_dir(&["true"], private.to_str().unwrap()),
            as_user("nobody"),
        )
        .await;
    assert_eq!(p.state, ProcessState::Failed);
    assert!(
        p.error
            .as_deref()
            .unwrap_or("")
            .contains("Permission denied"),
        "{p:?}"
    );
}

#[tokio::test]
async fn an_unknown_user_fails_the_start() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let e = c
        .call(Request::ProcessStart {
            command: spec(&["true"]),
            options: as_user("no-such-user-xyz"),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    assert_eq!(e.message, "invalid username: 'no-such-user-xyz'");
    match c.ok(Request::ProcessList).await.0 {
        Reply::Processes { processes } => assert!(processes.is_empty()),
        other => panic!("{other:?}"),
    }
}

#[tokio::test]
async fn stdin_pipe_takes_input_in_order_and_closes() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let opts = ProcessOptions {
        stdin: true,
        ..Default::default()
    };
    let p = c.start_with(spec(&["cat"]), opts).await;
    assert!(p.stdin_open);
    c.input(p.id, b"hello\n").await.unwrap();
    let (seen, _) = c.output_until(p.id, 0, "hello\n").await;
    assert_eq!(seen, "hello\n");
    // Many inputs sent without waiting for their answers, then the close:
    // all written, in order, before the EOF.
    let ids: Vec<u64> = (0..200).map(|_| c.fresh_id()).collect();
    for (i, id) in ids.iter().enumerate() {
        c.send(
            *id,
            Body::Request(Request::ProcessInput { process: p.id }),
            format!("{i},").into_bytes(),
        )
        .await;
    }
    let close = c.fresh_id();
    c.send_req(close, Request::ProcessCloseStdin { process: p.id })
        .await;
    for id in ids {
        assert_eq!(c.outcome_with_events(id).await.0.unwrap().0, Reply::Ok);
    }
    assert_eq!(c.outcome_with_events(close).await.0.unwrap().0, Reply::Ok);
    let done = c.wait(p.id).await;
    assert_eq!(
        (done.state, done.exit_code),
        (ProcessState::Exited, Some(0)),
        "cat did not see EOF"
    );
    assert!(!done.stdin_open);
    let expected: String = (0..200).map(|i| format!("{i},")).collect();
    assert_eq!(c.output_text(p.id).await, format!("hello\n{expected}"));
    // Closed, ended, never opened, unknown.
    let e = c.input(p.id, b"late").await.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    let e = c
        .call(Request::ProcessCloseStdin { process: p.id })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    let q = c.start(&["sleep", "100"]).await;
    assert!(!q.stdin_open);
    let e = c.input(q.id, b"x").await.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    let e = c.input(Uuid::new_v4(), b"x").await.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
}

#[tokio::test]
async fn a_process_without_stdin_reads_eof() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    // `stdin: false` (the default): /dev/null, so cat ends at once.
    let p = c.start(&["cat"]).await;
    assert_eq!(c.wait(p.id).await.exit_code, Some(0));
}

fn pty(cols: u16, rows: u16) -> ProcessOptions {
    ProcessOptions {
        pty: Some(PtySize { cols, rows }),
        ..Default::default()
    }
}

#[tokio::test]
async fn a_terminal_process_has_its_tty_size_and_session() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    // Ctrl-C reaches the shell only through a controlling terminal (the
    // line discipline signals its foreground group); `read` waits for it.
    let script = "tty; stty size; echo sid=$(cut -d' ' -f6 /proc/$$/stat) pid=$$; \
                  echo err >&2; trap 'echo got-int; exit 5' INT; echo ready; read line";
    let p = c
        .start_with(spec(&["sh", "-c", script]), pty(100, 30))
        .await;
    assert!(p.pty && p.stdin_open, "{p:?}");
    c.output_until(p.id, 0, "ready").await;
    c.input(p.id, b"\x03").await.unwrap();
    let done = c.wait(p.id).await;
    assert_eq!(
        (done.state, done.exit_code),
        (ProcessState::Exited, Some(5))
    );
    assert!(!done.stdin_open);
    let (chunks, payload) = match c
        .ok(Request::ProcessOutput {
            process: p.id,
            tail_bytes: 0,
        })
        .await
    {
        (Reply::Output { chunks }, payload) => (chunks, payload),
        other => panic!("{other:?}"),
    };
    assert!(chunks.iter().all(|ch| ch.stream == StreamKind::Pty));
    let out = String::from_utf8_lossy(&payload).replace("\r\n", "\n");
    let lines: Vec<&str> = out.lines().collect();
    assert!(lines[0].starts_with("/dev/pts/"), "{out:?}");
    assert_eq!(lines[1], "30 100");
    // A session leader.
    let fields: BTreeMap<&str, &str> = lines[2]
        .split(' ')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    assert_eq!(fields["sid"], fields["pid"], "{out:?}");
    // stderr goes to the terminal too.
    assert_eq!(lines[3], "err");
    assert!(out.contains("got-int"), "{out:?}");
}

#[tokio::test]
async fn an_interactive_shell_on_a_terminal_resizes_and_exits() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let mut command = spec(&["sh"]);
    command.env.insert("PS1".into(), "$ ".into());
    let p = c.start_with(command, pty(80, 24)).await;
    c.input(p.id, b"stty size\n").await.unwrap();
    let (_, next) = c.output_until(p.id, 0, "24 80").await;
    c.ok(Request::ProcessResize {
        process: p.id,
        size: PtySize {
            cols: 132,
            rows: 43,
        },
    })
    .await;
    c.input(p.id, b"stty size\n").await.unwrap();
    c.output_until(p.id, next, "43 132").await;
    let e = c
        .call(Request::ProcessCloseStdin { process: p.id })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    assert!(e.message.contains("\\x04"), "{e:?}");
    // Ctrl-D at an empty prompt ends the shell.
    c.input(p.id, b"\x04").await.unwrap();
    let done = c.wait(p.id).await;
    assert_eq!(
        (done.state, done.exit_code),
        (ProcessState::Exited, Some(0))
    );
    // Resizing: an ended process, a process without a terminal, an unknown one.
    let size = PtySize { cols: 1, rows: 1 };
    let e = c
        .call(Request::ProcessResize {
            process: p.id,
            size,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    let q = c.start(&["sleep", "100"]).await;
    let e = c
        .call(Request::ProcessResize {
            process: q.id,
            size,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    let e = c
        .call(Request::ProcessResize {
            process: Uuid::new_v4(),
            size,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
}

#[tokio::test]
async fn a_terminal_process_as_a_user_is_killed_with_its_group() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let pidfile = agent.dir.path().join("child.pid");
    let script = format!("sleep 100 & echo $! > {}; id -u; wait", pidfile.display());
    let opts = ProcessOptions {
        user: Some("nobody".into()),
        pty: Some(PtySize { cols: 80, rows: 24 }),
        ..Default::default()
    };
    let world_writable = agent.dir.path().to_str().unwrap().to_string();
    std::fs::set_permissions(
        agent.dir.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o777),
    )
    .unwrap();
    let p = c
        .start_with(in_dir(&["sh", "-c", &script], &world_writable), opts)
        .await;
    let uid = UserDb::default().user("nobody").unwrap().uid;
    c.output_until(p.id, 0, &format!("{uid}\r\n")).await;
    let grandchild = read_pid_file(&pidfile).await;
    c.ok(Request::ProcessSignal {
        process: p.id,
        signal: 9,
        include_children: true,
    })
    .await;
    let done = c.wait(p.id).await;
    assert_eq!((done.state, done.signal), (ProcessState::Killed, Some(9)));
    eventually("grandchild killed", || !pid_alive(grandchild)).await;
}

#[tokio::test]
async fn kill_after_ms_kills_the_group_and_spares_the_quick() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let pidfile = agent.dir.path().join("child.pid");
    let script = format!("sleep 100 & echo $! > {}; wait", pidfile.display());
    let opts = ProcessOptions {
        kill_after_ms: Some(300),
        ..Default::default()
    };
    let p = c
        .start_with(spec(&["sh", "-c", &script]), opts.clone())
        .await;
    let grandchild = read_pid_file(&pidfile).await;
    let done = c.wait(p.id).await;
    assert_eq!(
        (done.state, done.signal, done.exit_code),
        (ProcessState::Killed, Some(9), None)
    );
    let (started, ended) = (done.started_at_ms.unwrap(), done.ended_at_ms.unwrap());
    assert!(
        ended - started >= 300,
        "killed after {} ms",
        ended - started
    );
    eventually("grandchild killed", || !pid_alive(grandchild)).await;
    let quick = c.start_with(spec(&["true"]), opts).await;
    let done = c.wait(quick.id).await;
    assert_eq!(
        (done.state, done.exit_code),
        (ProcessState::Exited, Some(0))
    );
}

#[tokio::test]
async fn tag_env_cwd_and_flags_are_reported() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let mut command = in_dir(&["sleep", "100"], "/tmp");
    command.env.insert("A".into(), "1".into());
    let opts = ProcessOptions {
        tag: Some("my-tag".into()),
        stdin: true,
        ..Default::default()
    };
    let p = c.start_with(command.clone(), opts.clone()).await;
    let failed = c
        .start_with(
            spec(&["no-such-binary-xyz"]),
            ProcessOptions {
                tag: Some("failed-tag".into()),
                ..Default::default()
            },
        )
        .await;
    assert_eq!(failed.state, ProcessState::Failed);
    let list = match c.ok(Request::ProcessList).await.0 {
        Reply::Processes { processes } => processes,
        other => panic!("{other:?}"),
    };
    let listed = list.iter().find(|x| x.id == p.id).unwrap();
    assert_eq!(listed.tag.as_deref(), Some("my-tag"));
    assert_eq!(listed.env, command.env);
    assert_eq!(listed.cwd.as_deref(), Some("/tmp"));
    assert_eq!(listed.user, None);
    assert!(!listed.pty);
    assert!(listed.stdin_open);
    let listed = list.iter().find(|x| x.id == failed.id).unwrap();
    assert_eq!(listed.tag.as_deref(), Some("failed-tag"));
    assert!(!listed.stdin_open);
    c.ok(Request::ProcessSignal {
        process: p.id,
        signal: 9,
        include_children: true,
    })
    .await;
    let done = c.wait(p.id).await;
    assert_eq!(done.tag.as_deref(), Some("my-tag"));
    assert!(!done.stdin_open);
}
