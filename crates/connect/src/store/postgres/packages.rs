//! Packages, versions and builds.

use super::{opt_time, time, unsigned, PostgresStore};
use crate::model::{Build, BuildStatus, Definition, Package, PackageVersion};
use crate::store::{NewPackageVersion, StoreError, VersionDeletion};
use chrono::Utc;
use postgres::{GenericClient, Row};

const VERSION_COLUMNS: &str =
    "name, version, sha256, size, entry, created_at, build_id, definition";

fn version_from_row(row: &Row) -> Result<PackageVersion, StoreError> {
    let definition: Option<String> = row.try_get(7)?;
    Ok(PackageVersion {
        name: row.try_get(0)?,
        version: row.try_get(1)?,
        sha256: row.try_get(2)?,
        size: unsigned(row, 3)?,
        entry: row.try_get(4)?,
        created_at: time(row, 5)?,
        build_id: row.try_get(6)?,
        definition: definition
            .map(|text| serde_json::from_str::<Definition>(&text))
            .transpose()?,
    })
}

const BUILD_COLUMNS: &str =
    "id, name, version, log, status, artifact_dir, failure, created_at, finished_at, node_id";

fn build_from_row(row: &Row) -> Result<Build, StoreError> {
    let status: String = row.try_get(4)?;
    Ok(Build {
        id: row.try_get(0)?,
        name: row.try_get(1)?,
        version: row.try_get(2)?,
        status: BuildStatus::parse(&status)?,
        log: row.try_get(3)?,
        artifact_dir: row.try_get(5)?,
        failure: row.try_get(6)?,
        created_at: time(row, 7)?,
        finished_at: opt_time(row, 8)?,
        node_id: row.try_get(9)?,
    })
}

fn get_version(
    c: &mut impl GenericClient,
    workspace: &str,
    name: &str,
    version: &str,
) -> Result<PackageVersion, StoreError> {
    let row = c
        .query_opt(
            &format!(
                "SELECT {VERSION_COLUMNS} FROM connect_package_versions
                 WHERE workspace = $1 AND name = $2 AND version = $3"
            ),
            &[&workspace, &name, &version],
        )?
        .ok_or(StoreError::NotFound("package version"))?;
    version_from_row(&row)
}

fn get_build(c: &mut impl GenericClient, workspace: &str, id: &str) -> Result<Build, StoreError> {
    let row = c
        .query_opt(
            &format!("SELECT {BUILD_COLUMNS} FROM connect_builds WHERE workspace = $1 AND id = $2"),
            &[&workspace, &id],
        )?
        .ok_or(StoreError::NotFound("build"))?;
    build_from_row(&row)
}

impl crate::store::Packages for PostgresStore {
    fn insert_package_version(
        &self,
        workspace: &str,
        v: &NewPackageVersion,
    ) -> Result<PackageVersion, StoreError> {
        let (ws, v) = (workspace.to_string(), v.clone());
        self.run(move |c| {
            let now = Utc::now();
            let mut tx = c.transaction()?;
            tx.execute(
                "INSERT INTO connect_packages (workspace, name, created_at) VALUES ($1, $2, $3)
                 ON CONFLICT DO NOTHING",
                &[&ws, &v.name, &now],
            )?;
            let inserted = tx.execute(
                "INSERT INTO connect_package_versions (workspace, name, version, sha256, size, entry, created_at)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) ON CONFLICT DO NOTHING",
                &[&ws, &v.name, &v.version, &v.sha256, &(v.size as i64), &v.entry, &now],
            )?;
            tx.commit()?;
            if inserted == 0 {
                return Err(StoreError::Exists("package version"));
            }
            get_version(c, &ws, &v.name, &v.version)
        })
    }

    fn get_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<PackageVersion, StoreError> {
        let (ws, name, version) = (workspace.to_string(), name.to_string(), version.to_string());
        self.run(move |c| get_version(c, &ws, &name, &version))
    }

