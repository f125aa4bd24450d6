//! Connection upgrades and package version deletion: moving a connection to another built
//! version of its package keeps its committed data only when that data still means the same.

use super::{ConnectService, ServiceError};
use crate::model::{Connection, Definition, SyncDefinition};
use crate::store::{VersionChange, VersionChangeOutcome, VersionDeletion};

/// Why a committed sync cannot move to the new definition; `None` when it can.
fn sync_change(
    name: &str,
    old: Option<&SyncDefinition>,
    new: Option<&SyncDefinition>,
) -> Option<String> {
    let new = match new {
        None => {
            return Some(format!(
                "sync {name:?} has committed data and is not in the new version"
            ))
        }
        Some(n) => n,
    };
    let old = old?;
    if old.mode != new.mode {
        return Some(format!(
            "sync {name:?} changes mode from {} to {}",
            old.mode.as_str(),
            new.mode.as_str()
        ));
    }
    if old.primary_key != new.primary_key {
        return Some(format!("sync {name:?} changes its primary key"));
    }
    None
}

/// The sync, or the webhook seen as a sync, whose records are kept under `name`: a webhook's
/// committed records bind its mode and key like a sync's.
fn dataset(d: &Definition, name: &str) -> Option<SyncDefinition> {
    d.sync(name).cloned().or_else(|| {
        d.webhook(name).map(|w| SyncDefinition {
            name: w.name.clone(),
            mode: w.mode,
            primary_key: w.primary_key.clone(),
        })
    })
}

impl ConnectService {
    /// Refuses a version change that would leave committed records or checkpoints meaning
    /// something else: a committed sync must exist in the new version with the same mode and
    /// primary key (merge upserts by the key; a replace or append dataset would change rules).
    /// Syncs that never committed may change freely. Returns the committed syncs it checked:
    /// the store makes the move only if they are still the same and no sync started since.
    pub(super) fn check_upgrade(
        &self,
        workspace: &str,
        c: &Connection,
        old: &Definition,
        new: &Definition,
        version: &str,
    ) -> Result<Vec<String>, ServiceError> {
        let busy = self
            .active_syncs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|(ws, id, _)| ws == workspace && *id == c.id);
        if busy {
            return Err(ServiceError::Conflict(
                "a sync of this connection is running; change the version when it ended".into(),
            ));
        }
        let committed = self.store.committed_syncs(workspace, &c.id)?;
        let problems: Vec<String> = committed
            .iter()
            .filter_map(|name| {
                let (before, after) = (dataset(old, name), dataset(new, name));
                sync_change(name, before.as_ref(), after.as_ref())
            })
            .collect();
        if problems.is_empty() {
            return Ok(committed);
        }
        Err(ServiceError::Conflict(format!(
            "cannot move the connection to {}@{version} and keep its committed data: {}; \
             create a new connection for that version instead",
            c.package,
            problems.join("; ")
        )))
    }

    /// Moves the connection as checked by [`Self::check_upgrade`], unless something changed
    /// since: another move, a sync that started, a sync that committed.
    pub(super) fn apply_upgrade(
        &self,
        workspace: &str,
        c: &Connection,
        change: &VersionChange,
    ) -> Result<(), ServiceError> {
        let why = match self
            .store
            .set_connection_version(workspace, &c.id, change)?
        {
            VersionChangeOutcome::Changed => return Ok(()),
            VersionChangeOutcome::VersionMoved(now) => format!(
                "the connection moved to {}@{now} meanwhile; nothing changed",
                c.package
            ),
            VersionChangeOutcome::SyncRunning => {
                "a sync of this connection started; change the version when it ended".to_string()
            }
            VersionChangeOutcome::CommittedChanged => {
                "a sync of this connection committed while the version change was checked; \
                 nothing changed, try again"
                    .to_string()
            }
        };
        Err(ServiceError::Conflict(why))
    }

    /// Deletes a package version nobody uses, with its builds and their artifacts. The
    /// content-addressed tarball stays: an upload of the same bytes may be reusing it right now.
    pub fn delete_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<(), ServiceError> {
        match self
            .store
            .delete_package_version(workspace, name, version)?
        {
            VersionDeletion::UsedBy(ids) => Err(ServiceError::Conflict(format!(
                "{name}@{version} is used by connection{} {}; move or delete {} first",
                if ids.len() == 1 { "" } else { "s" },
                ids.join(", "),
                if ids.len() == 1 { "it" } else { "them" }
            ))),
            VersionDeletion::Building => Err(ServiceError::Conflict(format!(
                "a build of {name}@{version} is running; delete the version when it ended"
            ))),
            VersionDeletion::Deleted { build_ids } => {
                // The rows are gone; leftover files only cost space, so failures are logged.
                for id in build_ids {
                    let dir = self.artifact_dir(&id);
                    if let Err(e) = std::fs::remove_dir_all(&dir) {
                        if e.kind() != std::io::ErrorKind::NotFound {
                            tracing::warn!(error = %e, dir = %dir.display(), "removing an artifact failed");
                        }
                    }
                }
                Ok(())
            }
        }
    }
}
