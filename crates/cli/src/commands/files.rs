//! File commands: cp (upload/download), ls and the remote-path parsing mv, rm and mkdir share.

use crate::resolve;
use crate::util::{base_name, human_bytes, parse_location, table, Location};
use anyhow::{anyhow, bail, Context};
use sbx_client::api::FileKind;
use sbx_client::Client;
use uuid::Uuid;

/// `SANDBOX:/path` (or a bare `SANDBOX`, meaning `/`) to an id and a path.
pub(super) async fn remote(c: &Client, target: &str) -> anyhow::Result<(Uuid, String)> {
    match parse_location(target) {
        Location::Remote { sandbox, path } => Ok((resolve::sandbox(c, &sandbox).await?, path)),
        Location::Local(_) => bail!("{target:?}: expected SANDBOX:/absolute/path"),
    }
}

pub(super) async fn ls(c: &Client, target: &str) -> anyhow::Result<u8> {
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

pub(super) async fn cp(c: &Client, src: &str, dst: &str, mode: Option<u32>) -> anyhow::Result<u8> {
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
