//! envd's messages in proto3 canonical JSON (contract §3.2–3.3): lowerCamelCase
//! names (proto names accepted too), bytes as base64, enums by name, oneofs as
//! sibling keys, defaults omitted.

use crate::service::envd::fs::FsEvent;
use crate::service::envd::process::{InputKind, Output, ProcessEnd, ProcessEvent, Selector};
use base64::Engine;
use chrono::{DateTime, SecondsFormat, Utc};
use sbx_agent_proto::file_metadata::FileMetadata;
use sbx_agent_proto::{FileKind, FileStat, FsChangeKind, ProcessInfo, PtySize};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// A JSON field that is wrong for its message.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct WireError(pub String);

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn unb64(text: &str) -> Result<Vec<u8>, WireError> {
    base64::engine::general_purpose::STANDARD
        .decode(text)
        .or_else(|_| base64::engine::general_purpose::URL_SAFE.decode(text))
        .or_else(|_| base64::engine::general_purpose::STANDARD_NO_PAD.decode(text))
        .map_err(|e| WireError(format!("invalid base64 bytes: {e}")))
}

/// proto3 JSON allows 32-bit integers as numbers or strings.
fn u32_any<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u32>, D::Error> {
    let v = Option::<Value>::deserialize(d)?;
    match v {
        None | Some(Value::Null) => Ok(None),
        Some(Value::Number(n)) => n
            .as_u64()
            .and_then(|n| u32::try_from(n).ok())
            .map(Some)
            .ok_or_else(|| serde::de::Error::custom("expected a uint32")),
        Some(Value::String(s)) => s
            .parse()
            .map(Some)
            .map_err(|_| serde::de::Error::custom("expected a uint32")),
        Some(_) => Err(serde::de::Error::custom("expected a uint32")),
    }
}

/// `process.ProcessConfig`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProcessConfig {
    /// Executable.
    pub cmd: String,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment.
    pub envs: BTreeMap<String, String>,
    /// Working directory.
    pub cwd: Option<String>,
}

/// `process.PTY`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct Pty {
    /// Its size.
    pub size: Option<PtySizeMsg>,
}

/// `process.PTY.Size`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PtySizeMsg {
    /// Columns.
    #[serde(deserialize_with = "u32_any")]
    pub cols: Option<u32>,
    /// Rows.
    #[serde(deserialize_with = "u32_any")]
    pub rows: Option<u32>,
}

impl PtySizeMsg {
    /// The size, refused when zero or beyond a terminal's range.
    pub fn size(&self) -> Result<PtySize, WireError> {
        let (cols, rows) = (self.cols.unwrap_or(0), self.rows.unwrap_or(0));
        let ok = |n: u32| (1..=u16::MAX as u32).contains(&n);
        if !ok(cols) || !ok(rows) {
            return Err(WireError(format!(
                "pty size {cols}x{rows} is out of range (1..=65535 each)"
            )));
        }
        Ok(PtySize {
            cols: cols as u16,
            rows: rows as u16,
        })
    }
}

/// `process.StartRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StartRequest {
    /// What to run.
    pub process: Option<ProcessConfig>,
    /// Terminal, if any.
    pub pty: Option<Pty>,
    /// Caller's label.
    pub tag: Option<String>,
    /// Absent: a stdin pipe (the old default); false: `/dev/null`.
    pub stdin: Option<bool>,
}

/// `process.ProcessSelector`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SelectorMsg {
    /// Guest pid.
    #[serde(deserialize_with = "u32_any")]
    pub pid: Option<u32>,
    /// Tag.
    pub tag: Option<String>,
}

/// A selector from an optional message field.
pub fn selector(msg: Option<&SelectorMsg>) -> Result<Selector, WireError> {
    match msg {
        Some(SelectorMsg { pid: Some(pid), .. }) => Ok(Selector::Pid(*pid)),
        Some(SelectorMsg { tag: Some(tag), .. }) => Ok(Selector::Tag(tag.clone())),
        _ => Err(WireError(
            "process selector (pid or tag) is required".into(),
        )),
    }
}

