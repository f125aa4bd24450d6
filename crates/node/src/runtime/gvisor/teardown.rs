//! Ending a sandbox: its host processes killed, runsc's state, cgroups and
//! the sandbox dir removed; and listing what this node has.

use super::{
    container_id, disk, parse_container_id, GvisorRuntime, CGROUP_PARENT, DELETE_TIMEOUT,
    KILL_PATIENCE,
};
use crate::runtime::RuntimeError;
use std::path::Path;
use uuid::Uuid;

impl GvisorRuntime {
    pub(super) async fn destroy_inner(&self, id: Uuid) -> Result<(), RuntimeError> {
        self.channels.set(id, None);
        let cid = container_id(id);
        // A frozen process takes SIGKILL only once thawed (cgroup v1).
        if let Err(e) = self.thaw_for_runsc(id).await {
            tracing::warn!(sandbox = %id, error = %e, "cannot thaw before destroy");
        }
        // Kill the sandbox's host processes first, then let runsc clean up.
        // `runsc delete --force` alone asks the Sentry to stop, and a Sentry
        // thrashing at its memory limit (a fork bomb whose stubs the OOM
        // killer keeps taking) did not answer within 60 s, leaving the sandbox
        // TERMINATING. It also covers a container runsc does not know (sbxd
        // died inside `runsc run`) whose processes are still there.
        let cgroup = crate::runtime::leftovers::CgroupOf::new(
            Path::new(sbx_runsc::cleanup::DEFAULT_CGROUP_MOUNT),
            CGROUP_PARENT,
            &cid,
        );
        let killed = crate::runtime::leftovers::kill_container_processes(
            &self.config.runsc_root,
            &cid,
            &cgroup,
            KILL_PATIENCE,
        )
        .await;
        tracing::debug!(sandbox = %id, ?killed, "sandbox processes killed");
        if killed.remaining > 0 {
            return Err(RuntimeError::Unkillable(killed.remaining));
        }
        // With every process gone, runsc only removes files; its own state
        // files, cgroups and the sandbox dir are removed below anyway, so a
        // runsc that fails or hangs here must not keep the sandbox alive.
        let delete = self.runsc.clone().with_timeout(Some(DELETE_TIMEOUT));
        match delete.delete(&cid, true).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => {
                tracing::warn!(sandbox = %id, error = %e, "runsc delete failed after every process was gone; removing its state directly");
            }
        }
        crate::runtime::leftovers::remove_state_files(&self.config.runsc_root, &cid);
        sbx_runsc::cleanup::remove_cgroups(
            Path::new(sbx_runsc::cleanup::DEFAULT_CGROUP_MOUNT),
            CGROUP_PARENT,
            |name| name == cid,
        );
        remove_sandbox_dir(&self.dir(id)).await
    }

    pub(super) async fn list_inner(&self) -> Result<Vec<Uuid>, RuntimeError> {
        // `runsc list` asks every sandbox for its state and would wait
        // forever on a sleeping one.
        self.thaw_all().await;
        let mut ids: Vec<Uuid> = self
            .runsc
            .list()
            .await?
            .into_iter()
            .filter_map(|c| parse_container_id(&c.id))
            .collect();
        if let Ok(mut entries) = tokio::fs::read_dir(&self.config.sandboxes_dir).await {
            while let Ok(Some(e)) = entries.next_entry().await {
                if let Some(id) = e.file_name().to_str().and_then(|s| Uuid::parse_str(s).ok()) {
                    ids.push(id);
                }
            }
        }
        ids.sort();
        ids.dedup();
        Ok(ids)
    }
}

/// Unmounts the sandbox's disk (and anything else mounted below its dir),
/// then removes the dir. Unmounting first matters: removing a dir with a live
/// mount below it deletes the files inside the mount and then fails (EBUSY),
/// leaking the mount and its loop device. Always done, even with the limit
/// off, so that a restart with `--sandbox-disk-mb 0` still cleans old mounts.
pub(super) async fn remove_sandbox_dir(dir: &Path) -> Result<(), RuntimeError> {
    let target = dir.to_path_buf();
    tokio::task::spawn_blocking(move || disk::unmount_under(&target))
        .await
        .map_err(|e| RuntimeError::Io(std::io::Error::other(e.to_string())))??;
    match tokio::fs::remove_dir_all(dir).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(e.into()),
    }
}
