//! envd's `filesystem.Filesystem` service (contract §3.4): stat, list with
//! depth, make dir, move, remove, and watches (streamed, or buffered under a
//! watcher id for the Python sync client). Paths resolve against the
//! caller's home; what is created belongs to the caller's user.

use super::errors::from_agent;
use super::watchers::Watcher;
use super::{Caller, Envd, EnvdError, Result};
use crate::runtime::{AgentConn, StreamItem};
use crate::service::files::{Download, UploadOptions};
use sbx_agent_proto::file_metadata::FileMetadata;
use sbx_agent_proto::{Event, FileKind, FileStat, FsChangeKind, Reply, Request};
use tokio::sync::mpsc;

/// Most entries one `ListDir` returns (the agent enforces the same bound).
pub const MAX_LIST_ENTRIES: usize = 100_000;
/// Events buffered between the agent and a slow watch client.
const WATCH_BUFFER: usize = 256;

/// One change under a watched directory.
#[derive(Debug, Clone, PartialEq)]
pub struct FsEvent {
    /// Path relative to the watched directory.
    pub name: String,
    /// What happened.
    pub change: FsChangeKind,
    /// The entry after the change, when asked for and it still exists.
    pub entry: Option<FileStat>,
}

/// A watch's events; an `Err` ends it.
pub type FsEvents = mpsc::Receiver<Result<FsEvent>>;

impl Envd {
    /// `Stat`.
    pub async fn stat(&self, caller: &Caller, path: &str) -> Result<FileStat> {
        let path = caller.user.resolve(path)?;
        let conn = self.conn(caller).await?;
        stat(&conn, &path).await
    }

    /// `ListDir`: entries down to `depth` levels (0 counts as 1).
    pub async fn list_dir(&self, caller: &Caller, path: &str, depth: u32) -> Result<Vec<FileStat>> {
        let path = caller.user.resolve(path)?;
        let conn = self.conn(caller).await?;
        let root = stat(&conn, &path).await?;
        if !is_dir(&root) {
            return Err(EnvdError::InvalidArgument(format!(
                "path '{path}' is not a directory"
            )));
        }
        match conn
            .call(Request::ListDir {
                path: path.clone(),
                depth: depth.max(1),
            })
            .await
        {
            Ok((Reply::Dir { entries }, _)) => Ok(entries),
            Ok((other, _)) => Err(unexpected(other)),
            Err(e) => Err(from_agent(e, &format!("listing '{path}'"))),
        }
    }

    /// `MakeDir`: creates it and its parents, owned by the caller's user.
    pub async fn make_dir(&self, caller: &Caller, path: &str) -> Result<FileStat> {
        let path = caller.user.resolve(path)?;
        let conn = self.conn(caller).await?;
        match stat(&conn, &path).await {
            Ok(existing) if is_dir(&existing) => {
                return Err(EnvdError::AlreadyExists(format!(
                    "directory '{path}' already exists"
                )))
            }
            Ok(_) => {
                return Err(EnvdError::InvalidArgument(format!(
                    "path '{path}' already exists and is not a directory"
                )))
            }
            Err(EnvdError::NotFound(_)) => {}
            Err(e) => return Err(e),
        }
        conn.call(Request::Mkdir {
            path: path.clone(),
            owner: Some(caller.user.name().to_string()),
        })
        .await
        .map_err(|e| from_agent(e, &format!("creating '{path}'")))?;
        stat(&conn, &path).await
    }

    /// `Move`: renames, creating the destination's parents.
    pub async fn rename(&self, caller: &Caller, from: &str, to: &str) -> Result<FileStat> {
        let from = caller.user.resolve(from)?;
        let to = caller.user.resolve(to)?;
        let conn = self.conn(caller).await?;
        conn.call(Request::Rename {
            from: from.clone(),
            to: to.clone(),
            parents_owner: Some(caller.user.name().to_string()),
        })
        .await
        .map_err(|e| from_agent(e, &format!("moving '{from}'")))?;
        stat(&conn, &to).await
    }

    /// `Remove`: `rm -rf`; a missing path is not an error.
    pub async fn remove(&self, caller: &Caller, path: &str) -> Result<()> {
        let path = caller.user.resolve(path)?;
        if path == "/" {
            return Err(EnvdError::InvalidArgument("refusing to remove '/'".into()));
        }
        let conn = self.conn(caller).await?;
        match conn
            .call(Request::Remove {
                path: path.clone(),
                recursive: true,
            })
            .await
        {
            Ok(_) => Ok(()),
            Err(e) => match from_agent(e, &format!("removing '{path}'")) {
                EnvdError::NotFound(_) => Ok(()),
                other => Err(other),
            },
        }
    }