/// Requests that only name a process (`Connect`, `CloseStdin`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ProcessOnly {
    /// The process.
    pub process: Option<SelectorMsg>,
}

/// `process.ProcessInput`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct InputMsg {
    /// Bytes for stdin.
    pub stdin: Option<String>,
    /// Bytes for the terminal.
    pub pty: Option<String>,
}

impl InputMsg {
    /// Where the bytes go, and the bytes.
    pub fn decode(&self) -> Result<(InputKind, Vec<u8>), WireError> {
        match (&self.stdin, &self.pty) {
            (Some(s), None) => Ok((InputKind::Stdin, unb64(s)?)),
            (None, Some(p)) => Ok((InputKind::Pty, unb64(p)?)),
            (None, None) => Ok((InputKind::Stdin, Vec::new())),
            (Some(_), Some(_)) => Err(WireError("input has both stdin and pty".into())),
        }
    }
}

/// `process.SendInputRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SendInputRequest {
    /// The process.
    pub process: Option<SelectorMsg>,
    /// The input.
    pub input: Option<InputMsg>,
}

/// `process.StreamInputRequest` (one message of the client stream).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamInputRequest {
    /// First message: which process.
    pub start: Option<ProcessOnly>,
    /// Later messages: input.
    pub data: Option<StreamInputData>,
    /// Keeps proxies from idling the stream out; ignored.
    pub keepalive: Option<Value>,
}

/// `process.StreamInputRequest.DataEvent`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct StreamInputData {
    /// The input.
    pub input: Option<InputMsg>,
}

/// `process.SendSignalRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct SendSignalRequest {
    /// The process.
    pub process: Option<SelectorMsg>,
    /// `SIGNAL_SIGKILL`, `SIGNAL_SIGTERM` or their numbers.
    pub signal: Option<Value>,
}

impl SendSignalRequest {
    /// The signal number (only SIGKILL and SIGTERM exist in the enum).
    pub fn signal(&self) -> Result<i32, WireError> {
        match &self.signal {
            Some(Value::String(s)) if s == "SIGNAL_SIGKILL" => Ok(9),
            Some(Value::String(s)) if s == "SIGNAL_SIGTERM" => Ok(15),
            Some(Value::Number(n)) if n.as_i64() == Some(9) || n.as_i64() == Some(15) => {
                Ok(n.as_i64().unwrap_or(9) as i32)
            }
            other => Err(WireError(format!(
                "signal must be SIGNAL_SIGKILL or SIGNAL_SIGTERM, not {}",
                other.clone().unwrap_or(Value::Null)
            ))),
        }
    }
}

/// `process.UpdateRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct UpdateRequest {
    /// The process.
    pub process: Option<SelectorMsg>,
    /// The new terminal size.
    pub pty: Option<Pty>,
}

/// `{"event": {...}}` of a `StartResponse` / `ConnectResponse`.
pub fn process_event(event: &ProcessEvent) -> Value {
    let inner = match event {
        ProcessEvent::Start { pid } => json!({"start": {"pid": pid}}),
        ProcessEvent::Data(kind, bytes) => {
            let key = match kind {
                Output::Stdout => "stdout",
                Output::Stderr => "stderr",
                Output::Pty => "pty",
            };
            json!({"data": {key: b64(bytes)}})
        }
        ProcessEvent::End(end) => json!({"end": end_json(end)}),
    };
    json!({"event": inner})
}

fn end_json(end: &ProcessEnd) -> Value {
    let mut m = Map::new();
    m.insert("exitCode".into(), json!(end.exit_code));
    m.insert("exited".into(), json!(end.exited));
    m.insert("status".into(), json!(end.status));
    if let Some(e) = &end.error {
        m.insert("error".into(), json!(e));
    }
    Value::Object(m)
}

/// The keepalive event of a process stream.
pub fn process_keepalive() -> Value {
    json!({"event": {"keepalive": {}}})
}