    fn list_packages(&self, workspace: &str) -> Result<Vec<Package>, StoreError> {
        let ws = workspace.to_string();
        self.run(move |c| {
            let rows = c.query(
                "SELECT p.name, p.created_at, v.version FROM connect_packages p
                 LEFT JOIN connect_package_versions v ON v.workspace = p.workspace AND v.name = p.name
                 WHERE p.workspace = $1 ORDER BY p.name, v.created_at, v.version",
                &[&ws],
            )?;
            let mut out: Vec<Package> = Vec::new();
            for row in &rows {
                let name: String = row.try_get(0)?;
                let version: Option<String> = row.try_get(2)?;
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
        })
    }

    fn list_package_versions(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Vec<PackageVersion>, StoreError> {
        let (ws, name) = (workspace.to_string(), name.to_string());
        self.run(move |c| {
            c.query(
                &format!(
                    "SELECT {VERSION_COLUMNS} FROM connect_package_versions
                     WHERE workspace = $1 AND name = $2 ORDER BY created_at, version"
                ),
                &[&ws, &name],
            )?
            .iter()
            .map(version_from_row)
            .collect()
        })
    }

    fn delete_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<VersionDeletion, StoreError> {
        let (ws, name, version) = (workspace.to_string(), name.to_string(), version.to_string());
        self.run(move |c| {
            let mut tx = c.transaction()?;
            // The row lock orders this against a concurrent delete or build of the version.
            tx.query_opt(
                "SELECT 1 FROM connect_package_versions
                 WHERE workspace = $1 AND name = $2 AND version = $3 FOR UPDATE",
                &[&ws, &name, &version],
            )?
            .ok_or(StoreError::NotFound("package version"))?;
            let users: Vec<String> = tx
                .query(
                    "SELECT id FROM connect_connections
                     WHERE workspace = $1 AND package = $2 AND version = $3 ORDER BY created_at",
                    &[&ws, &name, &version],
                )?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            if !users.is_empty() {
                return Ok(VersionDeletion::UsedBy(users));
            }
            let building: i64 = tx
                .query_one(
                    "SELECT COUNT(*) FROM connect_builds WHERE workspace = $1 AND name = $2 AND version = $3
                     AND status IN ('queued', 'running')",
                    &[&ws, &name, &version],
                )?
                .try_get(0)?;
            if building > 0 {
                return Ok(VersionDeletion::Building);
            }
            let build_ids: Vec<String> = tx
                .query(
                    "DELETE FROM connect_builds WHERE workspace = $1 AND name = $2 AND version = $3
                     RETURNING id",
                    &[&ws, &name, &version],
                )?
                .iter()
                .map(|r| r.try_get(0))
                .collect::<Result<_, _>>()?;
            tx.execute(
                "DELETE FROM connect_package_versions WHERE workspace = $1 AND name = $2 AND version = $3",
                &[&ws, &name, &version],
            )?;
            // A package without versions would list as an empty entry: it goes with its last one.
            tx.execute(
                "DELETE FROM connect_packages p WHERE p.workspace = $1 AND p.name = $2
                 AND NOT EXISTS (SELECT 1 FROM connect_package_versions v
                                 WHERE v.workspace = $1 AND v.name = $2)",
                &[&ws, &name],
            )?;
            tx.commit()?;
            Ok(VersionDeletion::Deleted { build_ids })
        })
    }

    fn set_version_build(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
        build_id: &str,
        definition: &Definition,
    ) -> Result<(), StoreError> {
        let (ws, name, version, build_id) = (
            workspace.to_string(),
            name.to_string(),
            version.to_string(),
            build_id.to_string(),
        );
        let definition = definition.clone();
        self.run(move |c| {
            let mut tx = c.transaction()?;
            // A version's definition is immutable: a rebuild must describe the same one (the
            // row lock keeps two concurrent builds from racing past the check).
            let stored: Option<String> = tx
                .query_opt(
                    "SELECT definition FROM connect_package_versions
                     WHERE workspace = $1 AND name = $2 AND version = $3 FOR UPDATE",
                    &[&ws, &name, &version],
                )?
                .ok_or(StoreError::NotFound("package version"))?
                .try_get(0)?;
            if let Some(text) = stored {
                if serde_json::from_str::<Definition>(&text)? != definition {
                    return Err(StoreError::Exists("a different definition of this version"));
                }
            }
            tx.execute(
                "UPDATE connect_package_versions SET build_id = $4, definition = $5
                 WHERE workspace = $1 AND name = $2 AND version = $3",
                &[
                    &ws,
                    &name,
                    &version,
                    &build_id,
                    &serde_json::to_string(&definition)?,
                ],
            )?;
            tx.commit()?;
            Ok(())
        })
    }

    fn insert_build(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Build, StoreError> {
        let id = uuid::Uuid::new_v4().to_string();
        let (ws, name, version) = (workspace.to_string(), name.to_string(), version.to_string());
        let node = self.node.clone();
        self.run(move |c| {
            c.execute(
                "INSERT INTO connect_builds (id, workspace, name, version, status, created_at, node_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7)",
                &[
                    &id,
                    &ws,
                    &name,
                    &version,
                    &BuildStatus::Queued.as_str(),
                    &Utc::now(),
                    &node,
                ],
            )?;
            get_build(c, &ws, &id)
        })
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
        let finished =
            matches!(status, BuildStatus::Succeeded | BuildStatus::Failed).then(Utc::now);
        let (ws, id, log) = (workspace.to_string(), id.to_string(), log.to_string());
        let artifact_dir = artifact_dir.map(str::to_string);
        let failure = failure.map(str::to_string);
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_builds SET status = $3, log = $4, artifact_dir = $5, failure = $6, finished_at = $7
                 WHERE workspace = $1 AND id = $2",
                &[&ws, &id, &status.as_str(), &log, &artifact_dir, &failure, &finished],
            )?;
            if n == 0 {
                return Err(StoreError::NotFound("build"));
            }
            Ok(())
        })
    }

    fn get_build(&self, workspace: &str, id: &str) -> Result<Build, StoreError> {
        let (ws, id) = (workspace.to_string(), id.to_string());
        self.run(move |c| get_build(c, &ws, &id))
    }

    fn list_builds(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Vec<Build>, StoreError> {
        let (ws, name, version) = (workspace.to_string(), name.to_string(), version.to_string());
        self.run(move |c| {
            c.query(
                &format!(
                    "SELECT {BUILD_COLUMNS} FROM connect_builds
                     WHERE workspace = $1 AND name = $2 AND version = $3 ORDER BY created_at DESC"
                ),
                &[&ws, &name, &version],
            )?
            .iter()
            .map(build_from_row)
            .collect()
        })
    }

    fn fail_unfinished_builds(&self) -> Result<usize, StoreError> {
        let node = self.node.clone();
        self.run(move |c| {
            let n = c.execute(
                "UPDATE connect_builds SET status = 'failed', failure = 'the daemon restarted during the build', finished_at = $1
                 WHERE status IN ('queued', 'running') AND (node_id IS NULL OR node_id = $2)",
                &[&Utc::now(), &node],
            )?;
            Ok(n as usize)
        })
    }
}
