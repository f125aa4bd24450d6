//! Protocol v2 file features: owner names and symlink targets in stats,
//! listings with a depth, and files created owned by a guest user.

mod common;

use common::*;
use sbx_agent::users::UserDb;
use sbx_agent_proto::{AgentErrorCode, Body, FileKind, FileStat, Reply, Request};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;

async fn stat(c: &mut Client, path: &Path) -> FileStat {
    match c
        .ok(Request::Stat {
            path: path.to_string_lossy().into_owned(),
        })
        .await
        .0
    {
        Reply::Stat { stat } => stat,
        other => panic!("{other:?}"),
    }
}

fn canonical(p: &Path) -> String {
    std::fs::canonicalize(p)
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// nobody's uid and gid on this machine.
fn nobody() -> (u32, u32) {
    let u = UserDb::default().user("nobody").unwrap();
    (u.uid, u.gid)
}

fn ids(p: &Path) -> (u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.uid(), m.gid())
}

#[tokio::test]
async fn stat_names_owners_and_resolves_symlinks() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let d = agent.dir.path();
    std::fs::create_dir(d.join("dir")).unwrap();
    std::fs::write(d.join("dir/file.txt"), "x").unwrap();
    let (uid, gid) = nobody();
    std::os::unix::fs::chown(d.join("dir/file.txt"), Some(uid), Some(gid)).unwrap();
    let s = stat(&mut c, &d.join("dir/file.txt")).await;
    assert_eq!((s.uid, s.gid), (uid, gid));
    assert_eq!(s.owner.as_deref(), Some("nobody"));
    assert_eq!(s.group, UserDb::default().names().group(gid));
    assert!(s.group.is_some());
    assert_eq!((s.symlink_target, s.target_kind), (None, None));
    let s = stat(&mut c, &d.join("dir")).await;
    assert_eq!(
        (s.owner.as_deref(), s.group.as_deref()),
        (Some("root"), Some("root"))
    );
    // An id without a name.
    std::fs::write(d.join("orphan"), "").unwrap();
    std::os::unix::fs::chown(d.join("orphan"), Some(4_000_123), Some(4_000_123)).unwrap();
    let s = stat(&mut c, &d.join("orphan")).await;
    assert_eq!((s.uid, s.owner, s.group), (4_000_123, None, None));

    // Links: to a file (relative, through another link), to a directory, dangling.
    std::os::unix::fs::symlink("dir/file.txt", d.join("to-file")).unwrap();
    std::os::unix::fs::symlink("to-file", d.join("chain")).unwrap();
    std::os::unix::fs::symlink(d.join("dir"), d.join("to-dir")).unwrap();
    std::os::unix::fs::symlink("../gone/missing", d.join("dir/dangling")).unwrap();
    let s = stat(&mut c, &d.join("chain")).await;
    assert_eq!(s.kind, FileKind::Symlink);
    assert_eq!(s.symlink_target, Some(canonical(&d.join("dir/file.txt"))));
    assert_eq!(s.target_kind, Some(FileKind::File));
    let s = stat(&mut c, &d.join("to-dir")).await;
    assert_eq!(s.symlink_target, Some(canonical(&d.join("dir"))));
    assert_eq!(s.target_kind, Some(FileKind::Dir));
    let s = stat(&mut c, &d.join("dir/dangling")).await;
    assert_eq!(s.kind, FileKind::Symlink);
    assert_eq!(
        s.symlink_target,
        Some(d.join("gone/missing").to_string_lossy().into_owned())
    );
    assert_eq!(s.target_kind, None);
}

async fn list(c: &mut Client, path: &Path, depth: u32) -> Vec<FileStat> {
    match c
        .ok(Request::ListDir {
            path: path.to_string_lossy().into_owned(),
            depth,
        })
        .await
        .0
    {
        Reply::Dir { entries } => entries,
        other => panic!("{other:?}"),
    }
}

