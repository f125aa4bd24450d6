//! What the E2B API adds to a sandbox (template, metadata, end time, auto-pause,
//! envd access token), kept beside the store as one JSON file per sandbox in
//! `DATA_DIR/e2b/`.
//!
//! Why files and not a store table (for now): this first slice must not change
//! the store schema that other work is migrating in parallel. The cost: these
//! fields are local to the node (cluster mode does not see them on another
//! node). Each write goes to a temporary file, is synced and renamed, so a
//! crash leaves either the old or the new record, never half of one.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use uuid::Uuid;

/// Why a record could not be read or written.
#[derive(Debug, thiserror::Error)]
pub enum RecordsError {
    /// The directory or a file could not be read or written.
    #[error("E2B records in {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// A record could not be encoded.
    #[error("encoding an E2B record: {0}")]
    Encode(#[from] serde_json::Error),
}

/// The E2B fields of one sandbox.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct E2bRecord {
    /// The sandbox (same id in every API).
    pub sandbox_id: Uuid,
    /// Its tenant scope (`workspace/env`).
    pub workspace: String,
    /// The template id the caller asked for (`base`, an alias, or a snapshot id).
    pub template_id: String,
    /// Caller metadata, filterable in list.
    pub metadata: BTreeMap<String, String>,
    /// When the E2B timeout ends the sandbox (destroys it, or pauses it with `auto_pause`).
    pub end_at: DateTime<Utc>,
    /// Pause instead of destroy at `end_at`.
    pub auto_pause: bool,
    /// The token envd requests will carry (`X-Access-Token`); envd is a later slice.
    pub envd_access_token: String,
    /// Whether the sandbox may reach the internet (as created).
    pub allow_internet_access: bool,
    /// Preview URLs of this sandbox need this in `e2b-traffic-access-token`
    /// (`network.allowPublicTraffic: false` at create); `None`: public.
    #[serde(default)]
    pub traffic_access_token: Option<String>,
}

/// The records of this node, in memory and on disk.
pub struct Records {
    dir: PathBuf,
    map: Mutex<HashMap<Uuid, E2bRecord>>,
}

impl Records {
    /// Opens (creating) `dir` and reads every record in it. A file that does not
    /// parse is skipped with a warning: its sandbox then shows E2B defaults.
    pub fn open(dir: &Path) -> Result<Records, RecordsError> {
        let io = |source| RecordsError::Io {
            path: dir.to_path_buf(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        let mut map = HashMap::new();
        for entry in std::fs::read_dir(dir).map_err(io)? {
            let path = entry.map_err(io)?.path();
            if path.extension().and_then(|e| e.to_str()) != Some("json") {
                continue;
            }
            let parsed = std::fs::read(&path)
                .map_err(|e| e.to_string())
                .and_then(|b| serde_json::from_slice::<E2bRecord>(&b).map_err(|e| e.to_string()));
            match parsed {
                Ok(r) => {
                    map.insert(r.sandbox_id, r);
                }
                Err(e) => {
                    tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable E2B record")
                }
            }
        }
        Ok(Records {
            dir: dir.to_path_buf(),
            map: Mutex::new(map),
        })
    }

    /// The record of a sandbox, if it has one.
    pub fn get(&self, id: Uuid) -> Option<E2bRecord> {
        self.lock().get(&id).cloned()
    }

    /// Every record (for the timeout sweep).
    pub fn all(&self) -> Vec<E2bRecord> {
        self.lock().values().cloned().collect()
    }

    /// Writes a record (durably), then makes it visible.
    pub fn put(&self, record: &E2bRecord) -> Result<(), RecordsError> {
        let bytes = serde_json::to_vec_pretty(record)?;
        let path = self.path(record.sandbox_id);
        let tmp = path.with_extension("json.tmp");
        let io = |source| RecordsError::Io {
            path: path.clone(),
            source,
        };
        {
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .mode_0600()
                .open(&tmp)
                .map_err(io)?;
            f.write_all(&bytes).map_err(io)?;
            f.sync_all().map_err(io)?;
        }
        std::fs::rename(&tmp, &path).map_err(io)?;
        self.lock().insert(record.sandbox_id, record.clone());
        Ok(())
    }

    /// Forgets a sandbox's record (its sandbox is gone).
    pub fn remove(&self, id: Uuid) -> Result<(), RecordsError> {
        let path = self.path(id);
        match std::fs::remove_file(&path) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(RecordsError::Io { path, source }),
        }
        self.lock().remove(&id);
        Ok(())
    }

    fn path(&self, id: Uuid) -> PathBuf {
        self.dir.join(format!("{id}.json"))
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Uuid, E2bRecord>> {
        self.map.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Opens record files readable by sbxd only: they hold the envd access token.
trait Mode0600 {
    fn mode_0600(&mut self) -> &mut Self;
}

impl Mode0600 for std::fs::OpenOptions {
    fn mode_0600(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(id: Uuid) -> E2bRecord {
        E2bRecord {
            sandbox_id: id,
            workspace: "default/production".into(),
            template_id: "base".into(),
            metadata: BTreeMap::from([("k".to_string(), "v w".to_string())]),
            end_at: Utc::now(),
            auto_pause: true,
            envd_access_token: "t".into(),
            traffic_access_token: None,
            allow_internet_access: true,
        }
    }

    #[test]
    fn records_survive_a_reopen_and_a_corrupt_file_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let records = Records::open(dir.path()).unwrap();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        records.put(&record(a)).unwrap();
        records.put(&record(b)).unwrap();
        records.remove(b).unwrap();
        std::fs::write(dir.path().join(format!("{}.json", Uuid::new_v4())), b"{").unwrap();
        let again = Records::open(dir.path()).unwrap();
        let mut want = record(a);
        want.end_at = records.get(a).unwrap().end_at;
        assert_eq!(again.get(a), Some(want));
        assert!(again.get(b).is_none());
        assert_eq!(again.all().len(), 1);
    }
}
