//! `sbx image` subcommands: import, from, tag, ls, get, rm.

use super::print_json;
use crate::util::table;
use crate::{resolve, ImageCommand};
use sbx_client::Client;

/// `NAME:TAG` (or `NAME`, tag `latest`) split for the API, which checks both.
fn name_tag(raw: &str) -> (&str, &str) {
    raw.rsplit_once(':').unwrap_or((raw, "latest"))
}

/// Bytes as the list shows them (MiB, one decimal).
fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1024.0 * 1024.0))
}

pub(super) async fn run(c: &Client, cmd: ImageCommand) -> anyhow::Result<u8> {
    match cmd {
        ImageCommand::Import { file, tag } => {
            let (name, tag) = name_tag(&tag);
            print_json(&c.image_import(name, tag, &file).await?)
        }
        ImageCommand::From { sandbox, tag } => {
            let id = resolve::sandbox(c, &sandbox).await?;
            let (name, tag) = name_tag(&tag);
            print_json(&c.image_from_sandbox(id, name, tag).await?)
        }
        ImageCommand::Ls => {
            let rows: Vec<Vec<String>> = c
                .image_list()
                .await?
                .into_iter()
                .map(|i| {
                    vec![
                        format!("{}:{}", i.name, i.tag),
                        i.digest.chars().take(19).collect(),
                        mib(i.size_bytes),
                        i.origin,
                        i.created_at,
                    ]
                })
                .collect();
            print!(
                "{}",
                table(&["IMAGE", "DIGEST", "SIZE_MIB", "ORIGIN", "CREATED"], &rows)
            );
            Ok(0)
        }
        ImageCommand::Tag { image, target } => {
            let (name, tag) = name_tag(&target);
            print_json(&c.image_tag(&image, name, tag).await?)
        }
        ImageCommand::Get { image } => print_json(&c.image_get(&image).await?),
        ImageCommand::Rm { image } => {
            c.image_delete(&image).await?;
            Ok(0)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_and_tag_split_with_latest_by_default() {
        assert_eq!(name_tag("py:3.12"), ("py", "3.12"));
        assert_eq!(name_tag("py"), ("py", "latest"));
        assert_eq!(mib(3 * 1024 * 1024 / 2), "1.5");
    }
}
