//! `watch`: inotify changes under a directory as `fs_change` events.

mod common;

use common::*;
use sbx_agent_proto::{AgentErrorCode, Body, Event, FsChangeKind, Reply, Request};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

use FsChangeKind::{Chmod, Create, Remove, Rename, Write};

/// Starts a watch and waits until it is in place (a later request was answered).
async fn watch(c: &mut Client, path: &Path, recursive: bool) -> u64 {
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::Watch {
            path: path.to_string_lossy().into_owned(),
            recursive,
        },
    )
    .await;
    assert_eq!(c.ok(Request::Ping).await.0, Reply::Pong);
    id
}

/// Reads the watch's events until `(name, kind)` arrives; returns all seen.
async fn until(
    c: &mut Client,
    id: u64,
    name: &str,
    kind: FsChangeKind,
) -> Vec<(String, FsChangeKind)> {
    let mut seen = Vec::new();
    loop {
        let f = c.next_for(id).await;
        match f.header.body {
            Body::Event(Event::FsChange { name: n, change }) => {
                let hit = n == name && change == kind;
                seen.push((n, change));
                if hit {
                    return seen;
                }
            }
            other => panic!("watch ended waiting for {name} {kind:?} after {seen:?}: {other:?}"),
        }
    }
}

/// Reads the watch's events until all of `want` arrived, in any order.
async fn until_all(c: &mut Client, id: u64, want: &[(&str, FsChangeKind)]) {
    let mut missing: Vec<(String, FsChangeKind)> =
        want.iter().map(|(n, k)| (n.to_string(), *k)).collect();
    let mut seen = Vec::new();
    while !missing.is_empty() {
        let f = c.next_for(id).await;
        match f.header.body {
            Body::Event(Event::FsChange { name, change }) => {
                missing.retain(|(n, k)| !(*n == name && *k == change));
                seen.push((name, change));
            }
            other => panic!("watch ended; still missing {missing:?} after {seen:?}: {other:?}"),
        }
    }
}

fn inotify_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|rd| {
            rd.flatten()
                .filter(|e| {
                    std::fs::read_link(e.path())
                        .is_ok_and(|t| t.to_string_lossy().contains("inotify"))
                })
                .count()
        })
        .unwrap_or(0)
}

#[tokio::test]
async fn a_recursive_watch_reports_changes_until_cancelled() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let root = agent.dir.path().join("w");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let id = watch(&mut c, &root, true).await;
    assert_eq!(inotify_fds(agent.pid()), 1);

    std::fs::write(root.join("a.txt"), "hello").unwrap();
    let seen = until(&mut c, id, "a.txt", Write).await;
    assert_eq!(seen[0], ("a.txt".into(), Create), "{seen:?}");
    // A subdirectory that existed at the start.
    std::fs::write(root.join("sub/b.txt"), "b").unwrap();
    until(&mut c, id, "sub/b.txt", Create).await;
    until(&mut c, id, "sub/b.txt", Write).await;
    std::fs::set_permissions(root.join("a.txt"), std::fs::Permissions::from_mode(0o600)).unwrap();
    until(&mut c, id, "a.txt", Chmod).await;
    std::fs::rename(root.join("a.txt"), root.join("c.txt")).unwrap();
    let seen = until(&mut c, id, "c.txt", Create).await;
    assert!(seen.contains(&("a.txt".into(), Rename)), "{seen:?}");
    std::fs::remove_file(root.join("c.txt")).unwrap();
    until(&mut c, id, "c.txt", Remove).await;
    // A new directory tree: its contents are reported (found by the watch
    // or the listing that follows it), and it is watched from then on.
    std::fs::create_dir_all(root.join("new/deeper")).unwrap();
    std::fs::write(root.join("new/inner.txt"), "i").unwrap();
    until_all(
        &mut c,
        id,
        &[
            ("new", Create),
            ("new/deeper", Create),
            ("new/inner.txt", Create),
        ],
    )
    .await;
    std::fs::write(root.join("new/deeper/late.txt"), "l").unwrap();
    until(&mut c, id, "new/deeper/late.txt", Write).await;
    // A directory moved away is no longer watched under its old name.
    std::fs::rename(root.join("sub"), agent.dir.path().join("moved-out")).unwrap();
    until(&mut c, id, "sub", Rename).await;
    std::fs::write(agent.dir.path().join("moved-out/x.txt"), "x").unwrap();
    std::fs::write(root.join("marker"), "m").unwrap();
    let seen = until(&mut c, id, "marker", Create).await;
    assert!(
        seen.iter().all(|(n, _)| !n.contains("x.txt")),
        "moved-out dir still watched: {seen:?}"
    );

    // Cancelled: the inotify instance is closed.
    c.send(id, Body::Cancel, Vec::new()).await;
    eventually("inotify closed", || inotify_fds(agent.pid()) == 0).await;
    assert_eq!(c.ok(Request::Ping).await.0, Reply::Pong);
}

#[tokio::test]
async fn a_plain_watch_ignores_subdirectories_and_ends_with_its_directory() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let root = agent.dir.path().join("w");
    std::fs::create_dir_all(root.join("sub")).unwrap();
    let id = watch(&mut c, &root, false).await;
    std::fs::write(root.join("sub/hidden.txt"), "x").unwrap();
    std::fs::write(root.join("top.txt"), "x").unwrap();
    let seen = until(&mut c, id, "top.txt", Create).await;
    assert_eq!(seen, [("top.txt".to_string(), Create)]);
    std::fs::remove_dir_all(&root).unwrap();
    until(&mut c, id, "", Remove).await;
    // The watched directory is gone: the watch ends.
    let (outcome, _) = c.outcome_with_events(id).await;
    assert_eq!(outcome.unwrap().0, Reply::Ok);
}

#[tokio::test]
async fn watch_refuses_missing_paths_and_files() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    std::fs::write(agent.dir.path().join("file"), "x").unwrap();
    for (path, code) in [
        (agent.path("missing"), AgentErrorCode::NotFound),
        (agent.path("file"), AgentErrorCode::InvalidArgument),
        ("relative".to_string(), AgentErrorCode::InvalidArgument),
    ] {
        let e = c
            .call(Request::Watch {
                path: path.clone(),
                recursive: true,
            })
            .await
            .unwrap_err();
        assert_eq!(e.code, code, "{path}: {e:?}");
    }
    assert_eq!(inotify_fds(agent.pid()), 0);
}
