//! What the E2B API adds to a sandbox (template, metadata, end time, auto-pause,
//! envd and traffic access tokens): a row of the store's `e2b_sandboxes` table
//! per sandbox ([`sbx_store::E2bRecord`]), so that every node of a cluster sees
//! the same fields and the timeout sweep acts once.
//!
//! No cache: a node would not see another's writes. Before the store held them,
//! each node kept them as one JSON file per sandbox in `DATA_DIR/e2b/`;
//! [`import_files`] moves those into the store once, at start.

pub use sbx_store::E2bRecord;

use chrono::{DateTime, Utc};
use sbx_store::{Store, StoreError};
use serde::Deserialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use uuid::Uuid;

/// Where the record files of earlier versions go once imported.
pub const IMPORTED_DIR: &str = "e2b.imported";

/// Why the record files of an earlier version could not be imported.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    /// The directory could not be read or renamed.
    #[error("E2B record files in {path}: {source}")]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// The failure.
        source: std::io::Error,
    },
    /// The store refused a record.
    #[error("importing E2B records into the store: {0}")]
    Store(#[from] StoreError),
}

/// What [`import_files`] did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Imported {
    /// Records written to the store.
    pub written: usize,
    /// Records the store held already (an import interrupted before its rename).
    pub present: usize,
    /// Files that did not parse (their sandboxes show E2B defaults).
    pub skipped: usize,
}

/// A record file as earlier versions wrote it (camelCase JSON).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
struct RecordFile {
    sandbox_id: Uuid,
    workspace: String,
    template_id: String,
    #[serde(default)]
    metadata: BTreeMap<String, String>,
    end_at: DateTime<Utc>,
    #[serde(default)]
    auto_pause: bool,
    envd_access_token: String,
    #[serde(default = "yes")]
    allow_internet_access: bool,
    #[serde(default = "yes")]
    allow_public_traffic: bool,
    #[serde(default)]
    traffic_access_token: Option<String>,
}

fn yes() -> bool {
    true
}

impl From<RecordFile> for E2bRecord {
    fn from(f: RecordFile) -> Self {
        E2bRecord {
            sandbox_id: f.sandbox_id,
            workspace: f.workspace,
            template_id: f.template_id,
            metadata: f.metadata,
            end_at: f.end_at,
            auto_pause: f.auto_pause,
            envd_access_token: f.envd_access_token,
            allow_internet_access: f.allow_internet_access,
            allow_public_traffic: f.allow_public_traffic,
            traffic_access_token: f.traffic_access_token,
            generation: 0,
        }
    }
}

/// Imports the record files an earlier sbxd kept in `data_dir/e2b/` into the
/// store, then renames the directory to [`IMPORTED_DIR`] (kept for the operator
/// to remove). Idempotent: a record the store holds already is left as it is, so
/// an import cut short before the rename is finished by the next start. `None`
/// when there is nothing to import.
pub fn import_files(store: &dyn Store, data_dir: &Path) -> Result<Option<Imported>, ImportError> {
    let dir = data_dir.join("e2b");
    let io = |path: &Path| {
        let path = path.to_path_buf();
        move |source| ImportError::Io { path, source }
    };
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io(&dir)(e)),
    };
    let mut done = Imported::default();
    for entry in entries {
        let path = entry.map_err(io(&dir))?.path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let parsed = std::fs::read(&path)
            .map_err(|e| e.to_string())
            .and_then(|b| serde_json::from_slice::<RecordFile>(&b).map_err(|e| e.to_string()));
        match parsed {
            Ok(file) => {
                if store.create_e2b_record(&E2bRecord::from(file))? {
                    done.written += 1;
                } else {
                    done.present += 1;
                }
            }
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "skipping an unreadable E2B record file");
                done.skipped += 1;
            }
        }
    }
    let mut target = data_dir.join(IMPORTED_DIR);
    if target.exists() {
        target = data_dir.join(format!("{IMPORTED_DIR}.{}", Utc::now().timestamp_millis()));
    }
    std::fs::rename(&dir, &target).map_err(io(&dir))?;
    Ok(Some(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(id: Uuid) -> String {
        format!(
            r#"{{"sandboxId":"{id}","workspace":"default/production","templateId":"base",
              "metadata":{{"k":"v w"}},"endAt":"2026-01-02T03:04:05Z","autoPause":true,
              "envdAccessToken":"t","allowInternetAccess":false}}"#
        )
    }

    #[test]
    fn record_files_are_imported_once_and_the_directory_renamed() {
        let data = tempfile::tempdir().unwrap();
        let store = sbx_store::SqliteStore::in_memory().unwrap();
        assert_eq!(import_files(&store, data.path()).unwrap(), None, "no dir");
        let dir = data.path().join("e2b");
        std::fs::create_dir(&dir).unwrap();
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        std::fs::write(dir.join(format!("{a}.json")), file(a)).unwrap();
        std::fs::write(dir.join(format!("{b}.json")), file(b)).unwrap();
        std::fs::write(dir.join(format!("{}.json", Uuid::new_v4())), b"{").unwrap();
        std::fs::write(dir.join("x.json.tmp"), b"{").unwrap();
        // b was imported by an earlier start that stopped before the rename.
        let mut earlier = E2bRecord::from(serde_json::from_str::<RecordFile>(&file(b)).unwrap());
        earlier.template_id = "kept".into();
        store.create_e2b_record(&earlier).unwrap();

        let done = import_files(&store, data.path()).unwrap().unwrap();
        assert_eq!(
            done,
            Imported {
                written: 1,
                present: 1,
                skipped: 1
            }
        );
        let got = store.get_e2b_record(a).unwrap().unwrap();
        assert_eq!(got.workspace, "default/production");
        assert_eq!(got.metadata.get("k").map(String::as_str), Some("v w"));
        assert!(got.auto_pause && !got.allow_internet_access);
        assert!(got.allow_public_traffic && got.traffic_access_token.is_none());
        assert_eq!(got.end_at.to_rfc3339(), "2026-01-02T03:04:05+00:00");
        assert_eq!(
            store.get_e2b_record(b).unwrap().unwrap().template_id,
            "kept"
        );
        assert!(!dir.exists());
        assert!(data
            .path()
            .join(IMPORTED_DIR)
            .join(format!("{a}.json"))
            .exists());
        // The next start finds nothing to import.
        assert_eq!(import_files(&store, data.path()).unwrap(), None);
    }
}
