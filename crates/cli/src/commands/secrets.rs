//! `sbx secret` subcommands: set (value from the argument or stdin), list, rm.

use crate::util::table;
use crate::SecretCommand;
use anyhow::Context;
use sbx_client::Client;
use std::io::{BufRead, IsTerminal, Read};

pub(super) async fn run(c: &Client, cmd: SecretCommand) -> anyhow::Result<u8> {
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
