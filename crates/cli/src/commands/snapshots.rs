//! Snapshot commands: waiting for a snapshot to be ready, and listing snapshots.

use super::POLL;
use crate::util::{human_bytes, table};
use anyhow::bail;
use sbx_client::{Client, Snapshot, SnapshotStatus};
use std::time::{Duration, Instant};

pub(super) async fn wait_ready(
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

pub(super) async fn list(c: &Client, name: Option<&str>) -> anyhow::Result<u8> {
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