fn rel(entries: &[FileStat], root: &Path) -> Vec<String> {
    entries
        .iter()
        .map(|e| {
            Path::new(&e.path)
                .strip_prefix(root)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect()
}

#[tokio::test]
async fn list_dir_descends_to_its_depth_without_following_links() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let root = agent.dir.path().join("tree");
    std::fs::create_dir_all(root.join("a/b/c")).unwrap();
    std::fs::write(root.join("a/b/c/deep.txt"), "x").unwrap();
    std::fs::write(root.join("a/one.txt"), "x").unwrap();
    std::fs::write(root.join("top.txt"), "x").unwrap();
    std::os::unix::fs::symlink(root.join("a"), root.join("link")).unwrap();
    assert_eq!(
        rel(&list(&mut c, &root, 0).await, &root),
        ["a", "link", "top.txt"]
    );
    assert_eq!(
        rel(&list(&mut c, &root, 1).await, &root),
        ["a", "link", "top.txt"]
    );
    let two = list(&mut c, &root, 2).await;
    assert_eq!(
        rel(&two, &root),
        ["a", "a/b", "a/one.txt", "link", "top.txt"]
    );
    let b = two.iter().find(|e| e.path.ends_with("a/b")).unwrap();
    assert_eq!((b.name.as_str(), b.kind), ("b", FileKind::Dir));
    assert_eq!(b.owner.as_deref(), Some("root"));
    let link = two.iter().find(|e| e.name == "link").unwrap();
    assert_eq!(link.kind, FileKind::Symlink);
    assert_eq!(link.symlink_target, Some(canonical(&root.join("a"))));
    assert_eq!(
        rel(&list(&mut c, &root, 3).await, &root),
        ["a", "a/b", "a/b/c", "a/one.txt", "link", "top.txt"]
    );
    assert_eq!(list(&mut c, &root, 4).await.len(), 7);
    // The listed directory itself may be a link.
    assert_eq!(
        rel(
            &list(&mut c, &root.join("link"), 2).await,
            &root.join("link")
        ),
        ["b", "b/c", "one.txt"]
    );
    let e = c
        .call(Request::ListDir {
            path: root.join("top.txt").to_string_lossy().into_owned(),
            depth: 2,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::Io);
}

#[tokio::test]
async fn uploads_mkdir_and_rename_create_things_owned_by_the_user() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let d = agent.dir.path();
    let nob = nobody();
    // Upload: the new parents and the file belong to nobody, the mode is exact.
    let dest = d.join("up/a/b/file.txt");
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::FileWriteBegin {
            path: dest.to_string_lossy().into_owned(),
            mode: 0o2750,
            max_bytes: 100,
            owner: Some("nobody".into()),
            metadata: Default::default(),
        },
    )
    .await;
    c.send(id, Body::Request(Request::FileWriteData), b"hi".to_vec())
        .await;
    c.send(id, Body::Request(Request::FileWriteEnd), Vec::new())
        .await;
    assert!(c.outcome_with_events(id).await.0.is_ok());
    assert_eq!(std::fs::read(&dest).unwrap(), b"hi");
    assert_eq!(ids(&dest), nob);
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o2750
    );
    for p in ["up", "up/a", "up/a/b"] {
        assert_eq!(ids(&d.join(p)), nob, "{p}");
    }
    assert_eq!(ids(d), (0, 0), "an existing parent was touched");
    // Unknown owner: refused, nothing created.
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::FileWriteBegin {
            path: d.join("new/file").to_string_lossy().into_owned(),
            mode: 0o644,
            max_bytes: 100,
            owner: Some("no-such-user-xyz".into()),
            metadata: Default::default(),
        },
    )
    .await;
    let e = c.outcome_with_events(id).await.0.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    assert_eq!(e.message, "invalid username: 'no-such-user-xyz'");
    assert!(!d.join("new").exists());

    // Mkdir: every directory created is nobody's; an existing one is untouched.
    std::fs::create_dir(d.join("mine")).unwrap();
    c.ok(Request::Mkdir {
        path: d.join("mine/x/y").to_string_lossy().into_owned(),
        owner: Some("nobody".into()),
    })
    .await;
    assert_eq!(ids(&d.join("mine")), (0, 0));
    assert_eq!(ids(&d.join("mine/x")), nob);
    assert_eq!(ids(&d.join("mine/x/y")), nob);
    c.ok(Request::Mkdir {
        path: d.join("mine").to_string_lossy().into_owned(),
        owner: Some("nobody".into()),
    })
    .await;
    assert_eq!(ids(&d.join("mine")), (0, 0));
    let e = c
        .call(Request::Mkdir {
            path: d.join("other").to_string_lossy().into_owned(),
            owner: Some("no-such-user-xyz".into()),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);

    // Rename: without an owner the parents must exist; with one they are made.
    std::fs::write(d.join("moved.txt"), "m").unwrap();
    let to = d.join("dest/p/moved.txt").to_string_lossy().into_owned();
    let from = d.join("moved.txt").to_string_lossy().into_owned();
    let e = c
        .call(Request::Rename {
            from: from.clone(),
            to: to.clone(),
            parents_owner: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
    c.ok(Request::Rename {
        from,
        to: to.clone(),
        parents_owner: Some("nobody".into()),
    })
    .await;
    assert_eq!(std::fs::read(&to).unwrap(), b"m");
    assert_eq!(ids(&d.join("dest")), nob);
    assert_eq!(ids(&d.join("dest/p")), nob);
    assert_eq!(
        ids(Path::new(&to)),
        (0, 0),
        "the moved file keeps its owner"
    );
    // A missing source creates nothing.
    let e = c
        .call(Request::Rename {
            from: d.join("nope").to_string_lossy().into_owned(),
            to: d.join("never/x").to_string_lossy().into_owned(),
            parents_owner: Some("nobody".into()),
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
    assert!(!d.join("never").exists());
}