/// `process.ProcessInfo` (`config` always present: the JS SDK reads `config.args`).
pub fn process_info(p: &ProcessInfo) -> Value {
    let (cmd, args) = p
        .argv
        .split_first()
        .map(|(c, a)| (c.clone(), a.to_vec()))
        .unwrap_or_default();
    let mut config = json!({"cmd": cmd, "args": args, "envs": p.env});
    if let Some(cwd) = &p.cwd {
        config["cwd"] = json!(cwd);
    }
    let mut info = json!({"config": config, "pid": p.pid.unwrap_or(0).max(0)});
    if let Some(tag) = &p.tag {
        info["tag"] = json!(tag);
    }
    info
}

/// Requests that carry one path (`Stat`, `MakeDir`, `Remove`).
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct PathRequest {
    /// The path.
    pub path: String,
}

/// `filesystem.ListDirRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct ListDirRequest {
    /// The directory.
    pub path: String,
    /// Levels.
    #[serde(deserialize_with = "u32_any")]
    pub depth: Option<u32>,
}

/// `filesystem.MoveRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct MoveRequest {
    /// Existing path.
    pub source: String,
    /// New path.
    pub destination: String,
}

/// `filesystem.WatchDirRequest` and `CreateWatcherRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WatchRequest {
    /// The directory.
    pub path: String,
    /// Watch subdirectories too.
    pub recursive: bool,
    /// Send each event's entry.
    #[serde(rename = "includeEntry", alias = "include_entry")]
    pub include_entry: bool,
    /// Network mounts: there are none in an sbx sandbox; accepted and ignored.
    #[serde(rename = "allowNetworkMounts", alias = "allow_network_mounts")]
    pub allow_network_mounts: bool,
}

/// `GetWatcherEventsRequest` and `RemoveWatcherRequest`.
#[derive(Debug, Default, Deserialize)]
#[serde(default)]
pub struct WatcherRequest {
    /// The watcher.
    #[serde(rename = "watcherId", alias = "watcher_id")]
    pub watcher_id: String,
}

fn file_type(kind: FileKind) -> &'static str {
    match kind {
        FileKind::File => "FILE_TYPE_FILE",
        FileKind::Dir => "FILE_TYPE_DIRECTORY",
        FileKind::Symlink => "FILE_TYPE_SYMLINK",
        FileKind::Other => "FILE_TYPE_UNSPECIFIED",
    }
}

/// Go's `FileMode.String()` for the kinds and bits a guest file has.
pub fn permissions(kind: FileKind, mode: u32) -> String {
    let mut s = String::new();
    match kind {
        FileKind::Dir => s.push('d'),
        FileKind::Symlink => s.push('L'),
        _ => {}
    }
    if mode & 0o4000 != 0 {
        s.push('u');
    }
    if mode & 0o2000 != 0 {
        s.push('g');
    }
    if mode & 0o1000 != 0 {
        s.push('t');
    }
    if s.is_empty() {
        s.push('-');
    }
    for (i, c) in "rwxrwxrwx".chars().enumerate() {
        s.push(if mode & (1 << (8 - i)) != 0 { c } else { '-' });
    }
    s
}

/// `filesystem.EntryInfo`. A symlink reports its target's type, the target
/// and `isSymlink` (what upstream envd sends now).
pub fn entry(stat: &FileStat) -> Value {
    let kind = match (stat.kind, stat.target_kind) {
        (FileKind::Symlink, Some(target)) => target,
        (kind, _) => kind,
    };
    let modified = DateTime::<Utc>::from_timestamp_millis(stat.mtime_ms as i64)
        .unwrap_or_default()
        .to_rfc3339_opts(SecondsFormat::Millis, true);
    let mut e = json!({
        "name": stat.name,
        "type": file_type(kind),
        "path": stat.path,
        "size": stat.size,
        "mode": stat.mode,
        "permissions": permissions(stat.kind, stat.mode),
        "owner": stat.owner.clone().unwrap_or_else(|| stat.uid.to_string()),
        "group": stat.group.clone().unwrap_or_else(|| stat.gid.to_string()),
        "modifiedTime": modified,
    });
    // Proto JSON leaves an empty map out.
    if !stat.metadata.is_empty() {
        e["metadata"] = json!(stat.metadata);
    }
    if stat.kind == FileKind::Symlink {
        e["isSymlink"] = json!(true);
        if let Some(t) = &stat.symlink_target {
            e["symlinkTarget"] = json!(t);
        }
    }
    e
}

