//! Reads an uploaded image archive: an OCI image layout or a `docker save`
//! tarball. The outer tar is indexed once (name → offset and size of each
//! regular file), so the manifest, config and layers can be read in any order.

use super::extract::ExtractError;
use sbx_api_types::ImageConfig;
use serde::Deserialize;
use std::collections::HashMap;
use std::fs::File;
use std::io::{BufRead, BufReader, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// Largest manifest, index or config JSON read.
const MAX_JSON_BYTES: u64 = 4 * 1024 * 1024;
/// Most entries in an outer archive.
const MAX_ENTRIES: usize = 100_000;

/// An outer archive: where each file's bytes are.
pub struct Archive {
    path: PathBuf,
    files: HashMap<String, (u64, u64)>,
    links: HashMap<String, String>,
}

fn malformed(why: impl std::fmt::Display) -> ExtractError {
    ExtractError::Malformed(why.to_string())
}

/// `./a//b` → `a/b`.
fn normal(name: &str) -> String {
    name.split('/')
        .filter(|p| !p.is_empty() && *p != ".")
        .collect::<Vec<_>>()
        .join("/")
}

/// The path of an OCI blob: `blobs/sha256/<hex>` (digests checked).
fn blob_path(digest: &str) -> Result<String, ExtractError> {
    if !sbx_api_types::images::is_digest(digest) {
        return Err(malformed(format!("{digest:?} is not a sha256 digest")));
    }
    Ok(format!("blobs/sha256/{}", &digest["sha256:".len()..]))
}

#[derive(Deserialize)]
struct Descriptor {
    #[serde(rename = "mediaType", default)]
    media_type: String,
    digest: String,
    #[serde(default)]
    platform: Option<Platform>,
}

#[derive(Deserialize)]
struct Platform {
    #[serde(default)]
    os: String,
    #[serde(default)]
    architecture: String,
}

#[derive(Deserialize)]
struct Index {
    manifests: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct Manifest {
    config: Descriptor,
    layers: Vec<Descriptor>,
}

#[derive(Deserialize)]
struct DockerManifest {
    #[serde(rename = "Config")]
    config: String,
    #[serde(rename = "Layers")]
    layers: Vec<String>,
}

#[derive(Deserialize, Default)]
struct ConfigFile {
    #[serde(default)]
    config: Option<RunConfig>,
}

#[derive(Deserialize, Default)]
struct RunConfig {
    #[serde(rename = "Env", default)]
    env: Option<Vec<String>>,
    #[serde(rename = "WorkingDir", default)]
    working_dir: Option<String>,
    #[serde(rename = "User", default)]
    user: Option<String>,
    #[serde(rename = "Entrypoint", default)]
    entrypoint: Option<Vec<String>>,
    #[serde(rename = "Cmd", default)]
    cmd: Option<Vec<String>>,
}

/// What an archive holds: its layers (archive names, bottom first) and config.
pub struct Contents {
    /// Layer files, in the order they are applied.
    pub layers: Vec<String>,
    /// Process defaults.
    pub config: ImageConfig,
}

fn is_index(media_type: &str) -> bool {
    media_type.ends_with("image.index.v1+json") || media_type.ends_with("manifest.list.v2+json")
}

impl Archive {
    /// Indexes the tar at `path`.
    pub fn open(path: &Path) -> Result<Archive, ExtractError> {
        let file = File::open(path).map_err(|source| ExtractError::Io {
            path: path.display().to_string(),
            source,
        })?;
        let mut tar = tar::Archive::new(file);
        let mut files = HashMap::new();
        let mut links = HashMap::new();
        for entry in tar.entries().map_err(malformed)? {
            let entry = entry.map_err(malformed)?;
            if files.len() + links.len() >= MAX_ENTRIES {
                return Err(malformed("too many entries in the archive"));
            }
            let name = normal(&String::from_utf8_lossy(&entry.path_bytes()));
            match entry.header().entry_type() {
                tar::EntryType::Regular | tar::EntryType::Continuous => {
                    let size = entry.header().size().map_err(malformed)?;
                    files.insert(name, (entry.raw_file_position(), size));
                }
                // Older `docker save` links a layer shared by two images.
                tar::EntryType::Symlink | tar::EntryType::Link => {
                    if let Some(target) = entry.link_name_bytes() {
                        let target = String::from_utf8_lossy(&target).into_owned();
                        links.insert(name, target);
                    }
                }
                _ => {}
            }
        }
        Ok(Archive {
            path: path.to_path_buf(),
            files,
            links,
        })
    }

    /// Where `name`'s bytes are, following one symlink or hard link.
    fn locate(&self, name: &str) -> Result<(u64, u64), ExtractError> {
        let name = normal(name);
        if let Some(found) = self.files.get(&name) {
            return Ok(*found);
        }
        if let Some(target) = self.links.get(&name) {
            // A symlink is relative to its directory; a hard link to the archive root.
            let dir = name.rsplit_once('/').map_or("", |(d, _)| d);
            let mut parts: Vec<&str> = if target.starts_with('/') {
                vec![]
            } else {
                dir.split('/').filter(|p| !p.is_empty()).collect()
            };
            for p in target.split('/') {
                match p {
                    "" | "." => {}
                    ".." => {
                        parts.pop();
                    }
                    p => parts.push(p),
                }
            }
            for candidate in [parts.join("/"), normal(target)] {
                if let Some(found) = self.files.get(&candidate) {
                    return Ok(*found);
                }
            }
        }
        Err(malformed(format!("the archive has no file {name:?}")))
    }

    /// Reads `name`'s bytes.
    pub fn reader(&self, name: &str) -> Result<impl Read, ExtractError> {
        let (offset, size) = self.locate(name)?;
        let mut file = File::open(&self.path).map_err(|source| ExtractError::Io {
            path: self.path.display().to_string(),
            source,
        })?;
        file.seek(SeekFrom::Start(offset))
            .map_err(|source| ExtractError::Io {
                path: self.path.display().to_string(),
                source,
            })?;
        Ok(file.take(size))
    }

    fn json<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<T, ExtractError> {
        let mut bytes = Vec::new();
        self.reader(name)?
            .take(MAX_JSON_BYTES)
            .read_to_end(&mut bytes)
            .map_err(malformed)?;
        serde_json::from_slice(&bytes).map_err(|e| malformed(format!("{name}: {e}")))
    }

    /// Finds the image: OCI `index.json` first, else `docker save`'s `manifest.json`.
    pub fn contents(&self) -> Result<Contents, ExtractError> {
        let (layers, config_name) = if self.files.contains_key("index.json") {
            let mut index: Index = self.json("index.json")?;
            // One level of nested index (multi-platform images): linux/amd64, else the first.
            let mut manifest = None;
            for _ in 0..2 {
                let pick = index
                    .manifests
                    .iter()
                    .position(|m| {
                        m.platform
                            .as_ref()
                            .is_some_and(|p| p.os == "linux" && p.architecture == "amd64")
                    })
                    .unwrap_or(0);
                let Some(d) = index.manifests.into_iter().nth(pick) else {
                    return Err(malformed("index.json lists no manifest"));
                };
                if is_index(&d.media_type) {
                    index = self.json(&blob_path(&d.digest)?)?;
                    continue;
                }
                manifest = Some(d);
                break;
            }
            let d = manifest.ok_or_else(|| malformed("nested image indexes too deep"))?;
            let m: Manifest = self.json(&blob_path(&d.digest)?)?;
            let layers = m
                .layers
                .iter()
                .map(|l| blob_path(&l.digest))
                .collect::<Result<Vec<_>, _>>()?;
            (layers, blob_path(&m.config.digest)?)
        } else if self.files.contains_key("manifest.json") {
            let list: Vec<DockerManifest> = self.json("manifest.json")?;
            let m = list
                .into_iter()
                .next()
                .ok_or_else(|| malformed("manifest.json lists no image"))?;
            (m.layers, m.config)
        } else {
            return Err(malformed(
                "neither an OCI image layout (index.json) nor a docker save tarball (manifest.json)",
            ));
        };
        let file: ConfigFile = self.json(&config_name)?;
        let run = file.config.unwrap_or_default();
        let config = ImageConfig {
            env: run.env.unwrap_or_default(),
            workdir: run.working_dir.filter(|w| !w.is_empty()),
            user: run.user.filter(|u| !u.is_empty()),
            entrypoint: run.entrypoint,
            cmd: run.cmd,
            ..ImageConfig::default()
        };
        Ok(Contents { layers, config })
    }

    /// A layer's tar stream, decompressed when it is gzip or zstd.
    pub fn layer(&self, name: &str) -> Result<Box<dyn Read>, ExtractError> {
        let mut reader = BufReader::new(self.reader(name)?);
        let head = reader.fill_buf().map_err(malformed)?;
        if head.starts_with(&[0x1f, 0x8b]) {
            return Ok(Box::new(flate2::read::GzDecoder::new(reader)));
        }
        if head.starts_with(&[0x28, 0xb5, 0x2f, 0xfd]) {
            return Ok(Box::new(super::zstd::Frames::new(reader)));
        }
        Ok(Box::new(reader))
    }
}
