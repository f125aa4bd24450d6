//! envd, E2B's in-sandbox agent API (contract `protocol/e2b` §3), served by
//! sbxd for every E2B sandbox over the sandbox's agent channel: nothing
//! listens on a network inside the sandbox for it.
//!
//! Who may call: the holder of the sandbox's `envdAccessToken` (issued by
//! the E2B create and connect calls, kept in the E2B records). A sandbox
//! without an E2B record (made through `/v1` or `/v2` and never connected
//! through E2B) has no token, so its envd refuses everyone. Calls act as a
//! guest user: `user` unless the caller names another (contract §3.1).

mod errors;
pub mod fs;
mod paths;
pub mod process;
mod signing;
mod watchers;

pub use errors::EnvdError;
pub use paths::GuestUser;
pub use signing::FileOp;

use super::e2b::E2b;
use super::{Service, ServiceError};
use crate::runtime::{AgentConn, StreamItem};
use sbx_agent_proto::{Event, Request};
use sbx_api_types::SandboxStatus;
use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use subtle::ConstantTimeEq;
use uuid::Uuid;
use watchers::Watchers;

/// Result type of envd calls.
pub type Result<T, E = EnvdError> = std::result::Result<T, E>;

/// The guest user of calls that name none (E2B's templates run as `user`).
pub const DEFAULT_USER: &str = "user";

/// An authenticated envd caller: the sandbox and the user its calls act as.
#[derive(Debug, Clone)]
pub struct Caller {
    /// Tenant scope of the sandbox.
    pub workspace: String,
    /// The sandbox.
    pub sandbox: Uuid,
    /// The guest user the calls act as.
    pub user: GuestUser,
}

/// The envd face of the service.
pub struct Envd {
    e2b: Arc<E2b>,
    watchers: Watchers,
    /// Users already found in a sandbox's `/etc/passwd` (found once, a user
    /// stays: only misses are looked up again).
    known_users: Mutex<HashSet<(Uuid, String)>>,
}

impl Envd {
    /// envd over the E2B records and the lifecycle service.
    pub fn new(e2b: Arc<E2b>) -> Arc<Envd> {
        Arc::new(Envd {
            e2b,
            watchers: Watchers::default(),
            known_users: Mutex::new(HashSet::new()),
        })
    }

    fn svc(&self) -> &Arc<Service> {
        self.e2b.service()
    }

    /// Checks an RPC's credentials: the sandbox id (as routed), its access
    /// token and the user named by the caller (`None`: [`DEFAULT_USER`]).
    pub async fn authorize(
        &self,
        sandbox: &str,
        token: Option<&str>,
        user: Option<&str>,
    ) -> Result<Caller> {
        let (workspace, id, expected) = self.token_of(sandbox).await?;
        let Some(token) = token.filter(|t| !t.is_empty()) else {
            return Err(EnvdError::Unauthenticated(
                "the X-Access-Token header is required".into(),
            ));
        };
        if !bool::from(token.as_bytes().ct_eq(expected.as_bytes())) {
            return Err(EnvdError::Unauthenticated("invalid access token".into()));
        }
        Ok(Caller {
            workspace,
            sandbox: id,
            user: GuestUser::parse(user.unwrap_or(DEFAULT_USER))?,
        })
    }

    /// Checks a `/files` request: the access token, or else a signature of
    /// the exact path, operation and user made with it (contract §3.6).
    /// `sandbox` is `None` when the URL carried no sandbox id (a signed URL in
    /// `E2B_SANDBOX_URL` mode): then the sandbox is the one whose token made
    /// the signature.
    pub async fn authorize_file(
        &self,
        sandbox: Option<&str>,
        auth: FileAuth<'_>,
    ) -> Result<Caller> {
        let user = auth.user.filter(|u| !u.is_empty());
        if let (Some(sandbox), Some(_)) = (sandbox, auth.token) {
            return self.authorize(sandbox, auth.token, user).await;
        }
        let Some(signature) = auth.signature else {
            return Err(EnvdError::Unauthenticated(
                "the X-Access-Token header or a signature is required".into(),
            ));
        };
        signing::check_expiry(auth.expiration)?;
        let candidates = match sandbox {
            Some(sandbox) => vec![self.token_of(sandbox).await?],
            None => self.e2b.envd_tokens().await?,
        };
        for (workspace, id, token) in candidates {
            if signing::matches(signature, auth.path, auth.op, user, &token, auth.expiration) {
                return Ok(Caller {
                    workspace,
                    sandbox: id,
                    user: GuestUser::parse(user.unwrap_or(DEFAULT_USER))?,
                });
            }
        }
        Err(EnvdError::Unauthenticated("invalid signature".into()))
    }

