//! Packages, versions and builds.

use super::{now_ms, opt_time, time, SqliteStore};
use crate::model::{Build, BuildStatus, Definition, Package, PackageVersion};
use crate::store::{NewPackageVersion, StoreError, VersionDeletion};
use rusqlite::{params, OptionalExtension, Row};

fn version_from_row(row: &Row<'_>) -> rusqlite::Result<(PackageVersion, Option<String>)> {
    Ok((
        PackageVersion {
            name: row.get(0)?,
            version: row.get(1)?,
            sha256: row.get(2)?,
            size: row.get::<_, i64>(3)?.max(0) as u64,
            entry: row.get(4)?,
            created_at: time(row, 5)?,
            build_id: row.get(6)?,
            definition: None,
        },
        row.get(7)?,
    ))
}

fn with_definition(
    (mut v, def): (PackageVersion, Option<String>),
) -> Result<PackageVersion, StoreError> {
    v.definition = match def {
        None => None,
        Some(text) => Some(serde_json::from_str::<Definition>(&text)?),
    };
    Ok(v)
}

const VERSION_COLUMNS: &str =
    "name, version, sha256, size, entry, created_at, build_id, definition";

fn build_from_row(row: &Row<'_>) -> rusqlite::Result<(Build, String)> {
    let status: String = row.get(4)?;
    Ok((
        Build {
            id: row.get(0)?,
            name: row.get(1)?,
            version: row.get(2)?,
            status: BuildStatus::Queued,
            log: row.get(3)?,
            artifact_dir: row.get(5)?,
            failure: row.get(6)?,
            created_at: time(row, 7)?,
            finished_at: opt_time(row, 8)?,
            node_id: row.get(9)?,
        },
        status,
    ))
}

fn with_status((mut b, status): (Build, String)) -> Result<Build, StoreError> {
    b.status = BuildStatus::parse(&status)?;
    Ok(b)
}

const BUILD_COLUMNS: &str =
    "id, name, version, log, status, artifact_dir, failure, created_at, finished_at, node_id";

impl super::super::Packages for SqliteStore {
    fn insert_package_version(
        &self,
        workspace: &str,
        v: &NewPackageVersion,
    ) -> Result<PackageVersion, StoreError> {
        let now = now_ms();
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.execute(
            "INSERT OR IGNORE INTO packages (workspace, name, created_at) VALUES (?1, ?2, ?3)",
            params![workspace, v.name, now],
        )?;
        let inserted = tx.execute(
            "INSERT OR IGNORE INTO package_versions (workspace, name, version, sha256, size, entry, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![workspace, v.name, v.version, v.sha256, v.size as i64, v.entry, now],
        )?;
        tx.commit()?;
        if inserted == 0 {
            return Err(StoreError::Exists("package version"));
        }
        drop(conn);
        self.get_package_version(workspace, &v.name, &v.version)
    }

    fn get_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<PackageVersion, StoreError> {
        let conn = self.lock();
        let row = conn
            .query_row(
                &format!("SELECT {VERSION_COLUMNS} FROM package_versions WHERE workspace = ?1 AND name = ?2 AND version = ?3"),
                params![workspace, name, version],
                version_from_row,
            )
            .optional()?
            .ok_or(StoreError::NotFound("package version"))?;
        with_definition(row)
    }

