//! `sbx image` subcommands: build, import, from, tag, ls, get, rm.

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

/// Where the CLI puts a Dockerfile from outside the context in the tar.
const OUTSIDE_DOCKERFILE: &str = ".sbx-build.Dockerfile";

/// The context directory as a tar; a Dockerfile outside it is added as
/// [`OUTSIDE_DOCKERFILE`]. Answers the tar and the Dockerfile's path in it.
/// (`.dockerignore` is applied by the server, which has the one matcher.)
fn pack_context(
    dir: &std::path::Path,
    file: Option<&std::path::Path>,
) -> anyhow::Result<(Vec<u8>, Option<String>)> {
    let mut b = tar::Builder::new(Vec::new());
    b.follow_symlinks(false);
    b.append_dir_all(".", dir)
        .map_err(|e| anyhow::anyhow!("packing {}: {e}", dir.display()))?;
    let mut dockerfile = None;
    if let Some(f) = file {
        let (abs_dir, abs_f) = (dir.canonicalize()?, f.canonicalize()?);
        match abs_f.strip_prefix(&abs_dir) {
            Ok(rel) => dockerfile = Some(rel.to_string_lossy().into_owned()),
            Err(_) => {
                let data = std::fs::read(f)?;
                let mut h = tar::Header::new_gnu();
                h.set_mode(0o644);
                h.set_size(data.len() as u64);
                b.append_data(&mut h, OUTSIDE_DOCKERFILE, &data[..])?;
                dockerfile = Some(OUTSIDE_DOCKERFILE.to_string());
            }
        }
    }
    Ok((b.into_inner()?, dockerfile))
}

/// `sbx image build`: prints steps and output as they come; 1 on failure.
async fn build(
    c: &Client,
    context: std::path::PathBuf,
    file: Option<std::path::PathBuf>,
    tag: &str,
    build_args: Vec<String>,
    network: Option<String>,
) -> anyhow::Result<u8> {
    use sbx_client::api::BuildEvent;
    use std::io::Write;
    let (name, tag) = name_tag(tag);
    let mut options = sbx_client::BuildOptions {
        network,
        ..Default::default()
    };
    for kv in build_args {
        let Some((k, v)) = kv.split_once('=') else {
            anyhow::bail!("--build-arg {kv:?}: expected KEY=VALUE");
        };
        options.build_args.insert(k.to_string(), v.to_string());
    }
    let (tar, dockerfile) = pack_context(&context, file.as_deref())?;
    options.dockerfile = dockerfile;
    let mut log = c.image_build(name, tag, tar, &options).await?;
    let mut out = std::io::stdout();
    while let Some(event) = log.next().await? {
        match event {
            BuildEvent::Step {
                step,
                of,
                instruction,
                cached,
                ..
            } => {
                let mark = if cached { " (cached)" } else { "" };
                writeln!(out, "Step {step}/{of} : {instruction}{mark}")?;
            }
            BuildEvent::Output { data, stream, .. } => {
                if stream == "stderr" {
                    eprint!("{data}");
                } else {
                    write!(out, "{data}")?;
                }
            }
            BuildEvent::Result { image } => {
                writeln!(out, "Built {}:{} {}", image.name, image.tag, image.digest)?;
                return Ok(0);
            }
            BuildEvent::Error {
                code,
                message,
                output_tail,
                ..
            } => {
                eprintln!("error: {code}: {message}");
                if let Some(tail) = output_tail.filter(|t| !t.is_empty()) {
                    eprintln!("--- last output ---\n{tail}");
                }
                return Ok(1);
            }
        }
        out.flush()?;
    }
    anyhow::bail!("the build log ended without a result")
}

pub(super) async fn run(c: &Client, cmd: ImageCommand) -> anyhow::Result<u8> {
    match cmd {
        ImageCommand::Build {
            context,
            file,
            tag,
            build_arg,
            network,
        } => build(c, context, file, &tag, build_arg, network).await,
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
