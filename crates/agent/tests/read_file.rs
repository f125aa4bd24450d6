//! `sbx-agent read-file`: the direct download path prints a header line,
//! then exactly the file's bytes; refusals print a `failed` header and nothing else.

mod common;

use sbx_agent_proto::{AgentErrorCode, DirectDownloadHeader, FileKind};
use std::process::Command;

/// Runs `read-file` and splits its stdout into the header and the bytes after it.
fn read_file(path: &str, max: u64) -> (DirectDownloadHeader, Vec<u8>) {
    let out = Command::new(common::agent_bin())
        .args(["read-file", path, &max.to_string()])
        .output()
        .expect("spawn");
    assert!(out.status.success(), "exit {:?}", out.status);
    let newline = out
        .stdout
        .iter()
        .position(|b| *b == b'\n')
        .expect("a header line");
    let header = serde_json::from_slice(&out.stdout[..newline]).expect("JSON header");
    (header, out.stdout[newline + 1..].to_vec())
}

fn failure_code(header: DirectDownloadHeader) -> AgentErrorCode {
    match header {
        DirectDownloadHeader::Failed(e) => e.code,
        other => panic!("expected a failure, got {other:?}"),
    }
}

#[test]
fn a_file_is_sent_whole_after_its_stat() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("data.bin");
    // Over one copy buffer (1 MiB), not a multiple of it.
    let data: Vec<u8> = (0..3_000_001u32).map(|i| (i % 253) as u8).collect();
    std::fs::write(&path, &data).unwrap();
    let (header, bytes) = read_file(path.to_str().unwrap(), 10_000_000);
    match header {
        DirectDownloadHeader::Ready { stat } => {
            assert_eq!(stat.size, data.len() as u64);
            assert_eq!(stat.kind, FileKind::File);
            assert_eq!(stat.name, "data.bin");
        }
        other => panic!("expected ready, got {other:?}"),
    }
    assert_eq!(bytes, data);
}

#[test]
fn refusals_send_no_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let big = dir.path().join("big.bin");
    std::fs::write(&big, vec![1u8; 4096]).unwrap();

    let (header, bytes) = read_file(big.to_str().unwrap(), 4095);
    assert_eq!(failure_code(header), AgentErrorCode::TooLarge);
    assert!(bytes.is_empty());

    let missing = dir.path().join("missing");
    let (header, bytes) = read_file(missing.to_str().unwrap(), 4096);
    assert_eq!(failure_code(header), AgentErrorCode::NotFound);
    assert!(bytes.is_empty());

    let (header, bytes) = read_file(dir.path().to_str().unwrap(), 4096);
    assert_eq!(failure_code(header), AgentErrorCode::NotRegularFile);
    assert!(bytes.is_empty());

    let (header, _) = read_file("relative/path", 4096);
    assert_eq!(failure_code(header), AgentErrorCode::InvalidArgument);
}

#[test]
fn bad_arguments_are_a_usage_error() {
    let out = Command::new(common::agent_bin())
        .args(["read-file", "/etc/hostname", "lots"])
        .output()
        .expect("spawn");
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
}
