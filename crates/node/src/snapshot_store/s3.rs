//! Snapshots in S3-compatible object storage (`object_store`'s S3 client).
//!
//! Layout under the bucket: `<prefix>/snapshots/<id>/files/<relative path>`
//! for every file of the snapshot's directory, and
//! `<prefix>/snapshots/<id>/manifest.json` (written last) listing each file's
//! path, size and SHA-256, and the snapshot's data key sealed by the node's
//! key ring. Every object holds its file encrypted in chunks (`seal.rs`):
//! the store never sees plaintext. The same layout under `<prefix>/images/`
//! keeps custom images' packed root filesystems ([`S3Store::for_images`]).

use super::seal::{DataKey, SealError, TAG};
use super::{staging_dir, SnapshotStore, SnapshotStoreError, Uploaded, MANIFEST};
use futures::StreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder};
use object_store::path::Path as ObjectPath;
use object_store::{ClientOptions, ObjectStore, PutPayload, RetryConfig, WriteMultipart};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use uuid::Uuid;

/// Plaintext bytes per sealed chunk. Files up to one chunk are one PUT;
/// larger ones a multipart upload.
pub(crate) const PART: usize = 8 << 20;
/// Parts of one file in flight at once.
const PARTS_IN_FLIGHT: usize = 4;
/// Format of the manifest.
const MANIFEST_FORMAT: u32 = 2;
/// Largest manifest read back (it lists a handful of files).
const MANIFEST_MAX: usize = 1 << 20;

/// Where and how to reach the object store.
#[derive(Clone, Default)]
pub struct S3Config {
    /// Bucket name.
    pub bucket: String,
    /// Key prefix (no leading or trailing `/`; may be empty).
    pub prefix: String,
    /// Endpoint URL of an S3-compatible server (`http://127.0.0.1:9000`);
    /// `None`: AWS for the region.
    pub endpoint: Option<String>,
    /// Region (`us-east-1` for most S3-compatible servers).
    pub region: String,
    /// Access key id (`None`: the client's own lookup, e.g. instance metadata).
    pub access_key_id: Option<String>,
    /// Secret access key.
    pub secret_access_key: Option<String>,
    /// Session token of temporary credentials.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for S3Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Config")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("region", &self.region)
            .field("access_key_id", &self.access_key_id)
            .field(
                "secret_access_key",
                &self.secret_access_key.as_ref().map(|_| "***"),
            )
            .field("session_token", &self.session_token.as_ref().map(|_| "***"))
            .finish()
    }
}

/// One file of a snapshot, as the manifest records it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct ManifestFile {
    /// Path relative to the snapshot's directory, `/`-separated.
    path: String,
    /// Plaintext bytes.
    size: u64,
    /// SHA-256 of the plaintext, lowercase hex.
    sha256: String,
}

/// Bytes of the object that holds `size` plaintext bytes: one tag per chunk
/// (an empty file is one empty chunk).
fn stored_size(size: u64) -> u64 {
    let chunks = size.div_ceil(PART as u64).max(1);
    size + chunks * TAG as u64
}

#[derive(Debug, Serialize, Deserialize)]
struct Manifest {
    format: u32,
    snapshot: Uuid,
    /// The data key sealed by the key ring (hex).
    key: String,
    files: Vec<ManifestFile>,
}

/// Snapshot files in an S3 bucket.
pub struct S3Store {
    client: Arc<AmazonS3>,
    config: S3Config,
    /// Seals and opens each snapshot's data key.
    keys: sbx_secrets::KeyRing,
    /// The key segment after the prefix: `snapshots` or `images`.
    kind: &'static str,
    /// One fetch per snapshot at a time (this process).
    fetches: Mutex<HashMap<Uuid, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for S3Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Store")
            .field("config", &self.config)
            .finish()
    }
}

impl S3Store {
    /// A client for `config` (path-style requests; plain HTTP allowed for an
    /// explicit endpoint, e.g. a server on loopback).
    pub fn new(
        config: S3Config,
        keys: sbx_secrets::KeyRing,
    ) -> Result<S3Store, SnapshotStoreError> {
        let client = Self::build_client(&config)?;
        Ok(S3Store {
            client: Arc::new(client),
            config,
            keys,
            kind: "snapshots",
            fetches: Mutex::new(HashMap::new()),
        })
    }

