//! Package uploads (immutable versions) and builds (install, then read the definition).

use super::execute::{JobPlan, JobResult};
use super::{io_error, ConnectService, ServiceError};
use crate::api::UploadPackageResponse;
use crate::job::JobSpec;
use crate::model::{
    Build, BuildStatus, Definition, JobKind, Package, PackageVersion, RunKind, SyncMode,
};
use crate::package;
use crate::sandbox::BuildRequest;
use crate::store::{NewPackageVersion, NewRun, StoreError};
use std::collections::HashSet;
use std::path::{Path, PathBuf};

/// Store key of an uploaded package tarball.
fn tarball_key(sha256: &str) -> String {
    format!("tarball/{sha256}")
}

/// Store key of a build's packed artifact.
fn artifact_key(build_id: &str) -> String {
    format!("artifact/{build_id}")
}
use std::sync::Arc;

/// Longest build log kept.
const MAX_BUILD_LOG: usize = 256 * 1024;

/// Checks a describe result beyond its shape.
pub(super) fn check_definition(def: &Definition) -> Result<(), String> {
    let mut names = HashSet::new();
    for s in &def.syncs {
        if s.name.is_empty() || !names.insert(s.name.as_str()) {
            return Err(format!(
                "sync names must be unique and not empty ({:?})",
                s.name
            ));
        }
        if s.mode == SyncMode::Merge && s.primary_key.is_none() {
            return Err(format!("merge sync {:?} needs a primaryKey", s.name));
        }
    }
    if matches!(def.auth, crate::model::AuthDefinition::ApiKey { .. })
        && def.auth.api_key_placement().is_none()
    {
        return Err("an apiKey auth needs exactly one of header or query".into());
    }
    if let Some((crate::model::ApiKeyPlacement::Header, name)) = def.auth.api_key_placement() {
        if is_reserved_header(name) {
            return Err(format!(
                "apiKey.header {name:?} is a standard or proxy request header; use a header of \
                 the API's own (e.g. x-api-key)"
            ));
        }
    }
    if let crate::model::AuthDefinition::Oauth2 {
        authorize_url,
        token_url,
        ..
    } = &def.auth
    {
        for (field, raw) in [("authorizeUrl", authorize_url), ("tokenUrl", token_url)] {
            let ok = url::Url::parse(raw).is_ok_and(|u| u.scheme() == "https" && u.has_host());
            if !ok {
                return Err(format!("oauth2.{field} must be an https URL ({raw:?})"));
            }
        }
    }
    if !(def.config.is_object() || def.config.is_boolean()) {
        return Err("the config schema must be an object".into());
    }
    Ok(())
}

/// Request headers an `apiKey.header` may not name: servers and proxies use or echo them
/// (`Origin`, `Host`, `Referer` are commonly reflected), so a key there would leak. The broker
/// strips them from package requests too. `authorization` stays allowed: it is the credential
/// header, APIs expect raw keys in it, and nothing reflects it by convention.
fn is_reserved_header(name: &str) -> bool {
    let n = name.trim().to_ascii_lowercase();
    matches!(
        n.as_str(),
        "host"
            | "origin"
            | "referer"
            | "user-agent"
            | "accept"
            | "connection"
            | "keep-alive"
            | "cookie"
            | "cookie2"
            | "set-cookie"
            | "forwarded"
            | "via"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "expect"
            | "proxy-authorization"
            | "proxy-connection"
            | "x-real-ip"
    ) || n.starts_with("accept-")
        || n.starts_with("content-")
        || n.starts_with("x-forwarded-")
        || n.starts_with("proxy-")
        || n.starts_with("sec-")
        || n.starts_with(':')
}

fn bounded(mut log: String) -> String {
    if log.len() > MAX_BUILD_LOG {
        let mut cut = log.len() - MAX_BUILD_LOG;
        while !log.is_char_boundary(cut) {
            cut += 1;
        }
        log = format!("[earlier output dropped]\n{}", &log[cut..]);
    }
    log
}