    /// The tenant, id and access token of a sandbox id as routed; a sandbox
    /// that does not exist (or has no E2B record) is "not found", which the
    /// SDKs read as "the sandbox is not running".
    async fn token_of(&self, sandbox: &str) -> Result<(String, Uuid, String)> {
        let gone = || EnvdError::SandboxGone(format!("The sandbox {sandbox} was not found"));
        let id = Uuid::parse_str(sandbox).map_err(|_| gone())?;
        let record = self.e2b.envd_record(id).await?.ok_or_else(gone)?;
        Ok((record.workspace, id, record.envd_access_token))
    }

    /// The sandbox's agent, once the caller's user is known to exist in the
    /// guest (an unknown user is `unauthenticated` for every call, reads too).
    pub(super) async fn conn(&self, caller: &Caller) -> Result<AgentConn> {
        let conn = self
            .svc()
            .agent(&caller.workspace, caller.sandbox)
            .await
            .map_err(EnvdError::from)?;
        let key = (caller.sandbox, caller.user.name().to_string());
        let known = |set: &Mutex<HashSet<(Uuid, String)>>| {
            set.lock().unwrap_or_else(|p| p.into_inner()).contains(&key)
        };
        if known(&self.known_users) {
            return Ok(conn);
        }
        if !passwd_names(&conn).await?.contains(caller.user.name()) {
            return Err(EnvdError::Unauthenticated(format!(
                "invalid username: '{}'",
                caller.user.name()
            )));
        }
        self.known_users
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key);
        Ok(conn)
    }

    /// `GET /health`: whether the sandbox runs (its agent is reachable then).
    pub async fn health(&self, sandbox: &str) -> Result<()> {
        let (workspace, id) = self.sandbox_of(sandbox).await?;
        let gone = || EnvdError::SandboxGone(format!("The sandbox {sandbox} was not found"));
        match self.svc().get(&workspace, id).await {
            Ok(s) if s.status == SandboxStatus::Running => Ok(()),
            Ok(_) | Err(ServiceError::SandboxNotFound) => Err(gone()),
            Err(e) => Err(e.into()),
        }
    }
}

impl Envd {
    /// The tenant and id of a sandbox id as routed (no credentials checked:
    /// `/health` needs none); "not found" as [`Envd::authorize`] says it.
    pub async fn sandbox_of(&self, sandbox: &str) -> Result<(String, Uuid)> {
        let gone = || EnvdError::SandboxGone(format!("The sandbox {sandbox} was not found"));
        let id = Uuid::parse_str(sandbox).map_err(|_| gone())?;
        let record = self.e2b.envd_record(id).await?.ok_or_else(gone)?;
        Ok((record.workspace, id))
    }
}

/// What a `/files` request offers as proof (contract §3.6).
#[derive(Debug, Clone, Copy)]
pub struct FileAuth<'a> {
    /// `X-Access-Token`, if sent.
    pub token: Option<&'a str>,
    /// `signature` query parameter, if sent.
    pub signature: Option<&'a str>,
    /// `signature_expiration` (Unix seconds), if sent.
    pub expiration: Option<i64>,
    /// The `path` query parameter exactly as sent (signatures cover it unresolved).
    pub path: &'a str,
    /// Read (download) or write (upload).
    pub op: FileOp,
    /// `username` query parameter, if sent.
    pub user: Option<&'a str>,
}

/// The user names in the guest's `/etc/passwd`.
async fn passwd_names(conn: &AgentConn) -> Result<HashSet<String>> {
    let failed =
        |e: String| EnvdError::Unavailable(format!("reading the guest's /etc/passwd: {e}"));
    let mut stream = conn
        .stream(Request::FileRead {
            path: "/etc/passwd".into(),
            max_bytes: 4 << 20,
        })
        .await
        .map_err(|e| failed(e.to_string()))?;
    let mut text = Vec::new();
    loop {
        match stream.next().await {
            Some(StreamItem::Event(Event::FileData, bytes)) => text.extend_from_slice(&bytes),
            Some(StreamItem::Event(..)) => {}
            Some(StreamItem::End(..)) => break,
            Some(StreamItem::Failed(e)) => return Err(failed(e.to_string())),
            None => return Err(failed("the agent connection closed".into())),
        }
    }
    Ok(String::from_utf8_lossy(&text)
        .lines()
        .filter_map(|l| l.split(':').next())
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect())
}