    /// The same bucket and prefix for images: objects go under
    /// `<prefix>/images/<id>/` instead of `<prefix>/snapshots/<id>/`.
    pub fn for_images(
        config: S3Config,
        keys: sbx_secrets::KeyRing,
    ) -> Result<S3Store, SnapshotStoreError> {
        Ok(S3Store {
            kind: "images",
            ..S3Store::new(config, keys)?
        })
    }

    /// The S3 client of `config` (no traffic; errors are configuration errors).
    pub(crate) fn build_client(config: &S3Config) -> Result<AmazonS3, SnapshotStoreError> {
        let mut builder = AmazonS3Builder::new()
            .with_bucket_name(&config.bucket)
            .with_region(&config.region)
            .with_virtual_hosted_style_request(false)
            // A few quick retries: an unreachable endpoint fails a snapshot in
            // seconds, not after the client's default three minutes.
            .with_retry(RetryConfig {
                max_retries: 3,
                retry_timeout: Duration::from_secs(20),
                ..RetryConfig::default()
            })
            .with_client_options(
                ClientOptions::new()
                    .with_connect_timeout(Duration::from_secs(5))
                    .with_timeout(Duration::from_secs(300))
                    .with_allow_http(true),
            );
        if let Some(endpoint) = &config.endpoint {
            builder = builder.with_endpoint(endpoint);
        }
        if let Some(key) = &config.access_key_id {
            builder = builder.with_access_key_id(key);
        }
        if let Some(secret) = &config.secret_access_key {
            builder = builder.with_secret_access_key(secret);
        }
        if let Some(token) = &config.session_token {
            builder = builder.with_token(token);
        }
        builder
            .build()
            .map_err(|e| SnapshotStoreError::Config(e.to_string()))
    }

    /// The client itself (tests use it to damage objects on purpose).
    pub fn client(&self) -> Arc<dyn ObjectStore> {
        self.client.clone()
    }

    /// `<prefix>/snapshots/<id>` (or `<prefix>/images/<id>`) as a string key.
    pub fn snapshot_prefix(&self, id: Uuid) -> String {
        if self.config.prefix.is_empty() {
            format!("{}/{id}", self.kind)
        } else {
            format!("{}/{}/{id}", self.config.prefix, self.kind)
        }
    }

    fn key(&self, id: Uuid, rest: &str) -> ObjectPath {
        ObjectPath::from(format!("{}/{rest}", self.snapshot_prefix(id)))
    }

    /// Key of one file of the snapshot.
    pub fn file_key(&self, id: Uuid, relative: &str) -> String {
        format!("{}/files/{relative}", self.snapshot_prefix(id))
    }

    fn lock_for(&self, id: Uuid) -> Arc<tokio::sync::Mutex<()>> {
        self.fetches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(id)
            .or_default()
            .clone()
    }

    async fn upload_file(
        &self,
        id: Uuid,
        index: u32,
        relative: &str,
        file: &Path,
        key: &DataKey,
    ) -> Result<ManifestFile, SnapshotStoreError> {
        let location = self.key(id, &format!("files/{relative}"));
        let what = || format!("uploading {relative}");
        let sealing = |e: SealError| SnapshotStoreError::Io {
            context: format!("encrypting {relative}"),
            source: std::io::Error::other(e),
        };
        let mut f = tokio::fs::File::open(file)
            .await
            .map_err(SnapshotStoreError::io(format!(
                "opening {}",
                file.display()
            )))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut writer: Option<WriteMultipart> = None;
        let mut current = read_chunk(&mut f, file).await?;
        let mut chunk = 0u64;
        let result: Result<(), SnapshotStoreError> = async {
            loop {
                // Read ahead: the last chunk is sealed as such.
                let next = if current.len() == PART {
                    read_chunk(&mut f, file).await?
                } else {
                    Vec::new()
                };
                let last = next.is_empty();
                hasher.update(&current);
                size += current.len() as u64;
                let sealed = key.seal(index, chunk, last, &current).map_err(sealing)?;
                if last && writer.is_none() {
                    // The whole file is one chunk: one PUT.
                    self.client
                        .put(&location, PutPayload::from(sealed))
                        .await
                        .map_err(SnapshotStoreError::remote(what()))?;
                    return Ok(());
                }
                let w = match &mut writer {
                    Some(w) => w,
                    None => {
                        let upload = self
                            .client
                            .put_multipart(&location)
                            .await
                            .map_err(SnapshotStoreError::remote(what()))?;
                        writer.insert(WriteMultipart::new_with_chunk_size(upload, PART))
                    }
                };
                w.wait_for_capacity(PARTS_IN_FLIGHT)
                    .await
                    .map_err(SnapshotStoreError::remote(what()))?;
                w.write(&sealed);
                if last {
                    return Ok(());
                }
                current = next;
                chunk += 1;
            }
        }
        .await;
        match (result, writer) {
            (Ok(()), Some(w)) => {
                w.finish()
                    .await
                    .map_err(SnapshotStoreError::remote(what()))?;
            }
            (Ok(()), None) => {}
            (Err(e), Some(w)) => {
                let _ = w.abort().await;
                return Err(e);
            }
            (Err(e), None) => return Err(e),
        }
        Ok(ManifestFile {
            path: relative.to_string(),
            size,
            sha256: hex::encode(hasher.finalize()),
        })
    }

