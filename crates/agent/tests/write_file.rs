//! `sbx-agent write-file`: the direct upload path commits only a stream
//! closed by the matching trailer, and never leaves a temp file behind.

mod common;

use sbx_agent_proto::{direct_upload_trailer, AgentErrorCode, DirectUploadResult};
use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

fn write_file(dest: &Path, max: u64, input: &[u8]) -> DirectUploadResult {
    write_file_as(dest, max, input, None)
}

fn write_file_as(dest: &Path, max: u64, input: &[u8], owner: Option<&str>) -> DirectUploadResult {
    let mut child = Command::new(common::agent_bin())
        .args([
            "write-file",
            dest.to_str().unwrap(),
            "640",
            &max.to_string(),
        ])
        .args(owner)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn");
    // A refused upload may stop reading early: a broken pipe is fine here.
    let _ = child.stdin.take().unwrap().write_all(input);
    let out = child.wait_with_output().expect("wait");
    assert!(out.status.success(), "exit {:?}", out.status);
    serde_json::from_slice(&out.stdout).expect("one JSON answer")
}

fn leftovers(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".sbx-upload-"))
        .collect()
}

#[test]
fn a_stream_with_its_trailer_is_committed() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("sub/file.bin");
    let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
    let mut input = data.clone();
    input.extend_from_slice(&direct_upload_trailer(data.len() as u64));
    assert_eq!(
        write_file(&dest, 10_000_000, &input),
        DirectUploadResult::Written {
            bytes_written: data.len() as u64
        }
    );
    assert_eq!(std::fs::read(&dest).unwrap(), data);
    use std::os::unix::fs::PermissionsExt;
    assert_eq!(
        std::fs::metadata(&dest).unwrap().permissions().mode() & 0o777,
        0o640
    );
    assert!(leftovers(dest.parent().unwrap()).is_empty());
}

#[test]
fn a_stream_without_its_trailer_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("keep.txt");
    std::fs::write(&dest, b"old").unwrap();
    // Cut short, a wrong count, and no trailer at all.
    let mut wrong = b"new bytes".to_vec();
    wrong.extend_from_slice(&direct_upload_trailer(3));
    for input in [&b"new bytes"[..], &wrong[..], &[][..]] {
        match write_file(&dest, 1000, input) {
            DirectUploadResult::Failed(e) => assert_eq!(e.code, AgentErrorCode::Io, "{e:?}"),
            other => panic!("committed {other:?}"),
        }
        assert_eq!(std::fs::read(&dest).unwrap(), b"old");
        assert!(leftovers(dir.path()).is_empty());
    }
}

#[test]
fn over_the_limit_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("big.bin");
    let data = vec![7u8; 5000];
    let mut input = data.clone();
    input.extend_from_slice(&direct_upload_trailer(5000));
    match write_file(&dest, 4096, &input) {
        DirectUploadResult::Failed(e) => assert_eq!(e.code, AgentErrorCode::TooLarge),
        other => panic!("committed {other:?}"),
    }
    assert!(!dest.exists());
    assert!(leftovers(dir.path()).is_empty());
}

#[test]
fn an_owner_gets_the_file_and_the_new_parents() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("new/sub/file.txt");
    let mut input = b"owned".to_vec();
    input.extend_from_slice(&direct_upload_trailer(5));
    assert_eq!(
        write_file_as(&dest, 100, &input, Some("nobody")),
        DirectUploadResult::Written { bytes_written: 5 }
    );
    let nobody = sbx_agent::users::UserDb::default().user("nobody").unwrap();
    for p in [
        dest.as_path(),
        &dir.path().join("new/sub"),
        &dir.path().join("new"),
    ] {
        let m = std::fs::metadata(p).unwrap();
        assert_eq!((m.uid(), m.gid()), (nobody.uid, nobody.gid), "{p:?}");
    }
    assert_eq!(std::fs::metadata(dir.path()).unwrap().uid(), 0);
    match write_file_as(&dir.path().join("x"), 100, &input, Some("no-such-user-xyz")) {
        DirectUploadResult::Failed(e) => {
            assert_eq!(e.code, AgentErrorCode::InvalidArgument, "{e:?}")
        }
        other => panic!("committed {other:?}"),
    }
    assert!(!dir.path().join("x").exists());
}
