//! Command implementations. Each returns the process exit status on success.

use crate::util::{base_name, exit_byte, human_bytes, parse_location, shell_join, table, Location};
use crate::{resolve, Cli, Command, CreateArgs, ExecArgs, LifecycleArgs, SecretCommand, StartArgs};
use anyhow::{anyhow, bail, Context};
use futures::StreamExt;
use sbx_client::api::{
    CreateSandboxRequest, CreateSandboxV1Request, ExecRequest, FileKind, OutputStream,
    ProcessStartRequest, Sandbox, SandboxStatus, SignalRequest,
};
use sbx_client::{Chunk, Client, Snapshot, SnapshotStatus};
use std::collections::BTreeMap;
use std::io::{BufRead, IsTerminal, Read, Write};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// Interval between status polls (the SDK's).
const POLL: Duration = Duration::from_secs(1);
/// Longest single wait request.
const WAIT_SLICE: Duration = Duration::from_secs(60);

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<u8> {
    let mut client = Client::new(&cli.url, cli.key.as_deref())?;
    if let Some(env) = cli.workspace_env.as_deref() {
        client = client.with_env(env)?;
    }
    let c = &client;
    match cli.command {
        Command::Create(args) => create(c, args).await,
        Command::List => list(c).await,
        Command::Get { sandbox } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            print_json(&c.sandbox_detail(id).await?)
        }
        Command::Destroy { sandbox } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            let status = match c.destroy_sandbox(id).await? {
                Some(sb) => sb.status.as_str(),
                None => SandboxStatus::Terminated.as_str(),
            };
            println!("{id} {status}");
            Ok(0)
        }
        Command::Exec(args) => exec(c, args).await,
        Command::Ps { sandbox } => ps(c, &sandbox).await,
        Command::Start(args) => start(c, args).await,
        Command::Wait {
            sandbox,
            process,
            timeout,
        } => wait(c, &sandbox, &process, timeout).await,
        Command::Kill {
            sandbox,
            process,
            signal,
            no_children,
        } => {
            let sid = resolve::sandbox(c, &sandbox).await?;
            let pid = resolve::process(c, sid, &process).await?;
            let req = SignalRequest {
                signal: Some(signal),
                include_children: Some(!no_children),
            };
            c.process_signal(sid, pid, &req).await?;
            Ok(0)
        }
        Command::Output {
            sandbox,
            process,
            tail,
        } => {
            let sid = resolve::sandbox(c, &sandbox).await?;
            let pid = resolve::process(c, sid, &process).await?;
            for chunk in c.process_output(sid, pid, tail).await? {
                write_chunk(&chunk)?;
            }
            Ok(0)
        }
        Command::Logs {
            sandbox,
            follow,
            process,
            tail,
        } => logs(c, &sandbox, follow, process.as_deref(), tail).await,
        Command::Cp { src, dst, mode } => cp(c, &src, &dst, mode).await,
        Command::Ls { target } => ls(c, &target).await,
        Command::Rm { recursive, target } => {
            let (id, path) = remote(c, &target).await?;
            c.remove(id, &path, recursive).await?;
            Ok(0)
        }
        Command::Mv { from, to } => {
            let (id, from_path) = remote(c, &from).await?;
            let to_path = match parse_location(&to) {
                Location::Remote { sandbox, path } => {
                    if resolve::sandbox(c, &sandbox).await? != id {
                        bail!("mv works inside one sandbox; {to:?} names another");
                    }
                    path
                }
                Location::Local(p) if p.starts_with('/') => p,
                Location::Local(p) => bail!("{p:?}: the destination must be an absolute path"),
            };
            c.rename(id, &from_path, &to_path).await?;
            Ok(0)
        }
        Command::Mkdir { target } => {
            let (id, path) = remote(c, &target).await?;
            c.mkdir(id, &path).await?;
            Ok(0)
        }
        Command::Pause(args) => lifecycle(c, args, SandboxStatus::Paused).await,
        Command::Resume(args) => lifecycle(c, args, SandboxStatus::Running).await,
        Command::Snapshot {
            sandbox,
            name,
            no_wait,
            timeout,
        } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            let mut snap = c.snapshot_create(id, name.as_deref()).await?;
            if !no_wait {
                snap = wait_snapshot_ready(c, snap, timeout).await?;
            }
            eprintln!("snapshot {}", snap.status.as_str());
            println!("{}", snap.id);
            Ok(0)
        }
        Command::Snapshots { name } => snapshots(c, name.as_deref()).await,
        Command::Clone {
            snapshot,
            name,
            no_wait,
            timeout,
        } => {
            let snapshot_id = resolve::snapshot(c, &snapshot).await?;
            let req = CreateSandboxRequest {
                name: Some(name),
                snapshot_id: Some(snapshot_id),
                ..Default::default()
            };
            create_and_report(c, &req, no_wait, timeout).await
        }
        Command::SnapshotRm { snapshot } => {
            let id = resolve::snapshot(c, &snapshot).await?;
            c.snapshot_delete(id).await?;
            Ok(0)
        }
        Command::Secret(cmd) => secret(c, cmd).await,
        Command::Connect(cmd) => crate::connect::run(c, cmd).await,
    }
}

