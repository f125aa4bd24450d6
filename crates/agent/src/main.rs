//! `sbx-agent`: `init` (PID 1), `serve --socket PATH` (tests) and `relay`.
//! `init` and `serve` also serve their stdin/stdout when stdin is a socket
//! (sbxd's end of a socket pair; see `stdio.rs`).

use sbx_agent::server::ListenAddr;
use sbx_agent::{console, server, Agent};
use sbx_agent_proto::AGENT_SOCKET_NAME;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

const USAGE: &str = "usage: sbx-agent init [--task-limit N] | serve --socket PATH | relay [--socket PATH] | write-file PATH MODE MAX_BYTES [OWNER] [--meta KEY=VALUE]... | read-file PATH MAX_BYTES | version";

#[derive(PartialEq)]
enum Mode {
    Init,
    Serve,
}

/// `init`'s optional `--task-limit N` (the guest processes' RLIMIT_NPROC).
fn task_limit_arg(args: &[String]) -> Result<Option<u64>, String> {
    match args {
        [] => Ok(None),
        [flag, n] if flag == "--task-limit" => n
            .parse::<u64>()
            .ok()
            .filter(|n| *n > 0)
            .map(Some)
            .ok_or_else(|| format!("--task-limit needs a positive number, not {n:?}")),
        _ => Err(USAGE.to_string()),
    }
}

fn socket_arg(args: &[String]) -> Result<Option<PathBuf>, String> {
    match args {
        [] => Ok(None),
        [flag, path] if flag == "--socket" => Ok(Some(PathBuf::from(path))),
        [flag] if flag.starts_with("--socket=") => {
            Ok(Some(PathBuf::from(&flag["--socket=".len()..])))
        }
        _ => Err(USAGE.to_string()),
    }
}

/// Makes this process non-dumpable: a guest without CAP_SYS_PTRACE (none
/// has it) can then neither ptrace it nor read or write its memory through
/// `/proc/PID/mem`. PID 1 and every process sbxd starts (`relay`,
/// `read-file`, `write-file`) call it first: otherwise the guest could take
/// over the relay and speak for the agent, or change a file in flight.
fn not_dumpable() -> std::io::Result<()> {
    // SAFETY: plain prctl with integer arguments.
    if unsafe { libc::prctl(libc::PR_SET_DUMPABLE, 0, 0, 0, 0) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

/// [`not_dumpable`] for the processes sbxd starts; their stdout carries
/// the protocol or a file, so a failure is told on stderr.
fn not_dumpable_helper() {
    if let Err(e) = not_dumpable() {
        eprintln!("sbx-agent: cannot make this process non-dumpable: {e}");
    }
}

/// `write-file PATH MODE MAX_BYTES [OWNER] [--meta KEY=VALUE]...` (MODE in
/// octal): the direct upload path; OWNER (a guest user) owns the file and the
/// parents created; each `--meta` becomes a `user.e2b.KEY` xattr of the file.
/// The outcome is the JSON line on stdout; the exit code is 0 either way.
fn write_file(args: &[String]) -> Result<(), String> {
    let [path, mode, max, rest @ ..] = args else {
        return Err(USAGE.to_string());
    };
    let mut owner = None;
    let mut metadata = sbx_agent_proto::file_metadata::FileMetadata::new();
    let mut rest = rest.iter();
    while let Some(arg) = rest.next() {
        if arg == "--meta" {
            let pair = rest.next().ok_or_else(|| USAGE.to_string())?;
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("bad --meta {pair:?}"))?;
            metadata.insert(k.to_string(), v.to_string());
        } else if owner.is_none() && metadata.is_empty() {
            owner = Some(arg.as_str());
        } else {
            return Err(USAGE.to_string());
        }
    }
    let mode = u32::from_str_radix(mode, 8).map_err(|_| format!("bad mode {mode:?}"))?;
    let max: u64 = max.parse().map_err(|_| format!("bad byte limit {max:?}"))?;
    let result = match sbx_agent::upload::write_file_from_stdin(path, mode, max, (owner, &metadata))
    {
        Ok(n) => sbx_agent_proto::DirectUploadResult::Written { bytes_written: n },
        Err(e) => sbx_agent_proto::DirectUploadResult::Failed(e.into()),
    };
    let line = serde_json::to_string(&result).map_err(|e| e.to_string())?;
    println!("{line}");
    Ok(())
}

/// `read-file PATH MAX_BYTES`: the direct download path (a header line,
/// then the file's bytes on stdout).
fn read_file(args: &[String]) -> Result<(), String> {
    let [path, max] = args else {
        return Err(USAGE.to_string());
    };
    let max: u64 = max.parse().map_err(|_| format!("bad byte limit {max:?}"))?;
    // Unbuffered: the copy already writes 1 MiB at a time.
    // SAFETY: fd 1 is this process's stdout and stays open until exit; the
    // ManuallyDrop keeps it from being closed twice.
    let mut out = std::mem::ManuallyDrop::new(unsafe {
        <std::fs::File as std::os::fd::FromRawFd>::from_raw_fd(1)
    });
    sbx_agent::files::read_file_to(path, max, &mut *out).map_err(|e| e.to_string())
}

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (cmd, rest) = match args.split_first() {
        Some((c, r)) => (c.as_str(), r),
        None => ("", &[][..]),
    };
    let result = match cmd {
        "init" => task_limit_arg(rest).and_then(|limit| {
            if let Some(n) = limit {
                sbx_agent::launch::set_task_limit(n);
            }
            run_server(ListenAddr::Abstract(AGENT_SOCKET_NAME.into()), Mode::Init)
        }),
        "serve" => match socket_arg(rest) {
            Ok(Some(path)) => run_server(ListenAddr::Path(path), Mode::Serve),
            Ok(None) => Err(USAGE.to_string()),
            Err(e) => Err(e),
        },
        "relay" => socket_arg(rest).and_then(|p| {
            not_dumpable_helper();
            let addr = p
                .map(ListenAddr::Path)
                .unwrap_or_else(|| ListenAddr::Abstract(AGENT_SOCKET_NAME.into()));
            sbx_agent::relay::relay(&addr).map_err(|e| e.to_string())
        }),
        "write-file" => {
            not_dumpable_helper();
            write_file(rest)
        }
        "read-file" => {
            not_dumpable_helper();
            read_file(rest)
        }
        "version" | "--version" => {
            println!(
                "sbx-agent {} (protocol {})",
                env!("CARGO_PKG_VERSION"),
                sbx_agent_proto::PROTOCOL_VERSION
            );
            Ok(())
        }
        _ => Err(USAGE.to_string()),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sbx-agent: {e}");
            ExitCode::from(2)
        }
    }
}

