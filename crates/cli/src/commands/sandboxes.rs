//! Sandbox commands: create, list, pause and resume, and the wait for RUNNING that clone shares.

use super::{env_map, POLL};
use crate::util::table;
use crate::{resolve, CreateArgs, LifecycleArgs};
use anyhow::{anyhow, bail};
use sbx_client::api::{CreateSandboxRequest, CreateSandboxV1Request, Sandbox, SandboxStatus};
use sbx_client::Client;
use std::time::{Duration, Instant};

pub(super) async fn create(c: &Client, args: CreateArgs) -> anyhow::Result<u8> {
    if let Some(template) = args.template {
        // A clone of the template: its shape, image, environment and network are the template's.
        let req = CreateSandboxV1Request {
            name: Some(args.name),
            preview: args.preview.map(|p| sbx_client::api::PreviewRequest {
                public: p == "public",
            }),
            template: Some(template),
            ..Default::default()
        };
        let sb = c.create_sandbox_v1(&req).await?;
        return report_created(c, sb, args.no_wait, args.timeout).await;
    }
    let network = crate::network::policy(args.network, args.allow).map_err(|e| anyhow!(e))?;
    let (vcpu, memory_mb) = match args.shape {
        Some((vcpu, memory_mb)) => (u64::from(vcpu), u64::from(memory_mb)),
        None => (args.vcpu, args.memory),
    };
    let req = CreateSandboxRequest {
        name: Some(args.name),
        vcpu: Some(vcpu),
        memory_mb: Some(memory_mb),
        environment: env_map(args.env),
        secrets: (!args.secrets.is_empty()).then_some(args.secrets),
        snapshot_id: None,
    };
    let preview = args.preview.map(|p| sbx_client::api::PreviewRequest {
        public: p == "public",
    });
    if network.is_none() && preview.is_none() && args.volumes.is_empty() && args.image.is_none() {
        return create_and_report(c, &req, args.no_wait, args.timeout).await;
    }
    let req = CreateSandboxV1Request {
        name: req.name,
        vcpu: req.vcpu,
        memory_mb: req.memory_mb,
        environment: req.environment,
        secrets: req.secrets,
        snapshot_id: None,
        network,
        node_selector: None,
        preview,
        volumes: args.volumes,
        image: args.image,
        template: None,
    };
    let sb = c.create_sandbox_v1(&req).await?;
    report_created(c, sb, args.no_wait, args.timeout).await
}

/// `sbx port`: the preview URL of `port` (same scheme as the API URL: sbxd
/// serves both), and the token header on stderr when one is needed.
pub(super) async fn port(c: &Client, id: uuid::Uuid, port: u16) -> anyhow::Result<u8> {
    let preview = c.preview(id, Some(port)).await?;
    if !preview.enabled {
        bail!("the preview URLs of {id} are off; turn them on with `sbx preview {id} --public` or `--token`");
    }
    let Some(host) = preview.host else {
        bail!("sbxd serves no preview domain; start it with --e2b-domain DOMAIN (see docs/e2b.md)");
    };
    println!("{}://{host}/", c.base_url().scheme());
    if let Some(token) = preview.token {
        eprintln!("{}: {token}", preview.token_header);
    }
    Ok(0)
}

/// Creates, waits for RUNNING unless told not to, prints the id (status on stderr).
pub(super) async fn create_and_report(
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

pub(super) async fn lifecycle(
    c: &Client,
    args: LifecycleArgs,
    target: SandboxStatus,
) -> anyhow::Result<u8> {
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

pub(super) async fn list(c: &Client) -> anyhow::Result<u8> {
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

/// `sbx shapes`: the shapes the server offers, one per line.
pub(super) async fn shapes(c: &Client) -> anyhow::Result<u8> {
    let rows: Vec<Vec<String>> = c
        .shapes()
        .await?
        .iter()
        .map(|s| {
            vec![
                s.key(),
                s.vcpu.to_string(),
                s.memory_mb.to_string(),
                format!("{} GiB", s.memory_mb / 1024),
            ]
        })
        .collect();
    print!(
        "{}",
        table(&["SHAPE", "VCPU", "MEMORY_MB", "MEMORY"], &rows)
    );
    Ok(0)
}