    async fn read_manifest(&self, id: Uuid) -> Result<Manifest, SnapshotStoreError> {
        let location = self.key(id, MANIFEST);
        let got = match self.client.get(&location).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(SnapshotStoreError::Missing {
                    id,
                    place: "object storage",
                    what: format!("no manifest at {location} (never uploaded, or deleted)"),
                })
            }
            Err(e) => return Err(SnapshotStoreError::remote("reading the manifest")(e)),
        };
        if got.meta.size as usize > MANIFEST_MAX {
            return Err(SnapshotStoreError::Corrupt {
                id,
                what: format!("the manifest is {} bytes", got.meta.size),
            });
        }
        let bytes = got
            .bytes()
            .await
            .map_err(SnapshotStoreError::remote("reading the manifest"))?;
        let manifest: Manifest =
            serde_json::from_slice(&bytes).map_err(|e| SnapshotStoreError::Corrupt {
                id,
                what: format!("the manifest does not parse: {e}"),
            })?;
        if manifest.format != MANIFEST_FORMAT || manifest.snapshot != id {
            return Err(SnapshotStoreError::Corrupt {
                id,
                what: format!(
                    "the manifest is format {} of snapshot {}",
                    manifest.format, manifest.snapshot
                ),
            });
        }
        for f in &manifest.files {
            if !safe_relative(&f.path) {
                return Err(SnapshotStoreError::Corrupt {
                    id,
                    what: format!("the manifest names an unsafe path {:?}", f.path),
                });
            }
        }
        Ok(manifest)
    }

    /// Downloads one file into `target`, decrypting each chunk and checking
    /// size and SHA-256.
    async fn download_file(
        &self,
        id: Uuid,
        index: u32,
        file: &ManifestFile,
        target: &Path,
        key: &DataKey,
    ) -> Result<(), SnapshotStoreError> {
        let location = self.key(id, &format!("files/{}", file.path));
        let corrupt = |what: String| SnapshotStoreError::Corrupt { id, what };
        let got = match self.client.get(&location).await {
            Ok(got) => got,
            Err(object_store::Error::NotFound { .. }) => {
                return Err(SnapshotStoreError::Missing {
                    id,
                    place: "object storage",
                    what: format!("the manifest names {} but {location} is absent", file.path),
                })
            }
            Err(e) => {
                return Err(SnapshotStoreError::remote(format!(
                    "downloading {}",
                    file.path
                ))(e))
            }
        };
        let expected = stored_size(file.size);
        if got.meta.size as u64 != expected {
            return Err(corrupt(format!(
                "{} is {} bytes in the store, {expected} expected",
                file.path, got.meta.size
            )));
        }
        if let Some(parent) = target.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(SnapshotStoreError::io(format!(
                    "creating {}",
                    parent.display()
                )))?;
        }
        let mut out = tokio::fs::File::create(target)
            .await
            .map_err(SnapshotStoreError::io(format!(
                "creating {}",
                target.display()
            )))?;
        let mut hasher = Sha256::new();
        let mut size = 0u64;
        let mut received = 0u64;
        let mut chunk = 0u64;
        let sealed_len = PART + TAG;
        let mut buf: Vec<u8> = Vec::with_capacity(sealed_len);
        let mut stream = got.into_stream();
        loop {
            let next = stream.next().await;
            let at_end = next.is_none();
            if let Some(bytes) = next {
                let bytes = bytes.map_err(SnapshotStoreError::remote(format!(
                    "downloading {}",
                    file.path
                )))?;
                received += bytes.len() as u64;
                if received > expected {
                    return Err(corrupt(format!(
                        "{} is longer than its manifest says",
                        file.path
                    )));
                }
                buf.extend_from_slice(&bytes);
            }
            // A full chunk with more bytes after it is not the last one; the
            // last is opened at the end of the stream.
            while buf.len() > sealed_len || (at_end && !buf.is_empty()) {
                let take = buf.len().min(sealed_len);
                let last = at_end && take == buf.len();
                let plain = key
                    .open(index, chunk, last, &buf[..take])
                    .map_err(|e| corrupt(format!("{}: {e}", file.path)))?;
                buf.drain(..take);
                hasher.update(&plain);
                size += plain.len() as u64;
                out.write_all(&plain)
                    .await
                    .map_err(SnapshotStoreError::io(format!(
                        "writing {}",
                        target.display()
                    )))?;
                chunk += 1;
                if last {
                    break;
                }
            }
            if at_end {
                break;
            }
        }
        if size != file.size {
            return Err(corrupt(format!(
                "{} has {size} bytes, the manifest says {}",
                file.path, file.size
            )));
        }
        let sha = hex::encode(hasher.finalize());
        if sha != file.sha256 {
            return Err(corrupt(format!(
                "{} has SHA-256 {sha}, the manifest says {}",
                file.path, file.sha256
            )));
        }
        out.sync_all()
            .await
            .map_err(SnapshotStoreError::io(format!(
                "syncing {}",
                target.display()
            )))?;
        Ok(())
    }

    async fn fetch_into(&self, id: Uuid, staging: &Path) -> Result<(), SnapshotStoreError> {
        let manifest = self.read_manifest(id).await?;
        if manifest.files.is_empty() {
            return Err(SnapshotStoreError::Corrupt {
                id,
                what: "the manifest lists no files".into(),
            });
        }
        let key = DataKey::unwrap(id, &manifest.key, &self.keys).map_err(|e| {
            SnapshotStoreError::Corrupt {
                id,
                what: format!(
                    "{e} (another cluster's snapshot, or a secret key not given to this node?)"
                ),
            }
        })?;
        for (index, file) in manifest.files.iter().enumerate() {
            let index = u32::try_from(index).map_err(|_| SnapshotStoreError::Corrupt {
                id,
                what: "the manifest lists too many files".into(),
            })?;
            self.download_file(id, index, file, &staging.join(&file.path), &key)
                .await?;
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl SnapshotStore for S3Store {
    async fn upload(&self, id: Uuid, dir: &Path) -> Result<Uploaded, SnapshotStoreError> {
        let files = list_files(dir).await?;
        let sealing = |e: SealError| SnapshotStoreError::Io {
            context: "sealing the snapshot's data key".into(),
            source: std::io::Error::other(e),
        };
        let key = DataKey::generate(id).map_err(sealing)?;
        let wrapped = key.wrap(&self.keys).map_err(sealing)?;
        let mut entries = Vec::with_capacity(files.len());
        for (index, (relative, path)) in files.iter().enumerate() {
            let index = u32::try_from(index).map_err(|_| SnapshotStoreError::Io {
                context: format!("listing {}", dir.display()),
                source: std::io::Error::other("too many files"),
            })?;
            entries.push(self.upload_file(id, index, relative, path, &key).await?);
        }
        let bytes = entries.iter().map(|f| stored_size(f.size)).sum();
        let manifest = Manifest {
            format: MANIFEST_FORMAT,
            snapshot: id,
            key: wrapped,
            files: entries,
        };
        let body = serde_json::to_vec_pretty(&manifest).map_err(|e| SnapshotStoreError::Io {
            context: "encoding the manifest".into(),
            source: std::io::Error::other(e),
        })?;
        // Last: its presence says every file above is in place.
        self.client
            .put(&self.key(id, MANIFEST), PutPayload::from(body))
            .await
            .map_err(SnapshotStoreError::remote("writing the manifest"))?;
        Ok(Uploaded {
            files: manifest.files.len(),
            bytes,
        })
    }

    async fn fetch(&self, id: Uuid, dir: &Path) -> Result<(), SnapshotStoreError> {
        let lock = self.lock_for(id);
        let _fetching = lock.lock().await;
        if tokio::fs::metadata(dir).await.is_ok_and(|m| m.is_dir()) {
            return Ok(());
        }
        let staging = staging_dir(id, dir);
        // Left by a fetch that died with its process.
        remove_dir_if_present(&staging).await?;
        tokio::fs::create_dir_all(&staging)
            .await
            .map_err(SnapshotStoreError::io(format!(
                "creating {}",
                staging.display()
            )))?;
        let started = std::time::Instant::now();
        let fetched = self.fetch_into(id, &staging).await;
        let result = match fetched {
            Ok(()) => tokio::fs::rename(&staging, dir)
                .await
                .map_err(SnapshotStoreError::io(format!(
                    "renaming the fetched snapshot to {}",
                    dir.display()
                ))),
            Err(e) => Err(e),
        };
        if result.is_err() {
            let _ = tokio::fs::remove_dir_all(&staging).await;
        } else {
            tracing::info!(snapshot = %id, ms = started.elapsed().as_millis() as u64, "snapshot fetched from object storage");
        }
        drop(_fetching);
        drop(lock);
        // Forget locks nobody waits on (a waiter holds its own reference).
        self.fetches
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|_, l| Arc::strong_count(l) > 1);
        result
    }

    async fn delete(&self, id: Uuid) -> Result<(), SnapshotStoreError> {
        // The manifest first: a delete cut short leaves a snapshot that reads
        // as missing, never one that reads as whole and is not.
        match self.client.delete(&self.key(id, MANIFEST)).await {
            Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
            Err(e) => return Err(SnapshotStoreError::remote("deleting the manifest")(e)),
        }
        let prefix = ObjectPath::from(format!("{}/", self.snapshot_prefix(id)));
        let listed: Vec<_> = self.client.list(Some(&prefix)).collect().await;
        for meta in listed {
            let meta =
                meta.map_err(SnapshotStoreError::remote("listing the snapshot's objects"))?;
            match self.client.delete(&meta.location).await {
                Ok(()) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => {
                    return Err(SnapshotStoreError::remote(format!(
                        "deleting {}",
                        meta.location
                    ))(e))
                }
            }
        }
        Ok(())
    }

    fn describe(&self) -> String {
        if self.config.prefix.is_empty() {
            format!("s3://{}", self.config.bucket)
        } else {
            format!("s3://{}/{}", self.config.bucket, self.config.prefix)
        }
    }
}

/// Reads up to [`PART`] bytes (less only at the end of the file).
async fn read_chunk(f: &mut tokio::fs::File, path: &Path) -> Result<Vec<u8>, SnapshotStoreError> {
    let mut buf = vec![0u8; PART];
    let mut filled = 0;
    while filled < PART {
        let n = f
            .read(&mut buf[filled..])
            .await
            .map_err(SnapshotStoreError::io(format!(
                "reading {}",
                path.display()
            )))?;
        if n == 0 {
            break;
        }
        filled += n;
    }
    buf.truncate(filled);
    Ok(buf)
}

/// Every regular file under `dir`, with its `/`-separated path relative to it.
async fn list_files(dir: &Path) -> Result<Vec<(String, PathBuf)>, SnapshotStoreError> {
    let mut out = Vec::new();
    let mut pending = vec![(String::new(), dir.to_path_buf())];
    while let Some((rel, path)) = pending.pop() {
        let mut entries = tokio::fs::read_dir(&path)
            .await
            .map_err(SnapshotStoreError::io(format!(
                "listing {}",
                path.display()
            )))?;
        while let Some(entry) =
            entries
                .next_entry()
                .await
                .map_err(SnapshotStoreError::io(format!(
                    "listing {}",
                    path.display()
                )))?
        {
            let name = entry.file_name().to_string_lossy().into_owned();
            let child_rel = if rel.is_empty() {
                name
            } else {
                format!("{rel}/{name}")
            };
            let kind = entry
                .file_type()
                .await
                .map_err(SnapshotStoreError::io(format!(
                    "listing {}",
                    path.display()
                )))?;
            if kind.is_dir() {
                pending.push((child_rel, entry.path()));
            } else if kind.is_file() {
                out.push((child_rel, entry.path()));
            }
        }
    }
    out.sort();
    Ok(out)
}

/// A manifest path that stays inside the snapshot's directory.
fn safe_relative(path: &str) -> bool {
    !path.is_empty()
        && path.len() <= 1024
        && !path.starts_with('/')
        && !path.contains('\\')
        && !path.chars().any(char::is_control)
        && path
            .split('/')
            .all(|p| !p.is_empty() && p != "." && p != "..")
}

async fn remove_dir_if_present(dir: &Path) -> Result<(), SnapshotStoreError> {
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(SnapshotStoreError::io(format!(
            "removing {}",
            dir.display()
        ))(e)),
    }
}

#[cfg(test)]
mod tests;