impl ConnectService {
    fn tarball_path(&self, sha256: &str) -> PathBuf {
        self.data_dir.join("tarballs").join(format!("{sha256}.tgz"))
    }

    pub(super) fn artifact_dir(&self, build_id: &str) -> PathBuf {
        self.data_dir.join("artifacts").join(build_id)
    }

    /// The uploaded tarball of a version: the local file, else (in a cluster, uploaded
    /// through another node) the store's copy, kept as the local file from then on.
    fn read_tarball(&self, sha256: &str) -> Result<Vec<u8>, ServiceError> {
        let path = self.tarball_path(sha256);
        match std::fs::read(&path) {
            Ok(bytes) => return Ok(bytes),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound && self.shared => {}
            Err(e) => return Err(io_error(&path, e)),
        }
        let bytes = self
            .store
            .get_blob(&tarball_key(sha256))?
            .ok_or_else(|| ServiceError::Io(format!("the tarball {sha256} is on no node")))?;
        self.write_tarball(&path, &bytes)?;
        Ok(bytes)
    }

    /// Content-addressed: written to a temporary name, then renamed, so a crash leaves no
    /// torn file.
    fn write_tarball(&self, path: &Path, tarball: &[u8]) -> Result<(), ServiceError> {
        if path.exists() {
            return Ok(());
        }
        let dir = self.data_dir.join("tarballs");
        std::fs::create_dir_all(&dir).map_err(|e| io_error(&dir, e))?;
        let tmp = path.with_extension(format!("tmp-{}", uuid::Uuid::new_v4()));
        if let Err(e) = std::fs::write(&tmp, tarball) {
            // A torn temporary file would keep the space a full disk needs back.
            let _ = std::fs::remove_file(&tmp);
            return Err(io_error(&tmp, e));
        }
        std::fs::rename(&tmp, path).map_err(|e| io_error(path, e))
    }

    /// Makes sure the built package in `dir` (`artifacts/<build id>`) is on this node: in a
    /// cluster, a node that did not build it fetches it from the store first.
    pub(super) async fn ensure_artifact(&self, dir: &Path) -> Result<(), ServiceError> {
        if !self.shared || dir.is_dir() {
            return Ok(());
        }
        let build_id = dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        let (store, dir) = (self.store.clone(), dir.to_path_buf());
        // Fetching and unpacking take a while for a large node_modules: off the async workers.
        tokio::task::spawn_blocking(move || -> Result<(), ServiceError> {
            let bytes = store.get_blob(&artifact_key(&build_id))?.ok_or_else(|| {
                ServiceError::Io(format!("the built package of build {build_id} is on no node"))
            })?;
            if let Some(parent) = dir.parent() {
                std::fs::create_dir_all(parent).map_err(|e| io_error(parent, e))?;
            }
            crate::artifact::unpack(&bytes, &dir).map_err(|e| ServiceError::Io(e.to_string()))?;
            tracing::info!(build = %build_id, bytes = bytes.len(), "connect: fetched a package built by another node");
            Ok(())
        })
        .await
        .map_err(|e| ServiceError::Io(format!("fetching a built package: {e}")))?
    }

    /// In a cluster, keeps a copy of the built package in the store for the other nodes.
    async fn share_artifact(&self, build_id: &str, dir: &Path) -> Result<(), ServiceError> {
        if !self.shared {
            return Ok(());
        }
        let (store, dir, key) = (
            self.store.clone(),
            dir.to_path_buf(),
            artifact_key(build_id),
        );
        tokio::task::spawn_blocking(move || -> Result<(), ServiceError> {
            let bytes = crate::artifact::pack(&dir).map_err(|e| ServiceError::Io(e.to_string()))?;
            Ok(store.put_blob(&key, &bytes)?)
        })
        .await
        .map_err(|e| ServiceError::Io(format!("sharing a built package: {e}")))?
    }

