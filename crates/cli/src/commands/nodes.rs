//! `sbx nodes`: the node table, and `drain` / `undrain`.

use crate::util::table;
use crate::NodesCommand;
use sbx_client::api::Node;
use sbx_client::Client;

pub(super) async fn run(c: &Client, cmd: Option<NodesCommand>) -> anyhow::Result<u8> {
    let node = match cmd {
        None => {
            let rows: Vec<Vec<String>> = c.node_list().await?.iter().map(row).collect();
            print!("{}", table(HEADERS, &rows));
            return Ok(0);
        }
        Some(NodesCommand::Drain { id }) => c.node_drain(&id).await?,
        Some(NodesCommand::Undrain { id }) => c.node_undrain(&id).await?,
    };
    eprintln!("node {} is {}", node.id, node.state.as_str());
    Ok(0)
}

const HEADERS: &[&str] = &[
    "ID",
    "STATE",
    "EPOCH",
    "SANDBOXES",
    "VCPU",
    "MEMORY_MB",
    "LABELS",
    "URL",
    "VERSION",
    "HEARTBEAT",
];

fn row(n: &Node) -> Vec<String> {
    let labels: Vec<String> = n.labels.iter().map(|(k, v)| format!("{k}={v}")).collect();
    vec![
        n.id.clone(),
        n.state.as_str().to_string(),
        n.epoch.to_string(),
        n.sandboxes.to_string(),
        // Used of capacity, as `top` shows it.
        format!("{}/{}", n.load.vcpu, n.capacity.vcpu),
        format!("{}/{}", n.load.memory_mb, n.capacity.memory_mb),
        if labels.is_empty() {
            "-".to_string()
        } else {
            labels.join(",")
        },
        n.advertise_url.clone(),
        n.version.clone(),
        n.last_heartbeat_at.clone(),
    ]
}
