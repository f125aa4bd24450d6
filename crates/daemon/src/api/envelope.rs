//! Success envelopes and resource conversion (§2, §3 of the contract).

use axum::http::{HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use sbx_agent_proto::{
    ChunkMeta, FileKind as AgentFileKind, FileStat, ProcessInfo, ProcessState as AgentState,
    StreamKind,
};
use sbx_api_types::{
    format_time, format_unix_ms, Envelope, FileInfo, FileKind, Metadata, OutputChunk, OutputStream,
    Page, Process, ProcessState, Resources, Sandbox,
};
use serde::Serialize;

/// Padded standard base64.
pub fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn metadata() -> Metadata {
    Metadata {
        fetched_at: format_time(chrono::Utc::now()),
    }
}

/// `{data, metadata}` with a status.
pub fn data<T: Serialize>(status: StatusCode, value: T) -> Response {
    json_response(
        status,
        &Envelope {
            data: Some(value),
            metadata: metadata(),
            page: None,
        },
    )
}

/// A list envelope with its page.
pub fn list<T: Serialize>(items: Vec<T>, limit: u32, cursor: Option<String>) -> Response {
    json_response(
        StatusCode::OK,
        &Envelope {
            data: Some(items),
            metadata: metadata(),
            page: Some(Page {
                has_more: cursor.is_some(),
                cursor,
                limit,
            }),
        },
    )
}

fn json_response<T: Serialize>(status: StatusCode, body: &T) -> Response {
    let bytes = serde_json::to_vec(body).unwrap_or_default();
    let mut resp = (status, bytes).into_response();
    resp.headers_mut()
        .insert("content-type", HeaderValue::from_static("application/json"));
    resp
}

/// The wire view of a sandbox.
pub fn sandbox(r: &crate::service::Sandbox, vpc_id: uuid::Uuid) -> Sandbox {
    Sandbox {
        id: r.id,
        name: r.name.clone(),
        status: r.status,
        vpc_id,
        image_ref: r.image_ref.clone(),
        resources: Resources {
            vcpu: r.vcpu,
            memory_mb: r.memory_mb,
        },
        created_at: format_time(r.created_at),
        started_at: r.started_at.map(format_time),
        ended_at: r.ended_at.map(format_time),
        error: r.error.clone(),
    }
}

/// The wire view of an agent process.
pub fn process(p: &ProcessInfo) -> Process {
    let state = match p.state {
        AgentState::Starting => ProcessState::Starting,
        AgentState::Running => ProcessState::Running,
        AgentState::Exited => ProcessState::Exited,
        AgentState::Killed => ProcessState::Killed,
        AgentState::Failed => ProcessState::Failed,
        AgentState::Lost => ProcessState::Lost,
    };
    Process {
        id: p.id,
        command: p.argv.clone(),
        pid: p.pid.filter(|pid| *pid > 0),
        state,
        exit_code: if state == ProcessState::Exited {
            Some(p.exit_code.unwrap_or(0))
        } else {
            None
        },
        termination_signal: if state == ProcessState::Killed {
            Some(p.signal.unwrap_or(9).clamp(1, 64))
        } else {
            None
        },
        started_at: p.started_at_ms.map(format_unix_ms),
        ended_at: p.ended_at_ms.map(format_unix_ms),
    }
}

/// The wire view of an output chunk.
pub fn chunk(meta: &ChunkMeta, bytes: &[u8]) -> OutputChunk {
    OutputChunk {
        stream: match meta.stream {
            // A terminal merges both streams; /v1 reports it as stdout.
            StreamKind::Stdout | StreamKind::Pty => OutputStream::Stdout,
            StreamKind::Stderr => OutputStream::Stderr,
        },
        data: b64(bytes),
        encoding: "base64".into(),
        at: Some(format_unix_ms(meta.at_ms)),
        offset: Some(meta.offset),
    }
}

/// The wire view of file metadata.
pub fn file_info(s: &FileStat) -> FileInfo {
    FileInfo {
        path: s.path.clone(),
        name: s.name.clone(),
        kind: match s.kind {
            AgentFileKind::File => FileKind::File,
            AgentFileKind::Dir => FileKind::Dir,
            AgentFileKind::Symlink => FileKind::Symlink,
            AgentFileKind::Other => FileKind::Other,
        },
        size: s.size,
        mode: format!("{:04o}", s.mode & 0o7777),
        modified_at: format_unix_ms(s.mtime_ms),
    }
}
