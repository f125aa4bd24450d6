//! Connections: create/update/delete with validated config and encrypted credentials, and the
//! OAuth sign-in (start with PKCE + state, callback exchanging the code).

use super::execute::{JobPlan, JobResult};
use super::{ConnectService, ServiceError};
use crate::api::{
    CreateConnectionRequest, OauthCallbackRequest, OauthCallbackResponse, OauthStartRequest,
    OauthStartResponse, UpdateConnectionRequest,
};
use crate::broker::normalize_origin;
use crate::credentials::Credentials;
use crate::job::JobSpec;
use crate::model::{
    AuthDefinition, AuthKind, Connection, ConnectionStatus, Definition, JobKind, PackageVersion,
    RunKind,
};
use crate::oauth;
use crate::store::{NewConnection, NewRun, OauthPending, VersionChange};
use std::path::PathBuf;

/// Shortest schedule interval (the default of [`crate::limits::Limits::min_schedule_secs`]).
pub const MIN_SCHEDULE_SECONDS: u64 = 60;

/// The OAuth hook run after a successful sign-in.
pub const AFTER_AUTHORIZE: &str = "afterAuthorize";

/// For OAuth2 only the client is user-given: tokens come from the sign-in.
fn client_only(c: Credentials) -> Credentials {
    match c {
        Credentials::Oauth2 {
            client_id,
            client_secret,
            ..
        } => Credentials::Oauth2 {
            client_id,
            client_secret,
            access_token: None,
            refresh_token: None,
            expires_at: None,
        },
        other => other,
    }
}

impl ConnectService {
    /// The built version and its definition.
    pub(super) fn built_version(
        &self,
        workspace: &str,
        package: &str,
        version: &str,
    ) -> Result<(PackageVersion, Definition, PathBuf), ServiceError> {
        let pv = self
            .store
            .get_package_version(workspace, package, version)?;
        match (&pv.definition, &pv.build_id) {
            (Some(def), Some(build_id)) => {
                let def = def.clone();
                let dir = self.artifact_dir(build_id);
                Ok((pv, def, dir))
            }
            _ => Err(ServiceError::Conflict(format!(
                "{package}@{version} has no successful build yet"
            ))),
        }
    }

    fn check_origin(&self, origin: &str) -> Result<String, ServiceError> {
        let origin = normalize_origin(origin).map_err(|e| ServiceError::Invalid(e.to_string()))?;
        let port = url::Url::parse(&origin)
            .ok()
            .and_then(|u| u.port_or_known_default());
        if port != Some(self.broker.allowed_port) {
            return Err(ServiceError::Invalid(format!(
                "origin {origin}: packages can reach HTTPS on port {} only",
                self.broker.allowed_port
            )));
        }
        Ok(origin)
    }

    fn check_config(
        def: &Definition,
        mut config: serde_json::Value,
    ) -> Result<serde_json::Value, ServiceError> {
        crate::schema::validate(&def.config, &mut config)
            .map_err(|e| ServiceError::Invalid(e.to_string()))?;
        Ok(config)
    }

    fn check_schedule(&self, s: Option<u64>) -> Result<(), ServiceError> {
        let min = self.limits.min_schedule_secs;
        match s {
            Some(n) if n < min => Err(ServiceError::Invalid(format!(
                "scheduleIntervalSeconds must be at least {min}"
            ))),
            _ => Ok(()),
        }
    }

    /// Creates a connection. OAuth2 connections start `reauthorization_required` until the
    /// sign-in completes; others start `active`.
    pub fn create_connection(
        &self,
        workspace: &str,
        req: CreateConnectionRequest,
    ) -> Result<Connection, ServiceError> {
        check_name(&req.name)?;
        let (pv, def, _) = self.built_version(workspace, &req.package, &req.version)?;
        let config = Self::check_config(&def, req.config)?;
        let origin = self.check_origin(&req.origin)?;
        self.check_schedule(req.schedule_interval_seconds)?;
        let kind = def.auth.kind();
        req.credentials.check(kind)?;
        let credentials = client_only(req.credentials);
        let status = if kind == AuthKind::Oauth2 {
            ConnectionStatus::ReauthorizationRequired
        } else {
            ConnectionStatus::Active
        };
        let id = uuid::Uuid::new_v4().to_string();
        let sealed = self.seal(workspace, &id, &credentials)?;
        let new = NewConnection {
            name: req.name,
            package: pv.name,
            version: pv.version,
            config,
            origin,
            auth_kind: kind,
            status,
            schedule_interval_seconds: req.schedule_interval_seconds,
        };
        Ok(self
            .store
            .insert_connection(workspace, &id, &new, &sealed)?)
    }

    /// One connection.
    pub fn get_connection(&self, workspace: &str, id: &str) -> Result<Connection, ServiceError> {
        Ok(self.store.get_connection(workspace, id)?)
    }