    /// `WatchDir`: changes under a directory until the receiver is dropped.
    pub async fn watch(
        &self,
        caller: &Caller,
        path: &str,
        recursive: bool,
        include_entry: bool,
    ) -> Result<FsEvents> {
        let path = caller.user.resolve(path)?;
        let conn = self.conn(caller).await?;
        let root = stat(&conn, &path).await?;
        if !is_dir(&root) {
            return Err(EnvdError::InvalidArgument(format!(
                "path '{path}' is not a directory"
            )));
        }
        let mut stream = conn
            .stream(Request::Watch {
                path: path.clone(),
                recursive,
            })
            .await
            .map_err(|e| from_agent(e, &format!("watching '{path}'")))?;
        // The agent places its inotify watches before it reads the next
        // frame: once this ping is answered, no change made after the
        // caller sees `start` can be missed.
        conn.call(Request::Ping)
            .await
            .map_err(|e| from_agent(e, "watching"))?;
        let (tx, rx) = mpsc::channel(WATCH_BUFFER);
        tokio::spawn(async move {
            loop {
                let event = match stream.next().await {
                    Some(StreamItem::Event(Event::FsChange { name, change }, _)) => {
                        let entry = if include_entry && change != FsChangeKind::Remove {
                            stat(&conn, &format!("{}/{name}", path.trim_end_matches('/')))
                                .await
                                .ok()
                        } else {
                            None
                        };
                        Ok(FsEvent {
                            name,
                            change,
                            entry,
                        })
                    }
                    Some(StreamItem::Event(..)) => continue,
                    Some(StreamItem::End(..)) => Err(EnvdError::Unavailable(
                        "the watch ended in the sandbox".into(),
                    )),
                    Some(StreamItem::Failed(e)) => Err(from_agent(
                        crate::runtime::AgentCallError::Agent(e),
                        "watching",
                    )),
                    None => Err(EnvdError::Unavailable(
                        "the sandbox's agent connection closed".into(),
                    )),
                };
                let last = event.is_err();
                // A dropped receiver (the client left) ends the task, which
                // drops the stream and so cancels the watch in the agent.
                if tx.send(event).await.is_err() || last {
                    return;
                }
            }
        });
        Ok(rx)
    }

    /// `CreateWatcher`: a watch whose events wait under an id for
    /// [`Envd::watcher_events`].
    pub async fn create_watcher(
        &self,
        caller: &Caller,
        path: &str,
        recursive: bool,
        include_entry: bool,
    ) -> Result<String> {
        let events = self.watch(caller, path, recursive, include_entry).await?;
        self.watchers.add(caller.sandbox, Watcher::start(events))
    }

    /// `GetWatcherEvents`: the events since the last call.
    pub fn watcher_events(&self, caller: &Caller, id: &str) -> Result<Vec<FsEvent>> {
        self.watchers.drain(caller.sandbox, id)
    }

    /// `RemoveWatcher`.
    pub fn remove_watcher(&self, caller: &Caller, id: &str) -> Result<()> {
        self.watchers.remove(caller.sandbox, id)
    }
}

fn is_dir(stat: &FileStat) -> bool {
    stat.kind == FileKind::Dir || stat.target_kind == Some(FileKind::Dir)
}

fn unexpected(reply: Reply) -> EnvdError {
    EnvdError::Internal(format!("unexpected agent reply {reply:?}"))
}

async fn stat(conn: &AgentConn, path: &str) -> Result<FileStat> {
    match conn.call(Request::Stat { path: path.into() }).await {
        Ok((Reply::Stat { stat }, _)) => Ok(stat),
        Ok((other, _)) => Err(unexpected(other)),
        Err(e) => match from_agent(e, "stat") {
            EnvdError::NotFound(_) => {
                Err(EnvdError::NotFound(format!("path '{path}' does not exist")))
            }
            other => Err(other),
        },
    }
}

impl Envd {
    /// `GET /files`: opens a download of the file at `path` (as resolved for the caller).
    pub async fn download(&self, caller: &Caller, path: &str) -> Result<Download> {
        let path = caller.user.resolve(path)?;
        self.svc()
            .download(&caller.workspace, caller.sandbox, &path)
            .await
            .map_err(EnvdError::from)
    }

    /// `POST /files`: writes one file with its metadata, created (with its
    /// parents) as the caller's user; answers the resolved path.
    pub async fn upload<S, E>(
        &self,
        caller: &Caller,
        path: &str,
        metadata: &FileMetadata,
        body: S,
    ) -> Result<String>
    where
        S: futures::Stream<Item = std::result::Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let path = caller.user.resolve(path)?;
        let options = UploadOptions {
            mode: None,
            owner: Some(caller.user.name()),
            metadata: Some(metadata),
        };
        self.svc()
            .upload_as(&caller.workspace, caller.sandbox, &path, options, body)
            .await
            .map_err(EnvdError::from)?;
        Ok(path)
    }

    /// Largest file a `/files` upload may write (the sandbox's file limit).
    pub fn file_limit(&self) -> u64 {
        self.svc().config().limits.file_bytes
    }
}