fn print_json<T: serde::Serialize>(value: &T) -> anyhow::Result<u8> {
    println!("{}", serde_json::to_string_pretty(value)?);
    Ok(0)
}

fn env_map(env: Vec<(String, String)>) -> Option<BTreeMap<String, String>> {
    (!env.is_empty()).then(|| env.into_iter().collect())
}

fn argv(shell: Option<String>, command: Vec<String>) -> Vec<String> {
    match shell {
        Some(s) => vec!["/bin/sh".into(), "-c".into(), s],
        None => command,
    }
}

/// Writes a chunk's bytes to the stream it came from.
fn write_chunk(chunk: &Chunk) -> std::io::Result<()> {
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

async fn create(c: &Client, args: CreateArgs) -> anyhow::Result<u8> {
    let network = crate::network::policy(args.network, args.allow).map_err(|e| anyhow!(e))?;
    let req = CreateSandboxRequest {
        name: Some(args.name),
        vcpu: Some(args.vcpu),
        memory_mb: Some(args.memory),
        environment: env_map(args.env),
        secrets: (!args.secrets.is_empty()).then_some(args.secrets),
        snapshot_id: None,
    };
    let Some(network) = network else {
        return create_and_report(c, &req, args.no_wait, args.timeout).await;
    };
    let req = CreateSandboxV1Request {
        name: req.name,
        vcpu: req.vcpu,
        memory_mb: req.memory_mb,
        environment: req.environment,
        secrets: req.secrets,
        snapshot_id: None,
        network: Some(network),
    };
    let sb = c.create_sandbox_v1(&req).await?;
    report_created(c, sb, args.no_wait, args.timeout).await
}

/// Creates, waits for RUNNING unless told not to, prints the id (status on stderr).
async fn create_and_report(
    c: &Client,
    req: &CreateSandboxRequest,
    no_wait: bool,
    timeout: Duration,
) -> anyhow::Result<u8> {
    let sb = c.create_sandbox(req).await?;
    report_created(c, sb, no_wait, timeout).await
}

/// Waits for RUNNING unless told not to, prints the id (status on stderr).
async fn report_created(
    c: &Client,
    mut sb: Sandbox,
    no_wait: bool,
    timeout: Duration,
) -> anyhow::Result<u8> {
    if !no_wait {
        sb = wait_running(c, sb, timeout).await?;
    }
    eprintln!("{} {}", sb.name, sb.status.as_str());
    println!("{}", sb.id);
    Ok(0)
}

/// Polls until RUNNING, as the SDK's `waitUntilRunning` does.
async fn wait_running(c: &Client, mut sb: Sandbox, timeout: Duration) -> anyhow::Result<Sandbox> {
    let deadline = Instant::now() + timeout;
    loop {
        match sb.status {
            SandboxStatus::Running => return Ok(sb),
            SandboxStatus::Pending | SandboxStatus::Starting => {}
            other => bail!(
                "sandbox {} did not start: it is {}{}",
                sb.id,
                other.as_str(),
                sb.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        }
        if Instant::now() >= deadline {
            bail!(
                "sandbox {} is still {} after {:?}",
                sb.id,
                sb.status.as_str(),
                timeout
            );
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        match c.get_sandbox(sb.id).await {
            Ok(fresh) => sb = fresh,
            Err(e) if e.is_retryable() => {}
            Err(e) => return Err(e.into()),
        }
    }
}

async fn lifecycle(c: &Client, args: LifecycleArgs, target: SandboxStatus) -> anyhow::Result<u8> {
    let id = resolve::sandbox(c, &args.sandbox).await?;
    let returned = match target {
        SandboxStatus::Paused => c.pause(id).await?,
        _ => c.resume(id).await?,
    };
    let mut sb = match returned {
        Some(sb) => sb,
        None => c.get_sandbox(id).await?,
    };
    if !args.no_wait {
        let deadline = Instant::now() + args.timeout;
        while sb.status != target {
            if matches!(sb.status, SandboxStatus::Failed | SandboxStatus::Terminated) {
                bail!("sandbox {id} is {}", sb.status.as_str());
            }
            if Instant::now() >= deadline {
                bail!(
                    "sandbox {id} is still {} after {:?}",
                    sb.status.as_str(),
                    args.timeout
                );
            }
            tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
            sb = c.get_sandbox(id).await?;
        }
    }
    println!("{}", sb.status.as_str());
    Ok(0)
}

async fn wait_snapshot_ready(
    c: &Client,
    mut snap: Snapshot,
    timeout: Duration,
) -> anyhow::Result<Snapshot> {
    let deadline = Instant::now() + timeout;
    loop {
        match snap.status {
            SnapshotStatus::Ready => return Ok(snap),
            SnapshotStatus::Creating => {}
            other => bail!(
                "snapshot {} is {}{}",
                snap.id,
                other.as_str(),
                snap.error
                    .as_deref()
                    .map(|e| format!(": {e}"))
                    .unwrap_or_default()
            ),
        }
        if Instant::now() >= deadline {
            bail!("snapshot {} is still CREATING after {timeout:?}", snap.id);
        }
        tokio::time::sleep(POLL.min(deadline.saturating_duration_since(Instant::now()))).await;
        match c.snapshot_get(snap.id).await {
            Ok(fresh) => snap = fresh,
            Err(e) if e.is_retryable() && !e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
    }
}

async fn list(c: &Client) -> anyhow::Result<u8> {
    let rows: Vec<Vec<String>> = c
        .list_all_sandboxes()
        .await?
        .into_iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                s.name,
                s.status.as_str().to_string(),
                format!("{} vCPU, {} MiB", s.resources.vcpu, s.resources.memory_mb),
                s.created_at,
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["ID", "NAME", "STATUS", "RESOURCES", "CREATED"], &rows)
    );
    Ok(0)
}

async fn exec(c: &Client, args: ExecArgs) -> anyhow::Result<u8> {
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

async fn ps(c: &Client, sandbox: &str) -> anyhow::Result<u8> {
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

async fn start(c: &Client, args: StartArgs) -> anyhow::Result<u8> {
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

async fn wait(
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

async fn logs(
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

/// `SANDBOX:/path` (or a bare `SANDBOX`, meaning `/`) to an id and a path.
async fn remote(c: &Client, target: &str) -> anyhow::Result<(Uuid, String)> {
    match parse_location(target) {
        Location::Remote { sandbox, path } => Ok((resolve::sandbox(c, &sandbox).await?, path)),
        Location::Local(_) => bail!("{target:?}: expected SANDBOX:/absolute/path"),
    }
}

async fn ls(c: &Client, target: &str) -> anyhow::Result<u8> {
    let (id, path) = match parse_location(target) {
        Location::Remote { sandbox, path } => (resolve::sandbox(c, &sandbox).await?, path),
        Location::Local(s) if !s.contains('/') => (resolve::sandbox(c, &s).await?, "/".into()),
        Location::Local(_) => bail!("{target:?}: expected SANDBOX:/absolute/path"),
    };
    let mut entries = c.list_dir(id, &path).await?;
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    let rows: Vec<Vec<String>> = entries
        .into_iter()
        .map(|e| {
            let kind = match e.kind {
                FileKind::Dir => "d",
                FileKind::Symlink => "l",
                FileKind::File => "-",
                FileKind::Other => "?",
            };
            let name = if e.kind == FileKind::Dir {
                format!("{}/", e.name)
            } else {
                e.name
            };
            vec![
                format!("{kind}{}", e.mode),
                human_bytes(e.size),
                e.modified_at,
                name,
            ]
        })
        .collect();
    print!("{}", table(&["MODE", "SIZE", "MODIFIED", "NAME"], &rows));
    Ok(0)
}

async fn cp(c: &Client, src: &str, dst: &str, mode: Option<u32>) -> anyhow::Result<u8> {
    match (parse_location(src), parse_location(dst)) {
        (Location::Local(local), Location::Remote { sandbox, path }) => {
            let id = resolve::sandbox(c, &sandbox).await?;
            let path = if path.ends_with('/') {
                if local == "-" {
                    bail!("{dst:?}: name the destination file when copying stdin");
                }
                let name = std::path::Path::new(&local)
                    .file_name()
                    .and_then(|n| n.to_str())
                    .ok_or_else(|| anyhow!("{local:?}: no file name"))?;
                format!("{path}{name}")
            } else {
                path
            };
            if local == "-" {
                c.upload(id, &path, mode, tokio::io::stdin()).await?;
            } else {
                let file = tokio::fs::File::open(&local)
                    .await
                    .with_context(|| format!("cannot open {local:?}"))?;
                let meta = file.metadata().await?;
                if meta.is_dir() {
                    bail!("{local:?} is a directory; cp copies single files");
                }
                let mode = mode.or_else(|| local_mode(&meta));
                c.upload(id, &path, mode, file).await?;
            }
            Ok(0)
        }
        (Location::Remote { sandbox, path }, Location::Local(local)) => {
            let id = resolve::sandbox(c, &sandbox).await?;
            if local == "-" {
                let mut out = tokio::io::stdout();
                c.download_to(id, &path, &mut out).await?;
                return Ok(0);
            }
            let mut dest = std::path::PathBuf::from(&local);
            if local.ends_with('/') || dest.is_dir() {
                dest.push(base_name(&path));
            }
            download_file(c, id, &path, &dest).await?;
            Ok(0)
        }
        (Location::Remote { .. }, Location::Remote { .. }) => {
            bail!("copying between sandboxes is not supported; copy through a local file")
        }
        (Location::Local(_), Location::Local(_)) => {
            bail!("one side of cp must be SANDBOX:/path")
        }
    }
}

#[cfg(unix)]
fn local_mode(meta: &std::fs::Metadata) -> Option<u32> {
    use std::os::unix::fs::PermissionsExt;
    Some(meta.permissions().mode() & 0o777).filter(|m| *m != 0)
}

#[cfg(not(unix))]
fn local_mode(_meta: &std::fs::Metadata) -> Option<u32> {
    None
}

/// Downloads into a temporary file next to `dest`, renamed into place once complete.
async fn download_file(
    c: &Client,
    id: Uuid,
    path: &str,
    dest: &std::path::Path,
) -> anyhow::Result<()> {
    let dir = dest
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(std::path::Path::new("."));
    let name = dest
        .file_name()
        .ok_or_else(|| anyhow!("{}: no file name", dest.display()))?;
    let tmp = dir.join(format!(
        ".{}.sbx-{}",
        name.to_string_lossy(),
        Uuid::new_v4().simple()
    ));
    let mut file = tokio::fs::File::create(&tmp)
        .await
        .with_context(|| format!("cannot create {}", tmp.display()))?;
    let result = c.download_to(id, path, &mut file).await;
    drop(file);
    match result {
        Ok(_) => tokio::fs::rename(&tmp, dest)
            .await
            .with_context(|| format!("cannot write {}", dest.display())),
        Err(e) => {
            let _ = tokio::fs::remove_file(&tmp).await;
            Err(e.into())
        }
    }
}

async fn snapshots(c: &Client, name: Option<&str>) -> anyhow::Result<u8> {
    let rows: Vec<Vec<String>> = c
        .snapshot_list_all(name)
        .await?
        .into_iter()
        .map(|s| {
            vec![
                s.id.to_string(),
                s.name.unwrap_or_default(),
                s.status.as_str().to_string(),
                human_bytes(s.stored_bytes),
                s.created_at,
                s.expires_at,
            ]
        })
        .collect();
    print!(
        "{}",
        table(
            &["ID", "NAME", "STATUS", "SIZE", "CREATED", "EXPIRES"],
            &rows
        )
    );
    Ok(0)
}

async fn secret(c: &Client, cmd: SecretCommand) -> anyhow::Result<u8> {
    match cmd {
        SecretCommand::Set { name, value } => {
            let value = match value {
                Some(v) => v,
                None => read_secret_value(&name)?,
            };
            c.secret_set(&name, &value).await?;
        }
        SecretCommand::List => {
            let rows: Vec<Vec<String>> = c
                .secret_list()
                .await?
                .into_iter()
                .map(|s| {
                    vec![
                        s.name,
                        s.created_at.unwrap_or_default(),
                        s.updated_at.unwrap_or_default(),
                    ]
                })
                .collect();
            print!("{}", table(&["NAME", "CREATED", "UPDATED"], &rows));
        }
        SecretCommand::Rm { name } => c.secret_delete(&name).await?,
    }
    Ok(0)
}

/// Reads a secret value from stdin: one line from a terminal, else all of it, minus one
/// trailing newline.
fn read_secret_value(name: &str) -> anyhow::Result<String> {
    let stdin = std::io::stdin();
    let mut value = String::new();
    if stdin.is_terminal() {
        eprint!("value for {name}: ");
        stdin.lock().read_line(&mut value)?;
    } else {
        stdin
            .lock()
            .read_to_string(&mut value)
            .context("the secret value on stdin must be UTF-8")?;
    }
    if value.ends_with('\n') {
        value.pop();
        if value.ends_with('\r') {
            value.pop();
        }
    }
    Ok(value)
}
