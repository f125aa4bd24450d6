//! `sbx volume` subcommands: create, ls, get, rm.

use super::print_json;
use crate::util::table;
use crate::VolumeCommand;
use sbx_client::api::{CreateVolumeRequest, VolumeKind};
use sbx_client::Client;

pub(super) async fn run(c: &Client, cmd: VolumeCommand) -> anyhow::Result<u8> {
    match cmd {
        VolumeCommand::Create {
            name,
            size_mb,
            kind,
        } => {
            let req = CreateVolumeRequest {
                name: Some(name),
                kind: VolumeKind::parse(&kind),
                size_mb: Some(size_mb),
            };
            print_json(&c.volume_create(&req).await?)
        }
        VolumeCommand::Ls => {
            let rows: Vec<Vec<String>> = c
                .volume_list()
                .await?
                .into_iter()
                .map(|v| {
                    vec![
                        v.name,
                        v.kind.as_str().to_string(),
                        v.size_mb.to_string(),
                        v.node_id,
                        v.created_at,
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["NAME", "KIND", "SIZE_MB", "NODE", "CREATED"], &rows)
            );
            Ok(0)
        }
        VolumeCommand::Get { name } => print_json(&c.volume_get(&name).await?),
        VolumeCommand::Rm { name, force } => {
            c.volume_delete(&name, force).await?;
            Ok(0)
        }
    }
}
