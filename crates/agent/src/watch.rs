//! `Watch`: changes under a directory as `fs_change` events, from inotify.
//!
//! The watches are added before the connection reads its next frame (see
//! server.rs), so a change made after any later request was answered is
//! seen. Events are read by one blocking thread per watch, which waits in
//! poll(2) on the inotify fd and on a pipe whose write end the request holds:
//! cancelling the request (or losing the connection) drops that end and the
//! thread ends, closing the inotify instance. A blocking thread and not an
//! epoll registration, for the same reason as pipes.rs.
//!
//! Recursive watches add a watch for every subdirectory at the start and
//! for each directory created (or moved in) later; the entries of a new
//! directory that appeared before its watch was added are reported by
//! listing it once (an entry created in that instant may be reported twice).

use crate::console;
use crate::files::{absolute, io_code};
use crate::server::{Outcome, Sink};
use nix::sys::inotify::{AddWatchFlags, InitFlags, Inotify, InotifyEvent, WatchDescriptor};
use sbx_agent_proto::{AgentError, AgentErrorCode, Event, FsChangeKind, Reply};
use std::collections::HashMap;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use tokio::sync::mpsc;

/// Events buffered between the thread and the connection.
const EVENT_QUEUE: usize = 256;

/// What a directory watch reports.
fn mask() -> AddWatchFlags {
    AddWatchFlags::IN_CREATE
        | AddWatchFlags::IN_MOVED_TO
        | AddWatchFlags::IN_MODIFY
        | AddWatchFlags::IN_DELETE
        | AddWatchFlags::IN_DELETE_SELF
        | AddWatchFlags::IN_MOVED_FROM
        | AddWatchFlags::IN_ATTRIB
}

fn io_error(what: &str, e: nix::Error) -> AgentError {
    let e = std::io::Error::from_raw_os_error(e as i32);
    AgentError::new(io_code(&e), format!("{what}: {e}"))
}

/// One change: the path relative to the watched directory and its kind.
type Change = (String, FsChangeKind);

/// An established watch, not yet streaming.
pub struct Watcher {
    inotify: Inotify,
    root: PathBuf,
    recursive: bool,
    /// Watched directories by descriptor, as paths relative to the root ("" for it).
    dirs: HashMap<WatchDescriptor, String>,
    root_wd: WatchDescriptor,
}

impl Watcher {
    /// Adds the watches (blocking). Missing path → `not_found`, not a
    /// directory → `invalid_argument`, inotify failures → `io` (or the
    /// code of their errno).
    pub fn open(path: &str, recursive: bool) -> Result<Watcher, AgentError> {
        let root = absolute(path)
            .map_err(|e| AgentError::new(AgentErrorCode::InvalidArgument, e.to_string()))?
            .to_path_buf();
        // Follows a symlink: the watched directory may be reached through one.
        let meta = std::fs::metadata(&root)
            .map_err(|e| AgentError::new(io_code(&e), format!("{path}: {e}")))?;
        if !meta.is_dir() {
            return Err(AgentError::new(
                AgentErrorCode::InvalidArgument,
                format!("{path}: not a directory"),
            ));
        }
        let inotify = Inotify::init(InitFlags::IN_CLOEXEC)
            .map_err(|e| AgentError::new(AgentErrorCode::Io, format!("inotify: {e}")))?;
        let root_wd = inotify
            .add_watch(&root, mask() | AddWatchFlags::IN_ONLYDIR)
            .map_err(|e| io_error(path, e))?;
        let mut w = Watcher {
            inotify,
            root,
            recursive,
            dirs: HashMap::from([(root_wd, String::new())]),
            root_wd,
        };
        if recursive {
            w.add_subdirs("", false, &mut Vec::new());
        }
        Ok(w)
    }

