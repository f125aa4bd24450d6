//! Intermediate build layers: what one filesystem step (RUN, COPY/ADD,
//! WORKDIR) changed in the build sandbox, kept on the host so that a later
//! build sharing a prefix of steps replays them instead of running them.
//!
//! A layer is found inside the sandbox, where the overlay's writes live: a
//! stamp file is touched before the step, and afterwards `find -cnewer`
//! lists what the step created or changed (ctime cannot be set by `tar -p`
//! or `touch`, so copied files with old mtimes count), tarred without
//! recursion; a listing of every path before and after gives the
//! deletions. Replaying a layer is `tar -x` of it, then `rm -rf` of its
//! deletions. Layers are files under `<images>/build-layers/`, named by
//! sha256(tenant, step key) so a tenant only ever replays its own.

use super::super::{Result, Service, ServiceError};
use sha2::{Digest, Sha256};
use std::collections::BTreeSet;
use std::path::PathBuf;
use tokio::io::AsyncReadExt;
use uuid::Uuid;

/// The stamp a step's changes are newer than.
const STAMP: &str = "/.sbx-build-stamp";
/// `find` over the guest's own files: not the kernel's, the runtime's, /tmp or the stamp.
const FIND: &str = "cd / && find . -xdev \\( -path ./proc -o -path ./sys -o -path ./dev \
    -o -path ./tmp -o -path ./.sbx -o -path ./.sbx-build-stamp \\) -prune -o";

/// The host files of one layer.
pub(super) struct LayerFiles {
    /// The tar of new and changed paths.
    pub tar: PathBuf,
    /// Deleted paths, NUL-separated.
    pub deleted: PathBuf,
}

impl Service {
    /// Where tenant `workspace`'s layer of step `key` lives.
    pub(super) fn layer_files(&self, workspace: &str, key: &str) -> LayerFiles {
        let dir = self
            .images
            .spool_path()
            .parent()
            .and_then(|p| p.parent())
            .map(|p| p.join("build-layers"))
            .unwrap_or_else(|| PathBuf::from("build-layers"));
        let name = hex::encode(Sha256::digest(format!("{workspace}\0{key}")));
        LayerFiles {
            tar: dir.join(format!("{name}.tar")),
            deleted: dir.join(format!("{name}.deleted")),
        }
    }

    /// Whether the layer exists (both files).
    pub(super) fn has_layer(&self, workspace: &str, key: &str) -> bool {
        let f = self.layer_files(workspace, key);
        f.tar.is_file() && f.deleted.is_file()
    }

    /// Every path of the guest's own files, and a fresh stamp for the next step.
    pub(super) async fn listing_and_stamp(&self, id: Uuid) -> Result<BTreeSet<String>> {
        let script = format!("{FIND} -print0 && touch {STAMP}");
        let out = self.guest_output(id, &script).await?;
        Ok(split_nul(&out))
    }

    /// After a step: stores what it changed as the layer of `key` and
    /// answers the new listing (a fresh stamp is set for the next step).
    pub(super) async fn capture_layer(
        &self,
        id: Uuid,
        workspace: &str,
        key: &str,
        before: &BTreeSet<String>,
    ) -> Result<BTreeSet<String>> {
        let changed = format!(
            "{FIND} -cnewer {STAMP} -print0 > /tmp/.sbx-changed && \
             tar -c -f - --numeric-owner --no-recursion --null -T /tmp/.sbx-changed"
        );
        let tar = self.guest_output(id, &changed).await?;
        let after = self.listing_and_stamp(id).await?;
        let mut deleted = Vec::new();
        for gone in before.difference(&after) {
            deleted.extend_from_slice(gone.as_bytes());
            deleted.push(0);
        }
        let files = self.layer_files(workspace, key);
        let write = async {
            if let Some(dir) = files.tar.parent() {
                tokio::fs::create_dir_all(dir).await?;
            }
            // Written beside, renamed into place: a layer that exists is whole.
            let tmp = files.tar.with_extension("tmp");
            tokio::fs::write(&tmp, &tar).await?;
            tokio::fs::write(&files.deleted, &deleted).await?;
            tokio::fs::rename(&tmp, &files.tar).await
        };
        write
            .await
            .map_err(|e| ServiceError::Internal(format!("storing a build layer: {e}")))?;
        Ok(after)
    }

    /// Replays the layer of `key` in the sandbox.
    pub(super) async fn apply_layer(&self, id: Uuid, workspace: &str, key: &str) -> Result<()> {
        let files = self.layer_files(workspace, key);
        let read = |p: PathBuf| async move {
            tokio::fs::read(&p)
                .await
                .map_err(|e| ServiceError::Internal(format!("reading a build layer: {e}")))
        };
        let (tar, deleted) = (read(files.tar).await?, read(files.deleted).await?);
        if !deleted.is_empty() {
            let argv = ["sh", "-c", "cd / && xargs -0 rm -rf --"]
                .map(String::from)
                .to_vec();
            self.root_exec(id, argv, deleted).await?;
        }
        let argv = ["tar", "-x", "-p", "--numeric-owner", "-C", "/", "-f", "-"]
            .map(String::from)
            .to_vec();
        self.root_exec(id, argv, tar).await
    }

    /// Removes the stamp (it must not end up in the image).
    pub(super) async fn drop_stamp(&self, id: Uuid) -> Result<()> {
        let argv = ["rm", "-f", STAMP].map(String::from).to_vec();
        self.root_exec(id, argv, Vec::new()).await
    }

    /// Runs a shell script as root in the sandbox and answers its stdout.
    async fn guest_output(&self, id: Uuid, script: &str) -> Result<Vec<u8>> {
        let argv = vec!["sh".to_string(), "-c".into(), script.to_string()];
        let mut child = self
            .runtime
            .spawn_exec(id, argv)
            .map_err(|e| ServiceError::Unavailable(format!("build layer: {e}")))?;
        drop(child.stdin.take());
        let mut out = Vec::new();
        if let Some(mut stdout) = child.stdout.take() {
            stdout
                .read_to_end(&mut out)
                .await
                .map_err(|e| ServiceError::Unavailable(format!("build layer: {e}")))?;
        }
        match child.wait().await {
            Ok(s) if s.success() => Ok(out),
            Ok(s) => Err(ServiceError::Unavailable(format!(
                "capturing a build layer failed in the sandbox ({s})"
            ))),
            Err(e) => Err(ServiceError::Internal(format!("build layer: {e}"))),
        }
    }
}

fn split_nul(bytes: &[u8]) -> BTreeSet<String> {
    bytes
        .split(|&b| b == 0)
        .filter(|p| !p.is_empty())
        .map(|p| String::from_utf8_lossy(p).into_owned())
        .collect()
}