    /// All connections of a workspace.
    pub fn list_connections(&self, workspace: &str) -> Result<Vec<Connection>, ServiceError> {
        Ok(self.store.list_connections(workspace)?)
    }

    /// Changes a connection.
    pub fn update_connection(
        &self,
        workspace: &str,
        id: &str,
        req: UpdateConnectionRequest,
    ) -> Result<Connection, ServiceError> {
        if let Some(name) = &req.name {
            check_name(name)?;
        }
        let current = self.store.get_connection(workspace, id)?;
        let (_, old_def, _) = self.built_version(workspace, &current.package, &current.version)?;
        // A version change is checked first: the config and credentials below are checked
        // against the definition the connection will have.
        let mut upgrade: Option<(String, Vec<String>)> = None;
        let def = match req.version.as_deref() {
            Some(v) if v != current.version => {
                let (_, new_def, _) = self.built_version(workspace, &current.package, v)?;
                let committed = self.check_upgrade(workspace, &current, &old_def, &new_def, v)?;
                // The stored credentials (and the connection's auth kind) are of the old kind.
                if new_def.auth.kind() != old_def.auth.kind() {
                    return Err(ServiceError::Conflict(format!(
                        "{}@{v} authenticates with {} instead of {}: create a new connection \
                         for it",
                        current.package,
                        new_def.auth.kind().as_str(),
                        old_def.auth.kind().as_str()
                    )));
                }
                upgrade = Some((v.to_string(), committed));
                new_def
            }
            _ => old_def,
        };
        let config = match req.config {
            Some(c) => Self::check_config(&def, c)?,
            // The kept config must still fit: a new version may add required settings.
            None if upgrade.is_some() => Self::check_config(&def, current.config.clone())?,
            None => current.config.clone(),
        };
        let schedule = req
            .schedule_interval_seconds
            .unwrap_or(current.schedule_interval_seconds);
        self.check_schedule(schedule)?;
        let mut status = current.status;
        // Everything is checked before anything is written: a refused request changes nothing.
        let credentials = match req.credentials {
            Some(creds) => {
                creds.check(def.auth.kind())?;
                let oauth = creds.kind() == AuthKind::Oauth2;
                let sealed = self.seal(workspace, id, &client_only(creds))?;
                // New OAuth client: the old tokens are gone, so the connection needs signing in
                // again.
                status = if oauth {
                    ConnectionStatus::ReauthorizationRequired
                } else {
                    ConnectionStatus::Active
                };
                Some(sealed)
            }
            None => None,
        };
        match req.status {
            None => {}
            Some(ConnectionStatus::Disabled) => status = ConnectionStatus::Disabled,
            Some(ConnectionStatus::Active) => {
                // Only OAuth2 connections are ever in reauthorization_required: signing in is the way out.
                if status == ConnectionStatus::ReauthorizationRequired {
                    return Err(ServiceError::Conflict(
                        "the connection needs Connect with OAuth first".into(),
                    ));
                }
                status = ConnectionStatus::Active;
            }
            Some(ConnectionStatus::ReauthorizationRequired) => {
                return Err(ServiceError::Invalid(
                    "status reauthorization_required is set by the platform".into(),
                ))
            }
        }
        // The version first: it is the write that can still be refused (a sync started or
        // committed since the check).
        if let Some((to, committed_syncs)) = upgrade {
            let change = VersionChange {
                from: current.version.clone(),
                to,
                config: config.clone(),
                committed_syncs,
            };
            self.apply_upgrade(workspace, &current, &change)?;
        }
        if let Some(sealed) = credentials {
            self.store
                .set_connection_credentials(workspace, id, &sealed, Some(status))?;
        }
        let name = req.name.unwrap_or(current.name);
        Ok(self
            .store
            .update_connection(workspace, id, &name, &config, status, schedule)?)
    }

    /// Deletes a connection with its committed records, checkpoints and credentials.
    pub fn delete_connection(&self, workspace: &str, id: &str) -> Result<(), ServiceError> {
        let busy = self
            .active_syncs
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .any(|(ws, c, _)| ws == workspace && c == id);
        if busy {
            return Err(ServiceError::Conflict(
                "a sync of this connection is running".into(),
            ));
        }
        Ok(self.store.delete_connection(workspace, id)?)
    }

