mod common;

use common::*;
use sbx_agent::files::FILE_DATA_CHUNK_BYTES;
use sbx_agent::upload::TEMP_MARKER;
use sbx_agent_proto::{AgentErrorCode, Body, Event, FileKind, Reply, Request};
use std::os::unix::fs::PermissionsExt;
use std::path::Path;

fn temp_files_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.contains(TEMP_MARKER))
                .collect()
        })
        .unwrap_or_default()
}

async fn begin(c: &mut Client, path: &str, mode: u32, max_bytes: u64) -> u64 {
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::FileWriteBegin {
            path: path.to_string(),
            mode,
            max_bytes,
            owner: None,
            metadata: Default::default(),
        },
    )
    .await;
    id
}

async fn data(c: &mut Client, id: u64, bytes: &[u8]) {
    c.send(id, Body::Request(Request::FileWriteData), bytes.to_vec())
        .await;
}

#[tokio::test]
async fn upload_multi_frame_is_atomic() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let dest = agent.dir.path().join("a/b/c/file.bin");
    let content = pseudo_random(3 * 1024 * 1024 + 17, 7);
    let id = begin(&mut c, dest.to_str().unwrap(), 0o640, 100 << 20).await;
    for part in content.chunks(256 * 1024) {
        data(&mut c, id, part).await;
    }
    c.send(id, Body::Request(Request::FileWriteEnd), Vec::new())
        .await;
    let (outcome, _) = c.outcome_with_events(id).await;
    assert_eq!(
        outcome.unwrap().0,
        Reply::FileWritten {
            bytes_written: content.len() as u64
        }
    );
    assert_eq!(sha256(&std::fs::read(&dest).unwrap()), sha256(&content));
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o7777,
        0o640
    );
    let parent_mode = std::fs::metadata(dest.parent().unwrap())
        .unwrap()
        .permissions()
        .mode();
    assert_eq!(parent_mode & 0o777, 0o755);
    assert!(temp_files_in(dest.parent().unwrap()).is_empty());

    // Replacing an existing file: until End, readers see the old content.
    let id = begin(&mut c, dest.to_str().unwrap(), 0o600, 100 << 20).await;
    data(&mut c, id, b"new ").await;
    let parent = dest.parent().unwrap().to_path_buf();
    eventually("temp file exists", || !temp_files_in(&parent).is_empty()).await;
    assert_eq!(sha256(&std::fs::read(&dest).unwrap()), sha256(&content));
    data(&mut c, id, b"content").await;
    c.send(id, Body::Request(Request::FileWriteEnd), Vec::new())
        .await;
    assert!(c.outcome_with_events(id).await.0.is_ok());
    assert_eq!(std::fs::read(&dest).unwrap(), b"new content");
    assert!(temp_files_in(&parent).is_empty());
}

