//! `sbx-agent`: PID 1 inside every sbx sandbox.
//!
//! The agent owns everything that lives inside the sandbox: the process table
//! with bounded output rings, exec, file transfer and the environment. The
//! daemon reaches it over a unix socket (through `sbx-agent relay` run by
//! `runsc exec`) and speaks the framed protocol of `sbx-agent-proto`.
//!
//! Module map:
//! * [`server`]: listening socket, connections, request dispatch.
//! * [`table`]: process table, the zombie reaper, output retention.
//! * [`ring`]: per-process output ring buffer.
//! * [`spawn`]: environment merging, `argv[0]` resolution, spawning.
//! * [`launch`], [`forkexec`]: starting children (posix_spawn, or a
//!   vfork-style clone for a user switch or a terminal); [`pty`] terminals.
//! * [`input`], [`control`]: stdin/terminal input, close and resize.
//! * [`users`]: the guest's `/etc/passwd` and `/etc/group`.
//! * [`watch`]: directory watches (inotify).
//! * [`exec`]: run-to-completion commands.
//! * [`procs`]: background process requests (start, wait, output, stream...).
//! * [`files`]: stat, list, mkdir, remove, rename, download.
//! * [`upload`]: chunked uploads finished by an atomic rename.
//! * [`relay`]: stdio ⇄ socket bridge used by the daemon.
//! * [`guest_procs`]: how many processes the guest runs (may it sleep).
//! * [`proxy`]: the HTTP and SOCKS5 egress proxies carried over `net_serve`.
//! * [`port`]: inbound port streams (`port_open`, preview URLs).
//! * [`dns`]: the DNS responder on 127.0.0.1:53, answered over `net_serve`.

pub mod control;
pub mod dns;
pub mod drain;
pub mod exec;
pub mod files;
pub mod flow;
pub mod forkexec;
pub mod guest_procs;
pub mod input;
pub mod launch;
pub mod listing;
pub mod owner;
pub mod pipes;
pub mod port;
pub mod procs;
pub mod proxy;
pub mod pty;
pub mod relay;
pub mod ring;
pub mod server;
pub mod spawn;
pub mod stdio;
pub mod table;
pub mod upload;
pub mod users;
pub mod watch;
pub mod xattrs;

use std::io::Write;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// Writes one line to the agent's stdout (the sandbox console log).
///
/// Errors are ignored: a closed console must never take the agent down.
pub fn console_line(args: std::fmt::Arguments<'_>) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "sbx-agent: {args}");
    let _ = out.flush();
}

/// `format!`-style logging to the console; never logs environment values.
#[macro_export]
macro_rules! console {
    ($($arg:tt)*) => { $crate::console_line(format_args!($($arg)*)) };
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

/// State shared by every connection.
pub struct Agent {
    /// The process table (and reaper routing).
    pub table: Arc<table::Table>,
    /// Guest defaults plus the configured base environment.
    pub env: spawn::Environment,
    /// Random id chosen at start.
    pub boot_id: Uuid,
    /// Egress proxies (started by the first `net_serve`).
    pub net: Arc<proxy::Net>,
    /// The guest's users and groups.
    pub users: users::UserDb,
}

impl Agent {
    /// A fresh agent whose guest environment is this process's environment.
    pub fn new() -> Arc<Agent> {
        Arc::new(Agent {
            table: Arc::new(table::Table::new()),
            env: spawn::Environment::from_process(),
            boot_id: Uuid::new_v4(),
            net: Arc::default(),
            users: users::UserDb::default(),
        })
    }
}
