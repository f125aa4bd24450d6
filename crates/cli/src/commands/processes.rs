//! Process commands: exec, ps, start, wait and output/logs streaming.

use super::{env_map, print_json};
use crate::util::{exit_byte, shell_join, table};
use crate::{resolve, ExecArgs, StartArgs};
use futures::StreamExt;
use sbx_client::api::{ExecRequest, OutputStream, ProcessStartRequest};
use sbx_client::{Chunk, Client};
use std::io::Write;
use std::time::{Duration, Instant};

/// Longest single wait request.
const WAIT_SLICE: Duration = Duration::from_secs(60);

fn argv(shell: Option<String>, command: Vec<String>) -> Vec<String> {
    match shell {
        Some(s) => vec!["/bin/sh".into(), "-c".into(), s],
        None => command,
    }
}

/// Writes a chunk's bytes to the stream it came from.
pub(super) fn write_chunk(chunk: &Chunk) -> std::io::Result<()> {
    match chunk.stream {
        OutputStream::Stdout => {
            let mut out = std::io::stdout().lock();
            out.write_all(&chunk.data)?;
            out.flush()
        }
        OutputStream::Stderr => {
            let mut err = std::io::stderr().lock();
            err.write_all(&chunk.data)?;
            err.flush()
        }
    }
}

pub(super) async fn exec(c: &Client, args: ExecArgs) -> anyhow::Result<u8> {
    let id = resolve::sandbox(c, &args.sandbox).await?;
    let req = ExecRequest {
        command: Some(argv(args.shell, args.command)),
        environment: env_map(args.env),
        cwd: args.cwd,
        timeout: Some(format!("{}ms", args.timeout.as_millis().max(1))),
    };
    let out = c.exec(id, &req).await?;
    {
        let mut stdout = std::io::stdout().lock();
        stdout.write_all(&out.stdout)?;
        stdout.flush()?;
    }
    {
        let mut stderr = std::io::stderr().lock();
        stderr.write_all(&out.stderr)?;
        stderr.flush()?;
    }
    Ok(exit_byte(out.exit_code))
}

pub(super) async fn ps(c: &Client, sandbox: &str) -> anyhow::Result<u8> {
    let id = resolve::sandbox(c, sandbox).await?;
    let rows: Vec<Vec<String>> = c
        .process_list_all(id)
        .await?
        .into_iter()
        .map(|p| {
            let state = serde_json::to_value(p.state)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .unwrap_or_default();
            let exit = match (p.exit_code, p.termination_signal) {
                (Some(code), _) => code.to_string(),
                (None, Some(sig)) => format!("signal {sig}"),
                _ => String::new(),
            };
            vec![
                p.id.to_string(),
                p.pid.map(|n| n.to_string()).unwrap_or_default(),
                state,
                exit,
                shell_join(&p.command),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["ID", "PID", "STATE", "EXIT", "COMMAND"], &rows)
    );
    Ok(0)
}

pub(super) async fn start(c: &Client, args: StartArgs) -> anyhow::Result<u8> {
    let id = resolve::sandbox(c, &args.sandbox).await?;
    let req = ProcessStartRequest {
        command: Some(argv(args.shell, args.command)),
        environment: env_map(args.env),
        cwd: args.cwd,
    };
    let p = c.process_start(id, &req).await?;
    if let Some(pid) = p.pid {
        eprintln!("pid {pid}");
    }
    println!("{}", p.id);
    Ok(0)
}

pub(super) async fn wait(
    c: &Client,
    sandbox: &str,
    process: &str,
    timeout: Option<Duration>,
) -> anyhow::Result<u8> {
    let sid = resolve::sandbox(c, sandbox).await?;
    let pid = resolve::process(c, sid, process).await?;
    let deadline = timeout.map(|t| Instant::now() + t);
    loop {
        let slice = match deadline {
            Some(d) => WAIT_SLICE.min(d.saturating_duration_since(Instant::now())),
            None => WAIT_SLICE,
        };
        match c
            .process_wait(sid, pid, Some(slice.max(Duration::from_millis(1))))
            .await
        {
            Ok(result) => return print_json(&result),
            Err(e)
                if e.is_code("sandbox_process_wait_timed_out")
                    && deadline.is_none_or(|d| Instant::now() < d) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

pub(super) async fn logs(
    c: &Client,
    sandbox: &str,
    follow: bool,
    process: Option<&str>,
    tail: u64,
) -> anyhow::Result<u8> {
    let sid = resolve::sandbox(c, sandbox).await?;
    match process {
        None => {
            let mut stream = c.logs(sid, follow).await?;
            while let Some(chunk) = stream.next().await {
                write_chunk(&chunk?)?;
            }
        }
        Some(p) => {
            let pid = resolve::process(c, sid, p).await?;
            if follow {
                crate::follow::process_output(c, sid, pid, tail, write_chunk).await?;
            } else {
                for chunk in c.process_output(sid, pid, tail).await? {
                    write_chunk(&chunk)?;
                }
            }
        }
    }
    Ok(0)
}