#[tokio::test]
async fn upload_limits_and_bad_destinations() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    // Over max_bytes: early error, nothing left behind, later frames ignored.
    let dest = agent.path("big.bin");
    let id = begin(&mut c, &dest, 0o644, 1000).await;
    data(&mut c, id, &[1u8; 600]).await;
    data(&mut c, id, &[2u8; 600]).await;
    let e = c.outcome_with_events(id).await.0.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::TooLarge);
    data(&mut c, id, &[3u8; 10]).await;
    c.send(id, Body::Request(Request::FileWriteEnd), Vec::new())
        .await;
    c.ok(Request::Ping).await;
    assert!(!Path::new(&dest).exists());
    assert!(temp_files_in(agent.dir.path()).is_empty());

    // Onto a directory.
    std::fs::create_dir(agent.dir.path().join("adir")).unwrap();
    let id = begin(&mut c, &agent.path("adir"), 0o644, 1000).await;
    let e = c.outcome_with_events(id).await.0.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotRegularFile);
    // Onto a symlink (to a regular file, to nothing): refused, the link and its target kept.
    std::fs::write(agent.dir.path().join("target.txt"), "kept").unwrap();
    for (link, to) in [("file.link", "target.txt"), ("dangling.link", "missing")] {
        std::os::unix::fs::symlink(to, agent.dir.path().join(link)).unwrap();
        let id = begin(&mut c, &agent.path(link), 0o644, 1000).await;
        let e = c.outcome_with_events(id).await.0.unwrap_err();
        assert_eq!(e.code, AgentErrorCode::NotRegularFile, "{link}");
        let meta = std::fs::symlink_metadata(agent.dir.path().join(link)).unwrap();
        assert!(meta.file_type().is_symlink(), "{link} was replaced");
    }
    assert_eq!(
        std::fs::read_to_string(agent.dir.path().join("target.txt")).unwrap(),
        "kept"
    );
    assert!(temp_files_in(agent.dir.path()).is_empty());
    // Relative path.
    let id = begin(&mut c, "relative/x", 0o644, 1000).await;
    let e = c.outcome_with_events(id).await.0.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    // Abort removes the temp file and answers Ok.
    let id = begin(&mut c, &agent.path("aborted"), 0o644, 1000).await;
    data(&mut c, id, b"partial").await;
    c.send(id, Body::Request(Request::FileWriteAbort), Vec::new())
        .await;
    assert_eq!(c.outcome_with_events(id).await.0.unwrap().0, Reply::Ok);
    assert!(!Path::new(&agent.path("aborted")).exists());
    assert!(temp_files_in(agent.dir.path()).is_empty());
    // Data for an unknown upload is a protocol error.
    data(&mut c, 9999, b"x").await;
    assert_eq!(
        c.outcome_with_events(9999).await.0.unwrap_err().code,
        AgentErrorCode::Protocol
    );
}

#[tokio::test]
async fn dropped_connection_mid_upload_leaves_no_temp_file() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let id = begin(&mut c, &agent.path("up/file"), 0o644, 1 << 20).await;
    data(&mut c, id, &[7u8; 1000]).await;
    let dir = agent.dir.path().join("up");
    eventually("temp file exists", || !temp_files_in(&dir).is_empty()).await;
    drop(c);
    eventually("temp file removed", || temp_files_in(&dir).is_empty()).await;
    assert!(!dir.join("file").exists());
    // The agent still serves.
    agent.connect().await.ok(Request::Ping).await;
}