    /// Stores an uploaded package version. Re-uploading the same bytes is a no-op; other bytes
    /// for an existing version are refused (versions are immutable).
    pub fn upload_package(
        &self,
        workspace: &str,
        tarball: &[u8],
    ) -> Result<UploadPackageResponse, ServiceError> {
        let info = package::inspect(tarball).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        match self.store.get_package_version(workspace, &info.name, &info.version) {
            Ok(existing) if existing.sha256 == info.sha256 => {
                return Ok(UploadPackageResponse { version: existing, created: false });
            }
            Ok(_) => {
                return Err(ServiceError::Conflict(format!(
                    "{}@{} exists with different content; versions are immutable, publish a new version",
                    info.name, info.version
                )))
            }
            Err(StoreError::NotFound(_)) => {}
            Err(e) => return Err(e.into()),
        }
        self.write_tarball(&self.tarball_path(&info.sha256), tarball)?;
        if self.shared {
            // Before the version row exists: a node that sees the version can get its bytes.
            self.store.put_blob(&tarball_key(&info.sha256), tarball)?;
        }
        let new = NewPackageVersion {
            name: info.name.clone(),
            version: info.version.clone(),
            sha256: info.sha256.clone(),
            size: info.size,
            entry: info.entry,
        };
        match self.store.insert_package_version(workspace, &new) {
            Ok(version) => Ok(UploadPackageResponse {
                version,
                created: true,
            }),
            // A concurrent upload of the same version won the race: same rules as above.
            Err(StoreError::Exists(_)) => {
                let existing =
                    self.store
                        .get_package_version(workspace, &info.name, &info.version)?;
                if existing.sha256 == info.sha256 {
                    Ok(UploadPackageResponse {
                        version: existing,
                        created: false,
                    })
                } else {
                    Err(ServiceError::Conflict(format!(
                        "{}@{} exists with different content",
                        info.name, info.version
                    )))
                }
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Packages of a workspace.
    pub fn list_packages(&self, workspace: &str) -> Result<Vec<Package>, ServiceError> {
        Ok(self.store.list_packages(workspace)?)
    }

    /// Versions of a package.
    pub fn list_package_versions(
        &self,
        workspace: &str,
        name: &str,
    ) -> Result<Vec<PackageVersion>, ServiceError> {
        let versions = self.store.list_package_versions(workspace, name)?;
        if versions.is_empty() {
            return Err(ServiceError::NotFound("package"));
        }
        Ok(versions)
    }

    /// One version (with its definition once built).
    pub fn get_package_version(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<PackageVersion, ServiceError> {
        Ok(self.store.get_package_version(workspace, name, version)?)
    }

    /// One build.
    pub fn get_build(&self, workspace: &str, id: &str) -> Result<Build, ServiceError> {
        Ok(self.store.get_build(workspace, id)?)
    }

    /// Builds of a version, newest first.
    pub fn list_builds(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Vec<Build>, ServiceError> {
        self.store.get_package_version(workspace, name, version)?;
        Ok(self.store.list_builds(workspace, name, version)?)
    }

    /// Creates a queued build of a version.
    pub fn create_build(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Build, ServiceError> {
        self.store.get_package_version(workspace, name, version)?;
        Ok(self.store.insert_build(workspace, name, version)?)
    }

    /// Creates a build and runs it in the background; returns it queued.
    pub fn start_build(
        self: &Arc<Self>,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Build, ServiceError> {
        let build = self.create_build(workspace, name, version)?;
        let this = self.clone();
        let (ws, id) = (workspace.to_string(), build.id.clone());
        tokio::spawn(async move {
            if let Err(e) = this.execute_build(&ws, &id).await {
                tracing::error!(error = %e, build = %id, "build failed to run");
            }
        });
        Ok(build)
    }

    /// Fails a rebuild whose describe result differs from the version's stored definition.
    fn fail_changed_definition(
        &self,
        workspace: &str,
        build_id: &str,
        artifact: &std::path::Path,
        log: &str,
    ) -> Result<(), ServiceError> {
        let _ = std::fs::remove_dir_all(artifact);
        self.store.update_build(
            workspace,
            build_id,
            BuildStatus::Failed,
            log,
            None,
            Some(
                "the rebuilt package describes a different definition than this version \
                 already has (versions are immutable: upload a new version); the old \
                 definition is kept",
            ),
        )?;
        Ok(())
    }

    /// Creates a build and runs it to its end.
    pub async fn build(
        &self,
        workspace: &str,
        name: &str,
        version: &str,
    ) -> Result<Build, ServiceError> {
        let build = self.create_build(workspace, name, version)?;
        self.execute_build(workspace, &build.id).await
    }

    /// Runs a queued build: unpack, `npm ci --ignore-scripts` in a build sandbox, then a
    /// describe job whose result becomes the version's definition.
    pub async fn execute_build(
        &self,
        workspace: &str,
        build_id: &str,
    ) -> Result<Build, ServiceError> {
        let build = self.store.get_build(workspace, build_id)?;
        let pv = self
            .store
            .get_package_version(workspace, &build.name, &build.version)?;
        self.store
            .update_build(workspace, build_id, BuildStatus::Running, "", None, None)?;
        let artifact = self.artifact_dir(build_id);
        let (log, result) = self
            .install_and_describe(workspace, build_id, &pv, &artifact)
            .await?;
        let log = bounded(log);
        match result {
            Ok(definition) if pv.definition.as_ref().is_some_and(|old| *old != definition) => {
                self.fail_changed_definition(workspace, build_id, &artifact, &log)?;
            }
            Ok(definition) => {
                // Before the version points at this build: then every node can run it.
                self.share_artifact(build_id, &artifact).await?;
                let dir = artifact.display().to_string();
                match self.store.set_version_build(
                    workspace,
                    &pv.name,
                    &pv.version,
                    build_id,
                    &definition,
                ) {
                    Ok(()) => {}
                    Err(StoreError::Exists(_)) => {
                        self.fail_changed_definition(workspace, build_id, &artifact, &log)?;
                        return Ok(self.store.get_build(workspace, build_id)?);
                    }
                    Err(e) => return Err(e.into()),
                }
                self.store.update_build(
                    workspace,
                    build_id,
                    BuildStatus::Succeeded,
                    &log,
                    Some(&dir),
                    None,
                )?;
            }
            Err(failure) => {
                let _ = std::fs::remove_dir_all(&artifact);
                self.store.update_build(
                    workspace,
                    build_id,
                    BuildStatus::Failed,
                    &log,
                    None,
                    Some(&failure),
                )?;
            }
        }
        Ok(self.store.get_build(workspace, build_id)?)
    }

    /// Returns the build log and the definition or a failure message for people.
    async fn install_and_describe(
        &self,
        workspace: &str,
        build_id: &str,
        pv: &PackageVersion,
        artifact: &std::path::Path,
    ) -> Result<(String, Result<Definition, String>), ServiceError> {
        let tarball = self.read_tarball(&pv.sha256)?;
        // Checked again: the rules may be stricter than when the version was uploaded.
        if let Err(e) = package::inspect(&tarball) {
            return Ok((String::new(), Err(e.to_string())));
        }
        let _ = std::fs::remove_dir_all(artifact);
        if let Err(e) = package::unpack(&tarball, artifact) {
            return Ok((String::new(), Err(e.to_string())));
        }
        let req = BuildRequest {
            workspace: workspace.to_string(),
            build_id: build_id.to_string(),
            package_dir: artifact.to_path_buf(),
            memory_mib: self.limits.memory_mib,
            time_budget: self.limits.build_time,
        };
        let mut log = match self.sandboxes.run_build(req).await {
            Ok(out) if out.success => out.log,
            Ok(out) => {
                return Ok((
                    out.log,
                    Err("npm ci --ignore-scripts failed; see the build log".into()),
                ))
            }
            Err(e) => {
                tracing::warn!(error = %e, build = %build_id, "build sandbox failed");
                return Ok((
                    String::new(),
                    Err("the build sandbox failed (platform error)".into()),
                ));
            }
        };
        let run = self.store.insert_run(
            workspace,
            &NewRun {
                connection_id: None,
                package: pv.name.clone(),
                version: pv.version.clone(),
                kind: RunKind::Describe,
                sync: None,
            },
        )?;
        let spec = JobSpec {
            kind: JobKind::Describe,
            entry: format!("/pkg/{}", pv.entry),
            config: serde_json::json!({}),
            sync: None,
            checkpoint: None,
            oauth_step: None,
            delivery: None,
            time_budget: self.limits.describe_time,
            limits: self.limits.output,
            retry: self.limits.fetch_retry,
        };
        let plan = JobPlan {
            workspace,
            run: &run,
            connection: None,
            definition: None,
            artifact_dir: artifact.to_path_buf(),
            spec,
            retries: self.limits.platform_retries,
            delivery: None,
        };
        let result = match self.execute(plan).await? {
            JobResult::Succeeded { result, .. } => {
                match serde_json::from_value::<Definition>(result) {
                    Ok(def) => check_definition(&def)
                        .map(|()| def)
                        .map_err(|e| format!("the package definition is invalid: {e}")),
                    Err(e) => Err(format!("the package definition is invalid: {e}")),
                }
            }
            JobResult::Failed { category, kind } => Err(format!(
                "reading the package definition failed ({}, {kind}); the describe run's log \
                 is at the end of the build log",
                category.as_str(),
            )),
        };
        log.push_str(&format!(
            "\ndescribe run {}: {}\n",
            run.id,
            if result.is_ok() { "ok" } else { "failed" }
        ));
        // The describe run's own lines (a definition or import error says what is wrong there)
        // belong in the build log: that is where an author looks when a build fails.
        for line in self
            .store
            .list_logs(workspace, None, Some(&run.id), None, 1000)?
        {
            log.push_str(&format!("{} {}\n", line.level.as_str(), line.message));
        }
        Ok((log, result))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn def(auth: serde_json::Value) -> Definition {
        serde_json::from_value(json!({
            "auth": auth,
            "config": {"type": "object"},
            "syncs": [],
        }))
        .expect("definition")
    }

    #[test]
    fn api_key_header_may_not_be_a_standard_or_proxy_header() {
        for h in [
            "Host",
            "origin",
            "Referer",
            "user-agent",
            "Accept",
            "accept-language",
            "Content-Type",
            "connection",
            "Cookie",
            "forwarded",
            "X-Forwarded-For",
            "via",
            "te",
            "Transfer-Encoding",
            "upgrade",
            "proxy-authorization",
        ] {
            let e = check_definition(&def(json!({"type": "apiKey", "header": h}))).expect_err(h);
            assert!(e.contains("apiKey.header"), "{e}");
        }
        for h in ["x-api-key", "Authorization", "api-key"] {
            check_definition(&def(json!({"type": "apiKey", "header": h}))).expect(h);
        }
    }

    #[test]
    fn oauth_endpoints_must_be_https() {
        let oauth =
            |a: &str, t: &str| def(json!({"type": "oauth2", "authorizeUrl": a, "tokenUrl": t}));
        check_definition(&oauth("https://a.example/auth", "https://a.example/token"))
            .expect("https");
        let e = check_definition(&oauth("https://a.example/auth", "http://a.example/token"))
            .expect_err("http token");
        assert!(e.contains("tokenUrl"), "{e}");
        let e = check_definition(&oauth("http://a.example/auth", "https://a.example/token"))
            .expect_err("http authorize");
        assert!(e.contains("authorizeUrl"), "{e}");
        check_definition(&oauth("https://a.example/auth", "not a url")).expect_err("bad url");
    }
}
