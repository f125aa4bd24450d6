//! Command implementations. Each returns the process exit status on success.

mod files;
mod images;
mod nodes;
mod processes;
mod sandboxes;
mod secrets;
mod snapshots;
mod templates;
mod top;
mod volumes;

use crate::util::{parse_location, Location};
use crate::{resolve, Cli, Command};
use anyhow::bail;
use sbx_client::api::{CreateSandboxRequest, SandboxStatus, SignalRequest};
use sbx_client::Client;
use std::collections::BTreeMap;
use std::time::Duration;

/// Interval between status polls (the SDK's).
const POLL: Duration = Duration::from_secs(1);

/// Runs the parsed command line.
pub async fn run(cli: Cli) -> anyhow::Result<u8> {
    let mut client = Client::new(&cli.url, cli.key.as_deref())?;
    if let Some(env) = cli.workspace_env.as_deref() {
        client = client.with_env(env)?;
    }
    let c = &client;
    match cli.command {
        Command::Create(args) => sandboxes::create(c, args).await,
        Command::List => sandboxes::list(c).await,
        Command::Shapes => sandboxes::shapes(c).await,
        Command::Top { once } => top::run(c, once).await,
        Command::Get { sandbox } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            print_json(&c.sandbox_detail(id).await?)
        }
        Command::Network {
            sandbox,
            network,
            allow,
        } => {
            let policy = crate::network::policy(network, allow)
                .map_err(|e| anyhow::anyhow!(e))?
                .ok_or_else(|| {
                    anyhow::anyhow!("give the new policy: --network MODE or --allow RULE")
                })?;
            let id = resolve::sandbox(c, &sandbox).await?;
            print_json(&c.update_network(id, &policy).await?.network)
        }
        Command::Preview {
            sandbox,
            public,
            token,
            off,
        } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            let preview = if off {
                c.disable_preview(id).await?
            } else if public || token {
                c.enable_preview(id, public).await?
            } else {
                c.preview(id, None).await?
            };
            print_json(&preview)
        }
        Command::Port { sandbox, port } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            sandboxes::port(c, id, port).await
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
        Command::Exec(args) => processes::exec(c, args).await,
        Command::Ps { sandbox } => processes::ps(c, &sandbox).await,
        Command::Start(args) => processes::start(c, args).await,
        Command::Wait {
            sandbox,
            process,
            timeout,
        } => processes::wait(c, &sandbox, &process, timeout).await,
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
                processes::write_chunk(&chunk)?;
            }
            Ok(0)
        }
        Command::Logs {
            sandbox,
            follow,
            process,
            tail,
        } => processes::logs(c, &sandbox, follow, process.as_deref(), tail).await,
        Command::Cp { src, dst, mode } => files::cp(c, &src, &dst, mode).await,
        Command::Ls { target } => files::ls(c, &target).await,
        Command::Rm { recursive, target } => {
            let (id, path) = files::remote(c, &target).await?;
            c.remove(id, &path, recursive).await?;
            Ok(0)
        }
        Command::Mv { from, to } => {
            let (id, from_path) = files::remote(c, &from).await?;
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
            let (id, path) = files::remote(c, &target).await?;
            c.mkdir(id, &path).await?;
            Ok(0)
        }
        Command::Pause(args) => sandboxes::lifecycle(c, args, SandboxStatus::Paused).await,
        Command::Resume(args) => sandboxes::lifecycle(c, args, SandboxStatus::Running).await,
        Command::Snapshot {
            sandbox,
            name,
            no_wait,
            timeout,
        } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            let mut snap = c.snapshot_create(id, name.as_deref()).await?;
            if !no_wait {
                snap = snapshots::wait_ready(c, snap, timeout).await?;
            }
            eprintln!("snapshot {}", snap.status.as_str());
            println!("{}", snap.id);
            Ok(0)
        }
        Command::Snapshots { name } => snapshots::list(c, name.as_deref()).await,
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
            sandboxes::create_and_report(c, &req, no_wait, timeout).await
        }
        Command::SnapshotRm { snapshot } => {
            let id = resolve::snapshot(c, &snapshot).await?;
            c.snapshot_delete(id).await?;
            Ok(0)
        }
        Command::Secret(cmd) => secrets::run(c, cmd).await,
        Command::Volume(cmd) => volumes::run(c, cmd).await,
        Command::Image(cmd) => images::run(c, cmd).await,
        Command::Template(cmd) => templates::run(c, cmd).await,
        Command::Nodes { command } => nodes::run(c, command).await,
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