fn run_server(addr: ListenAddr, mode: Mode) -> Result<(), String> {
    // Before anything can start a child: fds 0 and 1 must not stay the channel.
    let channel =
        sbx_agent::stdio::take().map_err(|e| format!("cannot take the stdio channel: {e}"))?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        // Every running process holds two blocking threads reading its
        // pipes (see pipes.rs), beside file work.
        .max_blocking_threads(4096)
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start runtime: {e}"))?;
    runtime.block_on(async move {
        use tokio::signal::unix::{signal, SignalKind};
        if mode == Mode::Serve {
            // SAFETY: plain prctl with integer arguments.
            if unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) } != 0 {
                console!(
                    "cannot become a child subreaper: {}",
                    std::io::Error::last_os_error()
                );
            }
        } else {
            if std::process::id() != 1 {
                console!("warning: init mode but pid is {}", std::process::id());
            }
            // The guest cannot turn the agent sbxd talks to into one of its own.
            if let Err(e) = not_dumpable() {
                console!("cannot make the agent non-dumpable: {e}");
            }
        }
        // Register SIGCHLD before any child can exist.
        let sigchld =
            signal(SignalKind::child()).map_err(|e| format!("cannot watch SIGCHLD: {e}"))?;
        let agent = Agent::new();
        tokio::spawn(Arc::clone(&agent.table).run_reaper(sigchld));
        console!(
            "started (boot id {}, pid {})",
            agent.boot_id,
            std::process::id()
        );
        if mode == Mode::Init {
            write_hosts();
        }
        if let Some((input, output)) = channel {
            console!("serving the stdio channel");
            tokio::spawn(sbx_agent::stdio::serve(Arc::clone(&agent), input, output));
        }
        if mode == Mode::Serve {
            let mut term = signal(SignalKind::terminate()).map_err(|e| e.to_string())?;
            let mut int = signal(SignalKind::interrupt()).map_err(|e| e.to_string())?;
            tokio::select! {
                r = server::serve(Arc::clone(&agent), &addr) => r.map_err(|e| e.to_string()),
                _ = term.recv() => { shutdown(&agent, &addr); Ok(()) }
                _ = int.recv() => { shutdown(&agent, &addr); Ok(()) }
            }
        } else {
            server::serve(agent, &addr).await.map_err(|e| e.to_string())
        }
    })
}

/// Init: gives an image without `/etc/hosts` the standard one, so that
/// `localhost` resolves through `files` even without the DNS responder
/// (network mode `none`). A read-only root (job sandboxes) is left alone.
fn write_hosts() {
    let path = std::path::Path::new(sbx_agent::dns::HOSTS);
    match sbx_agent::dns::write_hosts_if_missing(path) {
        Ok(_) => {}
        Err(e) if e.raw_os_error() == Some(libc::EROFS) => {}
        Err(e) => console!("cannot write {}: {e}", path.display()),
    }
}

/// `serve` mode shutdown: kill every process group the agent started.
fn shutdown(agent: &Agent, addr: &ListenAddr) {
    console!("terminating: killing all processes");
    agent.table.kill_all();
    if let ListenAddr::Path(path) = addr {
        let _ = std::fs::remove_file(path);
    }
}