    /// Starts an OAuth sign-in: returns the authorization URL (PKCE S256 + state).
    pub fn start_oauth(
        &self,
        workspace: &str,
        id: &str,
        req: OauthStartRequest,
    ) -> Result<OauthStartResponse, ServiceError> {
        let c = self.store.get_connection(workspace, id)?;
        let (_, def, _) = self.built_version(workspace, &c.package, &c.version)?;
        let AuthDefinition::Oauth2 {
            authorize_url,
            scopes,
            pkce,
            ..
        } = &def.auth
        else {
            return Err(ServiceError::Invalid(
                "this connection does not use OAuth2".into(),
            ));
        };
        let Credentials::Oauth2 { client_id, .. } = self.open_credentials(workspace, id)? else {
            return Err(ServiceError::Invalid(
                "this connection has no OAuth client".into(),
            ));
        };
        let redirect = url::Url::parse(&req.redirect_uri)
            .map_err(|_| ServiceError::Invalid("redirectUri must be an absolute URL".into()))?;
        if !matches!(redirect.scheme(), "https" | "http") {
            return Err(ServiceError::Invalid("redirectUri must be http(s)".into()));
        }
        let verifier = oauth::pkce_verifier()?;
        let state = oauth::new_state()?;
        let challenge = pkce.then(|| oauth::pkce_challenge(&verifier));
        let url = oauth::authorize_url(
            authorize_url,
            &client_id,
            &req.redirect_uri,
            scopes,
            &state,
            challenge.as_deref(),
        )?;
        self.store.insert_oauth_pending(
            workspace,
            &state,
            &OauthPending {
                connection_id: id.to_string(),
                verifier,
                redirect_uri: req.redirect_uri,
            },
        )?;
        Ok(OauthStartResponse {
            authorize_url: url,
            state,
        })
    }

    /// Finishes an OAuth sign-in: exchanges the code, stores the tokens, activates the
    /// connection and runs the package's `afterAuthorize` hook if it has one (not retried).
    pub async fn finish_oauth(
        &self,
        workspace: &str,
        req: OauthCallbackRequest,
    ) -> Result<OauthCallbackResponse, ServiceError> {
        let pending = self.store.take_oauth_pending(workspace, &req.state)?;
        let id = pending.connection_id.clone();
        let c = self.store.get_connection(workspace, &id)?;
        let (pv, def, artifact_dir) = self.built_version(workspace, &c.package, &c.version)?;
        let AuthDefinition::Oauth2 {
            token_url, pkce, ..
        } = &def.auth
        else {
            return Err(ServiceError::Invalid(
                "this connection does not use OAuth2".into(),
            ));
        };
        let Credentials::Oauth2 {
            client_id,
            client_secret,
            ..
        } = self.open_credentials(workspace, &id)?
        else {
            return Err(ServiceError::Invalid(
                "this connection has no OAuth client".into(),
            ));
        };
        let client = oauth::Client {
            id: &client_id,
            secret: client_secret.as_deref(),
        };
        let verifier = pkce.then_some(pending.verifier.as_str());
        let tokens = oauth::exchange_code(
            &self.broker,
            token_url,
            client,
            &req.code,
            &pending.redirect_uri,
            verifier,
        )
        .await?;
        let creds = Credentials::Oauth2 {
            client_id: client_id.clone(),
            client_secret: client_secret.clone(),
            access_token: Some(tokens.access_token),
            refresh_token: tokens.refresh_token,
            expires_at: tokens.expires_at,
        };
        let sealed = self.seal(workspace, &id, &creds)?;
        self.store.set_connection_credentials(
            workspace,
            &id,
            &sealed,
            Some(ConnectionStatus::Active),
        )?;
        let connection = self.store.get_connection(workspace, &id)?;
        if !def.oauth.iter().any(|h| h == AFTER_AUTHORIZE) {
            return Ok(OauthCallbackResponse {
                connection,
                run: None,
            });
        }
        let run = self.store.insert_run(
            workspace,
            &NewRun {
                connection_id: Some(id.clone()),
                package: pv.name.clone(),
                version: pv.version.clone(),
                kind: RunKind::Oauth,
                sync: Some(AFTER_AUTHORIZE.to_string()),
            },
        )?;
        let spec = JobSpec {
            kind: JobKind::Oauth,
            entry: format!("/pkg/{}", pv.entry),
            config: connection.config.clone(),
            sync: None,
            checkpoint: None,
            oauth_step: Some(AFTER_AUTHORIZE.to_string()),
            delivery: None,
            time_budget: self.limits.oauth_time,
            limits: self.limits.output,
            retry: self.limits.fetch_retry,
        };
        let plan = JobPlan {
            workspace,
            run: &run,
            connection: Some(&connection),
            definition: Some(&def),
            artifact_dir,
            spec,
            // OAuth steps are not retried: the user chooses Connect with OAuth again.
            retries: 0,
            delivery: None,
        };
        if let JobResult::Failed { category, kind } = self.execute(plan).await? {
            tracing::info!(connection = %id, category = category.as_str(), %kind, "afterAuthorize failed");
        }
        Ok(OauthCallbackResponse {
            connection: self.store.get_connection(workspace, &id)?,
            run: Some(self.store.get_run(workspace, &run.id)?),
        })
    }
}

/// Connection names follow the platform's name rules (no control, invisible
/// or bidirectional format characters that could spoof the console or CLI).
fn check_name(name: &str) -> Result<(), ServiceError> {
    sbx_api_types::validate::name("name", name).map_err(|e| ServiceError::Invalid(e.to_string()))
}