    fn list_packages(&self, workspace: &str) -> Result<Vec<Package>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(
            "SELECT p.name, p.created_at, v.version FROM packages p
             LEFT JOIN package_versions v ON v.workspace = p.workspace AND v.name = p.name
             WHERE p.workspace = ?1 ORDER BY p.name, v.created_at, v.version",
        )?;
        let mut rows = stmt.query([workspace])?;
        let mut out: Vec<Package> = Vec::new();
        while let Some(row) = rows.next()? {
            let name: String = row.get(0)?;
            let version: Option<String> = row.get(2)?;
            if out.last().map(|p| p.name != name).unwrap_or(true) {
                out.push(Package {
                    name,
                    created_at: time(row, 1)?,
                    versions: Vec::new(),
                });
            }
            if let (Some(v), Some(p)) = (version, out.last_mut()) {
                p.versions.push(v);
            }
        }
        Ok(out)
    }

    fn list_package_versions(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Vec<PackageVersion>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {VERSION_COLUMNS} FROM package_versions WHERE workspace = ?1 AND name = ?2 ORDER BY created_at, version"
        ))?;
        let rows = stmt.query_map(params![workspace, name], version_from_row)?;
        rows.map(|r| with_definition(r?)).collect()
    }

    fn delete_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<VersionDeletion, StoreError> {
        let mut conn = self.lock();
        let tx = conn.transaction()?;
        tx.query_row(
            "SELECT 1 FROM package_versions WHERE workspace = ?1 AND name = ?2 AND version = ?3",
            params![workspace, name, version],
            |_| Ok(()),
        )
        .optional()?
        .ok_or(StoreError::NotFound("package version"))?;
        let users: Vec<String> = tx
            .prepare(
                "SELECT id FROM connections WHERE workspace = ?1 AND package = ?2 AND version = ?3
                 ORDER BY created_at",
            )?
            .query_map(params![workspace, name, version], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        if !users.is_empty() {
            return Ok(VersionDeletion::UsedBy(users));
        }
        let building: i64 = tx.query_row(
            "SELECT COUNT(*) FROM builds WHERE workspace = ?1 AND name = ?2 AND version = ?3
             AND status IN ('queued', 'running')",
            params![workspace, name, version],
            |r| r.get(0),
        )?;
        if building > 0 {
            return Ok(VersionDeletion::Building);
        }
        let build_ids: Vec<String> = tx
            .prepare("SELECT id FROM builds WHERE workspace = ?1 AND name = ?2 AND version = ?3")?
            .query_map(params![workspace, name, version], |r| r.get(0))?
            .collect::<Result<_, _>>()?;
        tx.execute(
            "DELETE FROM builds WHERE workspace = ?1 AND name = ?2 AND version = ?3",
            params![workspace, name, version],
        )?;
        tx.execute(
            "DELETE FROM package_versions WHERE workspace = ?1 AND name = ?2 AND version = ?3",
            params![workspace, name, version],
        )?;
        // A package without versions would list as an empty entry: it goes with its last one.
        tx.execute(
            "DELETE FROM packages WHERE workspace = ?1 AND name = ?2
             AND NOT EXISTS (SELECT 1 FROM package_versions WHERE workspace = ?1 AND name = ?2)",
            params![workspace, name],
        )?;
        tx.commit()?;
        Ok(VersionDeletion::Deleted { build_ids })
    }

    fn set_version_build(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
        build_id: &str,
        definition: &Definition,
    ) -> Result<(), StoreError> {
        let conn = self.lock();
        // A version's definition is immutable: a rebuild must describe the same one (checked
        // under the connection lock, so two concurrent builds cannot race past it).
        let stored: Option<Option<String>> = conn
            .query_row(
                "SELECT definition FROM package_versions
                 WHERE workspace = ?1 AND name = ?2 AND version = ?3",
                params![workspace, name, version],
                |r| r.get(0),
            )
            .optional()?;
        match stored {
            None => return Err(StoreError::NotFound("package version")),
            Some(Some(text)) if serde_json::from_str::<Definition>(&text)? != *definition => {
                return Err(StoreError::Exists("a different definition of this version"));
            }
            Some(_) => {}
        }
        let n = conn.execute(
            "UPDATE package_versions SET build_id = ?4, definition = ?5
             WHERE workspace = ?1 AND name = ?2 AND version = ?3",
            params![
                workspace,
                name,
                version,
                build_id,
                serde_json::to_string(definition)?
            ],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound("package version"));
        }
        Ok(())
    }

    fn insert_build(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Build, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let conn = self.lock();
        conn.execute(
            "INSERT INTO builds (id, workspace, name, version, status, created_at, node_id) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![id, workspace, name, version, BuildStatus::Queued.as_str(), now_ms(), self.node],
        )?;
        drop(conn);
        self.get_build(workspace, &id)
    }

    fn update_build(
        &self,
        workspace: &str,
        id: &str,
        status: BuildStatus,
        log: &str,
        artifact_dir: Option<&str>,
        failure: Option<&str>,
    ) -> Result<(), StoreError> {
        let finished = matches!(status, BuildStatus::Succeeded | BuildStatus::Failed).then(now_ms);
        let conn = self.lock();
        let n = conn.execute(
            "UPDATE builds SET status = ?3, log = ?4, artifact_dir = ?5, failure = ?6, finished_at = ?7
             WHERE workspace = ?1 AND id = ?2",
            params![workspace, id, status.as_str(), log, artifact_dir, failure, finished],
        )?;
        if n == 0 {
            return Err(StoreError::NotFound("build"));
        }
        Ok(())
    }

    fn get_build(&self, workspace: &str, id: &str) -> Result<Build, StoreError> {
        let conn = self.lock();
        let row = conn
            .query_row(
                &format!("SELECT {BUILD_COLUMNS} FROM builds WHERE workspace = ?1 AND id = ?2"),
                params![workspace, id],
                build_from_row,
            )
            .optional()?
            .ok_or(StoreError::NotFound("build"))?;
        with_status(row)
    }

    fn list_builds(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Vec<Build>, StoreError> {
        let conn = self.lock();
        let mut stmt = conn.prepare(&format!(
            "SELECT {BUILD_COLUMNS} FROM builds WHERE workspace = ?1 AND name = ?2 AND version = ?3 ORDER BY created_at DESC"
        ))?;
        let rows = stmt.query_map(params![workspace, name, version], build_from_row)?;
        rows.map(|r| with_status(r?)).collect()
    }

    fn fail_unfinished_builds(&self) -> Result<usize, StoreError> {
        let conn = self.lock();
        Ok(conn.execute(
            "UPDATE builds SET status = 'failed', failure = 'the daemon restarted during the build', finished_at = ?1
             WHERE status IN ('queued', 'running') AND (node_id IS NULL OR node_id = ?2)",
            params![now_ms(), self.node],
        )?)
    }
}
