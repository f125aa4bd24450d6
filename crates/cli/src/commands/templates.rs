//! `sbx template` subcommands: create, ls, get, rebuild, rm.

use super::print_json;
use crate::util::table;
use crate::TemplateCommand;
use anyhow::bail;
use sbx_client::api::{ReadyCheck, TemplateSpec};
use sbx_client::Client;

pub(super) async fn run(c: &Client, cmd: TemplateCommand) -> anyhow::Result<u8> {
    match cmd {
        TemplateCommand::Create {
            name,
            image,
            start_cmd,
            ready_port,
            ready_cmd,
            ready_timeout,
            wait,
        } => {
            let ready_check = match (ready_port, ready_cmd) {
                (Some(port), None) => Some(ReadyCheck::Port { port }),
                (None, Some(command)) => Some(ReadyCheck::Command { command }),
                (None, None) => None,
                (Some(_), Some(_)) => bail!("give --ready-port or --ready-cmd, not both"),
            };
            let spec = TemplateSpec {
                name,
                image,
                start_command: start_cmd,
                ready_check,
                ready_timeout_secs: ready_timeout,
                ..Default::default()
            };
            let t = c.template_create(&spec, wait).await?;
            let failed = t.status == sbx_client::api::TemplateStatus::Failed;
            print_json(&t)?;
            Ok(u8::from(failed))
        }
        TemplateCommand::Ls => {
            let rows: Vec<Vec<String>> = c
                .template_list()
                .await?
                .into_iter()
                .map(|t| {
                    vec![
                        t.spec.name,
                        t.spec.image.unwrap_or_else(|| "default".into()),
                        t.status.as_str().to_string(),
                        t.snapshot_id.map(|s| s.to_string()).unwrap_or_default(),
                        t.updated_at,
                    ]
                })
                .collect();
            print!(
                "{}",
                table(
                    &["TEMPLATE", "IMAGE", "STATUS", "SNAPSHOT", "UPDATED"],
                    &rows
                )
            );
            Ok(0)
        }
        TemplateCommand::Get { name } => print_json(&c.template_get(&name).await?),
        TemplateCommand::Rebuild { name, wait } => {
            print_json(&c.template_rebuild(&name, wait).await?)
        }
        TemplateCommand::Rm { name } => {
            c.template_delete(&name).await?;
            Ok(0)
        }
    }
}
