//! `sbx top`: the caller's running and paused sandboxes by CPU and memory,
//! from each one's newest usage sample (`GET /v1/sandboxes/{id}/metrics`).
//! On a terminal the table is redrawn every 2 s until interrupted; with
//! `--once` or when stdout is not a terminal one table is printed.

use crate::util::table;
use sbx_client::api::{Sandbox, SandboxMetrics, SandboxStatus, UsageSample};
use sbx_client::Client;
use std::io::{IsTerminal, Write};
use std::time::Duration;

/// How often the live table is redrawn.
const REFRESH: Duration = Duration::from_secs(2);

pub(super) async fn run(c: &Client, once: bool) -> anyhow::Result<u8> {
    let live = !once && std::io::stdout().is_terminal();
    loop {
        let text = frame(c).await?;
        if !live {
            print!("{text}");
            return Ok(0);
        }
        // Clear the screen and home the cursor, then draw.
        print!("\x1b[H\x1b[2J{text}");
        std::io::stdout().flush()?;
        tokio::time::sleep(REFRESH).await;
    }
}

/// One table of every running or paused sandbox of the caller.
async fn frame(c: &Client) -> anyhow::Result<String> {
    let sandboxes: Vec<Sandbox> = c
        .list_all_sandboxes()
        .await?
        .into_iter()
        .filter(|s| matches!(s.status, SandboxStatus::Running | SandboxStatus::Paused))
        .collect();
    // A sandbox that ended between the list and its metrics is left out.
    let metrics =
        futures::future::join_all(sandboxes.iter().map(|s| c.sandbox_metrics(s.id))).await;
    let pairs: Vec<(Sandbox, Option<SandboxMetrics>)> = sandboxes
        .into_iter()
        .zip(metrics)
        .filter_map(|(s, m)| match m {
            Ok(m) => Some((s, Some(m))),
            Err(e) if e.status() == Some(404) => None,
            Err(_) => Some((s, None)),
        })
        .collect();
    Ok(table(HEADERS, &rows(pairs)))
}

const HEADERS: &[&str] = &[
    "ID", "NAME", "STATUS", "CPU%", "MEM", "MEM%", "PEAK", "DISK", "PROCS", "SAMPLED",
];

/// Rows sorted by CPU, then memory, highest first; `-` where no sample is known yet.
fn rows(pairs: Vec<(Sandbox, Option<SandboxMetrics>)>) -> Vec<Vec<String>> {
    let mut keyed: Vec<(f64, u64, Vec<String>)> = pairs
        .into_iter()
        .map(|(s, m)| {
            let last: Option<&UsageSample> = m.as_ref().and_then(|m| m.samples.last());
            let limit = u64::from(s.resources.memory_mb) * 1024 * 1024;
            let dash = || "-".to_string();
            let row = vec![
                s.id.to_string(),
                s.name.clone(),
                s.status.as_str().to_string(),
                last.map_or_else(dash, |l| format!("{:.1}", l.cpu_percent)),
                last.map_or_else(dash, |l| format!("{}/{}", mib(l.memory_bytes), mib(limit))),
                last.map_or_else(dash, |l| {
                    format!("{:.1}", l.memory_bytes as f64 * 100.0 / limit.max(1) as f64)
                }),
                last.map_or_else(dash, |l| mib(l.memory_peak_bytes)),
                last.map_or_else(dash, |l| mib(l.disk_used_bytes)),
                last.and_then(|l| l.processes)
                    .map_or_else(dash, |n| n.to_string()),
                last.map_or_else(dash, |l| l.timestamp.clone()),
            ];
            let cpu = last.map_or(-1.0, |l| l.cpu_percent);
            (cpu, last.map_or(0, |l| l.memory_bytes), row)
        })
        .collect();
    keyed.sort_by(|a, b| b.0.total_cmp(&a.0).then(b.1.cmp(&a.1)));
    keyed.into_iter().map(|(_, _, row)| row).collect()
}

/// Bytes as whole MiB, with the unit.
fn mib(bytes: u64) -> String {
    format!("{}M", bytes / (1024 * 1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sandbox(name: &str) -> Sandbox {
        serde_json::from_value(serde_json::json!({
            "id": uuid::Uuid::new_v4(), "name": name, "status": "RUNNING",
            "resources": {"vcpu": 1, "memoryMb": 1024}, "imageRef": "default",
            "environment": {}, "createdAt": "2026-01-01T00:00:00.000Z",
            "vpcId": uuid::Uuid::new_v4()
        }))
        .expect("a sandbox")
    }

    fn metrics(s: &Sandbox, cpu: f64, memory_mb: u64) -> SandboxMetrics {
        SandboxMetrics {
            sandbox_id: s.id,
            vcpu: 1,
            memory_mb: 1024,
            interval_secs: 5,
            samples: vec![UsageSample {
                timestamp: "2026-01-01T00:00:05.000Z".into(),
                cpu_percent: cpu,
                cpu_core_percent: cpu,
                cpu_time_ms: 10,
                memory_bytes: memory_mb * 1024 * 1024,
                memory_peak_bytes: memory_mb * 1024 * 1024,
                memory_cache_bytes: 0,
                disk_used_bytes: 0,
                disk_total_bytes: 0,
                processes: Some(3),
            }],
        }
    }

    #[test]
    fn rows_are_sorted_by_cpu_then_memory_and_unknowns_last() {
        let (a, b, c, d) = (sandbox("a"), sandbox("b"), sandbox("c"), sandbox("d"));
        let (ma, mb, mc) = (
            metrics(&a, 5.0, 100),
            metrics(&b, 90.0, 50),
            metrics(&c, 5.0, 300),
        );
        let rows = rows(vec![(a, Some(ma)), (b, Some(mb)), (c, Some(mc)), (d, None)]);
        let names: Vec<&str> = rows.iter().map(|r| r[1].as_str()).collect();
        assert_eq!(names, ["b", "c", "a", "d"]);
        assert_eq!(
            &rows[0][3..9],
            ["90.0", "50M/1024M", "4.9", "50M", "0M", "3"]
        );
        assert_eq!(rows[3][3], "-");
    }
}