#[tokio::test]
async fn download_large_file_and_errors() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let content = pseudo_random(5 * 1024 * 1024 + 3, 11);
    let path = agent.path("down.bin");
    std::fs::write(&path, &content).unwrap();
    let id = c.fresh_id();
    c.send_req(
        id,
        Request::FileRead {
            path: path.clone(),
            max_bytes: 100 << 20,
        },
    )
    .await;
    let (outcome, events) = c.outcome_with_events(id).await;
    assert_eq!(
        outcome.unwrap().0,
        Reply::FileRead {
            bytes: content.len() as u64
        }
    );
    let mut got = Vec::new();
    for (i, (ev, payload)) in events.into_iter().enumerate() {
        match ev {
            Event::FileMeta { stat } => {
                assert_eq!(i, 0);
                assert_eq!(
                    (stat.kind, stat.size),
                    (FileKind::File, content.len() as u64)
                );
            }
            Event::FileData => {
                assert!(i > 0 && payload.len() <= FILE_DATA_CHUNK_BYTES);
                got.extend_from_slice(&payload);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(sha256(&got), sha256(&content));

    let read = |path: String, max_bytes| Request::FileRead { path, max_bytes };
    let e = c.call(read(agent.path(""), 1 << 20)).await.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotRegularFile);
    let e = c
        .call(read(agent.path("missing"), 1 << 20))
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
    let e = c.call(read(path, 1000)).await.unwrap_err();
    assert_eq!(e.code, AgentErrorCode::TooLarge);
}

#[tokio::test]
async fn stat_list_mkdir_remove_rename() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let d = agent.path("x/y/z");
    c.ok(Request::Mkdir {
        path: d.clone(),
        owner: None,
    })
    .await;
    c.ok(Request::Mkdir {
        path: d.clone(),
        owner: None,
    })
    .await; // already a directory: fine
    match c.ok(Request::Stat { path: d.clone() }).await.0 {
        Reply::Stat { stat } => {
            assert_eq!((stat.kind, stat.name.as_str()), (FileKind::Dir, "z"));
            assert_eq!(stat.path, d);
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(format!("{d}/b.txt"), "bb").unwrap();
    std::fs::write(format!("{d}/a.txt"), "a").unwrap();
    std::os::unix::fs::symlink("a.txt", format!("{d}/c.link")).unwrap();
    let e = c
        .call(Request::Mkdir {
            path: format!("{d}/a.txt"),
            owner: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::Io);
    match c
        .ok(Request::ListDir {
            path: d.clone(),
            depth: 1,
        })
        .await
        .0
    {
        Reply::Dir { entries } => {
            let got: Vec<_> = entries
                .iter()
                .map(|e| (e.name.as_str(), e.kind, e.size))
                .collect();
            assert_eq!(
                got,
                vec![
                    ("a.txt", FileKind::File, 1),
                    ("b.txt", FileKind::File, 2),
                    ("c.link", FileKind::Symlink, 5)
                ]
            );
            assert_eq!(entries[0].path, format!("{d}/a.txt"));
        }
        other => panic!("{other:?}"),
    }
    c.ok(Request::Rename {
        from: format!("{d}/b.txt"),
        to: format!("{d}/renamed.txt"),
        parents_owner: None,
    })
    .await;
    assert_eq!(
        std::fs::read_to_string(format!("{d}/renamed.txt")).unwrap(),
        "bb"
    );
    // A missing destination directory is reported as the destination, a missing source as
    // the source.
    let to = format!("{d}/no-such-dir/x.txt");
    let e = c
        .call(Request::Rename {
            from: format!("{d}/renamed.txt"),
            to: to.clone(),
            parents_owner: None,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
    assert!(e.message.contains(&to), "{}", e.message);
    let from = format!("{d}/missing.txt");
    let e = c
        .call(Request::Rename {
            from: from.clone(),
            to: format!("{d}/other.txt"),
            parents_owner: None,
        })
        .await
        .unwrap_err();
    assert!(e.message.contains(&from), "{}", e.message);
    let top = agent.path("x");
    let e = c
        .call(Request::Remove {
            path: top.clone(),
            recursive: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotEmpty);
    c.ok(Request::Remove {
        path: format!("{d}/c.link"),
        recursive: false,
    })
    .await;
    assert!(Path::new(&format!("{d}/a.txt")).exists());
    c.ok(Request::Remove {
        path: top.clone(),
        recursive: true,
    })
    .await;
    assert!(!Path::new(&top).exists());
    let e = c
        .call(Request::Stat { path: top.clone() })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
    let e = c
        .call(Request::Remove {
            path: top,
            recursive: false,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
    let e = c
        .call(Request::Stat { path: "rel".into() })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::InvalidArgument);
    let e = c
        .call(Request::ListDir {
            path: agent.path("nope"),
            depth: 1,
        })
        .await
        .unwrap_err();
    assert_eq!(e.code, AgentErrorCode::NotFound);
    assert_eq!(c.ok(Request::Sync).await.0, Reply::Ok);
}

#[tokio::test]
async fn list_a_large_directory() {
    let agent = TestAgent::start();
    let mut c = agent.connect().await;
    let dir = agent.dir.path().join("many");
    std::fs::create_dir(&dir).unwrap();
    for i in 0..3000 {
        std::fs::write(dir.join(format!("some-longish-file-name-{i:05}.txt")), "").unwrap();
    }
    match c
        .ok(Request::ListDir {
            path: agent.path("many"),
            depth: 1,
        })
        .await
        .0
    {
        Reply::Dir { entries } => {
            assert_eq!(entries.len(), 3000);
            assert_eq!(entries[2999].name, "some-longish-file-name-02999.txt");
        }
        other => panic!("{other:?}"),
    }
}