    /// Watches the subdirectories of `rel` (recursively); with `report`,
    /// every entry found is added to `out` as created.
    fn add_subdirs(&mut self, rel: &str, report: bool, out: &mut Vec<Change>) {
        let Ok(entries) = std::fs::read_dir(self.root.join(rel)) else {
            return;
        };
        for entry in entries.flatten() {
            let child = join(rel, &entry.file_name().to_string_lossy());
            if report {
                out.push((child.clone(), FsChangeKind::Create));
            }
            // file_type does not follow symlinks: links are never descended.
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                self.add_dir(&child, report, out);
            }
        }
    }

    /// Watches the directory `rel` and everything below it.
    fn add_dir(&mut self, rel: &str, report: bool, out: &mut Vec<Change>) {
        let flags = mask() | AddWatchFlags::IN_ONLYDIR | AddWatchFlags::IN_DONT_FOLLOW;
        match self.inotify.add_watch(&self.root.join(rel), flags) {
            Ok(wd) => {
                self.dirs.insert(wd, rel.to_string());
                self.add_subdirs(rel, report, out);
            }
            // Gone meanwhile, or over the guest's inotify limits: not watched.
            Err(e) => console!("watch {}: cannot watch {rel}: {e}", self.root.display()),
        }
    }

    /// Stops watching `rel` and everything below it (moved away).
    fn remove_dir(&mut self, rel: &str) {
        let prefix = format!("{rel}/");
        let gone: Vec<WatchDescriptor> = self
            .dirs
            .iter()
            .filter(|(_, p)| p.as_str() == rel || p.starts_with(&prefix))
            .map(|(wd, _)| *wd)
            .collect();
        for wd in gone {
            self.dirs.remove(&wd);
            let _ = self.inotify.rm_watch(wd);
        }
    }

    /// Turns one inotify event into changes; `false` once the root is gone.
    fn handle(&mut self, ev: InotifyEvent, out: &mut Vec<Change>) -> bool {
        let m = ev.mask;
        if m.contains(AddWatchFlags::IN_Q_OVERFLOW) {
            console!(
                "watch {}: events lost (queue overflow)",
                self.root.display()
            );
            return true;
        }
        if m.contains(AddWatchFlags::IN_IGNORED) {
            self.dirs.remove(&ev.wd);
            return ev.wd != self.root_wd;
        }
        let Some(dir) = self.dirs.get(&ev.wd).cloned() else {
            return true;
        };
        let Some(name) = ev.name else {
            // About the watched directory itself: only the root's removal is
            // news (a subdirectory's was reported by its parent).
            if m.contains(AddWatchFlags::IN_DELETE_SELF) && ev.wd == self.root_wd {
                out.push((String::new(), FsChangeKind::Remove));
            }
            return true;
        };
        let rel = join(&dir, &name.to_string_lossy());
        let is_dir = m.contains(AddWatchFlags::IN_ISDIR);
        let kind = if m.intersects(AddWatchFlags::IN_CREATE | AddWatchFlags::IN_MOVED_TO) {
            FsChangeKind::Create
        } else if m.contains(AddWatchFlags::IN_MODIFY) {
            FsChangeKind::Write
        } else if m.contains(AddWatchFlags::IN_DELETE) {
            FsChangeKind::Remove
        } else if m.contains(AddWatchFlags::IN_MOVED_FROM) {
            FsChangeKind::Rename
        } else if m.contains(AddWatchFlags::IN_ATTRIB) {
            FsChangeKind::Chmod
        } else {
            return true;
        };
        out.push((rel.clone(), kind));
        if self.recursive && is_dir {
            if m.contains(AddWatchFlags::IN_CREATE) {
                self.add_dir(&rel, true, out);
            } else if m.contains(AddWatchFlags::IN_MOVED_TO) {
                self.add_dir(&rel, false, out);
            } else if m.contains(AddWatchFlags::IN_MOVED_FROM) {
                self.remove_dir(&rel);
            }
        }
        true
    }

    /// Streams changes as `fs_change` events until the request is cancelled
    /// (the task is dropped); ends with `ok` if the directory itself goes.
    pub async fn run(self, sink: &Sink) -> Outcome {
        let (stop_r, stop_w) = crate::launch::pipe()
            .map_err(|e| AgentError::new(AgentErrorCode::Io, format!("pipe: {e}")))?;
        let (tx, mut rx) = mpsc::channel(EVENT_QUEUE);
        tokio::task::spawn_blocking(move || self.event_loop(stop_r, tx));
        // Held until this future ends or is dropped: then the thread stops.
        let _stop = stop_w;
        while let Some(msg) = rx.recv().await {
            let (name, change) = msg?;
            sink.event(Event::FsChange { name, change }, Vec::new())
                .await?;
        }
        Ok((Reply::Ok, Vec::new()))
    }

    fn event_loop(mut self, stop: OwnedFd, tx: mpsc::Sender<Result<Change, AgentError>>) {
        loop {
            let mut fds = [
                libc::pollfd {
                    fd: self.inotify.as_fd().as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
                libc::pollfd {
                    fd: stop.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                },
            ];
            // SAFETY: poll on two valid fds in a local array.
            let rc = unsafe { libc::poll(fds.as_mut_ptr(), 2, -1) };
            if rc < 0 {
                let e = std::io::Error::last_os_error();
                if e.raw_os_error() == Some(libc::EINTR) {
                    continue;
                }
                let _ = tx.blocking_send(Err(AgentError::new(
                    AgentErrorCode::Io,
                    format!("poll: {e}"),
                )));
                return;
            }
            // The request ended (its end of the pipe closed): stop watching.
            if fds[1].revents != 0 {
                return;
            }
            if fds[0].revents == 0 {
                continue;
            }
            let events = match self.inotify.read_events() {
                Ok(evs) => evs,
                Err(nix::Error::EINTR) | Err(nix::Error::EAGAIN) => continue,
                Err(e) => {
                    let _ = tx.blocking_send(Err(io_error("inotify read", e)));
                    return;
                }
            };
            let mut changes = Vec::new();
            let mut alive = true;
            for ev in events {
                alive &= self.handle(ev, &mut changes);
            }
            for change in changes {
                if tx.blocking_send(Ok(change)).is_err() {
                    return;
                }
            }
            if !alive {
                return;
            }
        }
    }
}

/// `dir/name`, or `name` at the root.
fn join(dir: &str, name: &str) -> String {
    if dir.is_empty() {
        name.to_string()
    } else {
        format!("{dir}/{name}")
    }
}