fn event_type(change: FsChangeKind) -> &'static str {
    match change {
        FsChangeKind::Create => "EVENT_TYPE_CREATE",
        FsChangeKind::Write => "EVENT_TYPE_WRITE",
        FsChangeKind::Remove => "EVENT_TYPE_REMOVE",
        FsChangeKind::Rename => "EVENT_TYPE_RENAME",
        FsChangeKind::Chmod => "EVENT_TYPE_CHMOD",
    }
}

/// `filesystem.FilesystemEvent`.
pub fn fs_event(e: &FsEvent) -> Value {
    let mut v = json!({"name": e.name, "type": event_type(e.change)});
    if let Some(stat) = &e.entry {
        v["entry"] = entry(stat);
    }
    v
}

/// The entries of an upload's answer (`/files` POST).
#[derive(Debug, Serialize)]
pub struct WrittenEntry {
    /// File name.
    pub name: String,
    /// Always `file`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// Absolute path.
    pub path: String,
    /// The metadata the upload stored on the file (left out when none).
    #[serde(skip_serializing_if = "FileMetadata::is_empty")]
    pub metadata: FileMetadata,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn permissions_read_like_go() {
        assert_eq!(permissions(FileKind::File, 0o644), "-rw-r--r--");
        assert_eq!(permissions(FileKind::Dir, 0o755), "drwxr-xr-x");
        assert_eq!(permissions(FileKind::Symlink, 0o777), "Lrwxrwxrwx");
        assert_eq!(permissions(FileKind::Dir, 0o1777), "dtrwxrwxrwx");
    }

    #[test]
    fn requests_parse_camel_and_proto_names_and_string_numbers() {
        let w: WatchRequest =
            serde_json::from_str(r#"{"path":"/a","recursive":true,"include_entry":true}"#).unwrap();
        assert!(w.recursive && w.include_entry);
        let w: WatchRequest = serde_json::from_str(r#"{"path":"/a","includeEntry":true}"#).unwrap();
        assert!(!w.recursive && w.include_entry);
        let w: WatcherRequest = serde_json::from_str(r#"{"watcherId":"w1"}"#).unwrap();
        assert_eq!(w.watcher_id, "w1");
        let w: WatcherRequest = serde_json::from_str(r#"{"watcher_id":"w2"}"#).unwrap();
        assert_eq!(w.watcher_id, "w2");
        let s: SendInputRequest =
            serde_json::from_str(r#"{"process":{"pid":"12"},"input":{"stdin":"aGk="}}"#).unwrap();
        assert_eq!(selector(s.process.as_ref()).unwrap(), Selector::Pid(12));
        assert_eq!(
            s.input.unwrap().decode().unwrap(),
            (InputKind::Stdin, b"hi".to_vec())
        );
        let sig: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":1},"signal":"SIGNAL_SIGKILL"}"#).unwrap();
        assert_eq!(sig.signal().unwrap(), 9);
        let bad: SendSignalRequest =
            serde_json::from_str(r#"{"process":{"pid":1},"signal":"SIGNAL_SIGSTOP"}"#).unwrap();
        assert!(bad.signal().is_err());
        assert!(selector(None).is_err());
    }

    #[test]
    fn events_have_the_sdk_shapes() {
        let e = process_event(&ProcessEvent::Data(Output::Stdout, b"hello\n".to_vec()));
        assert_eq!(e, json!({"event": {"data": {"stdout": "aGVsbG8K"}}}));
        let end = process_event(&ProcessEvent::End(ProcessEnd {
            exit_code: 3,
            exited: true,
            status: "exit status 3".into(),
            error: Some("exit status 3".into()),
        }));
        assert_eq!(end["event"]["end"]["exitCode"], 3);
        assert_eq!(end["event"]["end"]["error"], "exit status 3");
    }
}
