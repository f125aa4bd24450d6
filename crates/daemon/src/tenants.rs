//! Tenants: who a request belongs to.
//!
//! A tenant is a (workspace, environment) pair. Every store row carries its
//! tenant as one string, `workspace/env` ([`scope`]); workspace names never
//! contain `/`, so the pair is unambiguous. A signing key belongs to a
//! workspace and either one environment (the `x-inngest-env` header, if sent,
//! must name it) or none (the header selects the environment; without it,
//! [`DEFAULT_ENV`]). Keys given to sbxd by flag or environment belong to the
//! [`DEFAULT_WORKSPACE`] and to no particular environment. Stored keys are kept
//! as `hex(sha256(bearer token))` only.

use chrono::Utc;
use sbx_api_types::signing_key::hashed_signing_key;
use sbx_store::{ApiKeyRecord, Store, StoreError};
use sha2::{Digest, Sha256};
use std::io::Read;
use subtle::ConstantTimeEq;
use uuid::Uuid;

/// The workspace of the keys configured by flag or environment (and of dev mode).
pub const DEFAULT_WORKSPACE: &str = "default";
/// The environment of a request that sends no `x-inngest-env` with a key bound to none.
pub const DEFAULT_ENV: &str = "production";
/// Prefix of generated keys (matches the SDK's `^signkey-\w+-`).
pub const KEY_PREFIX: &str = "signkey-sbx-";

/// Why a request could not be given a tenant, or a key could not be managed.
#[derive(Debug, thiserror::Error)]
pub enum TenantError {
    /// No `Authorization` header.
    #[error("Authorization header is required")]
    MissingKey,
    /// Unknown or revoked key, or a key used for another environment.
    #[error("{0}")]
    InvalidKey(String),
    /// A malformed workspace or environment name.
    #[error("{0}")]
    BadName(String),
    /// No key has this id (or it is already revoked).
    #[error("no active key with id {0}")]
    UnknownKey(Uuid),
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Random bytes could not be read.
    #[error("reading random bytes: {0}")]
    Random(#[from] std::io::Error),
}

/// The store string of a tenant: `workspace/env`.
pub fn scope(workspace: &str, env: &str) -> String {
    format!("{workspace}/{env}")
}

/// Checks a workspace name: 1–63 of `[a-z0-9_-]`, starting with a letter or digit.
pub fn check_workspace(name: &str) -> Result<(), TenantError> {
    let ok = !name.is_empty()
        && name.len() <= 63
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_' || b == b'-')
        && name.as_bytes()[0].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(TenantError::BadName(format!(
            "workspace {name:?}: 1-63 characters of a-z, 0-9, '_' and '-', starting with a letter or digit"
        )))
    }
}

/// Checks an environment name (`x-inngest-env`, often a branch name): 1–255 visible ASCII characters.
pub fn check_env(name: &str) -> Result<(), TenantError> {
    let ok = !name.is_empty() && name.len() <= 255 && name.bytes().all(|b| b.is_ascii_graphic());
    if ok {
        Ok(())
    } else {
        Err(TenantError::BadName(format!(
            "environment {name:?}: 1-255 visible ASCII characters, no spaces"
        )))
    }
}

/// What the store keeps of a bearer token.
pub fn token_digest(bearer_token: &str) -> String {
    hex::encode(Sha256::digest(bearer_token.as_bytes()))
}

/// A new random signing key: `signkey-sbx-` and 64 hex digits.
pub fn generate_key() -> Result<String, TenantError> {
    let mut buf = [0u8; 32];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut buf)?;
    Ok(format!("{KEY_PREFIX}{}", hex::encode(buf)))
}

/// Creates and stores a key; returns its record and the key itself (shown once, never stored).
pub fn create_key(
    store: &dyn Store,
    workspace: &str,
    env: Option<&str>,
    name: Option<&str>,
) -> Result<(ApiKeyRecord, String), TenantError> {
    check_workspace(workspace)?;
    if let Some(env) = env {
        check_env(env)?;
    }
    let key = generate_key()?;
    let record = ApiKeyRecord {
        id: Uuid::new_v4(),
        workspace: workspace.to_string(),
        env: env.map(str::to_string),
        name: name.map(str::to_string),
        digest: token_digest(&hashed_signing_key(&key)),
        created_at: Utc::now(),
        revoked_at: None,
    };
    store.create_api_key(&record)?;
    Ok((record, key))
}

/// Revokes a key by id.
pub fn revoke_key(store: &dyn Store, id: Uuid) -> Result<(), TenantError> {
    if store.revoke_api_key(id, Utc::now())? {
        Ok(())
    } else {
        Err(TenantError::UnknownKey(id))
    }
}

/// The environment a request selects: the header if sent (and allowed by the key), else the key's or the default.
fn pick_env(bound: Option<&str>, header: Option<&str>) -> Result<String, TenantError> {
    if let Some(h) = header {
        check_env(h)?;
    }
    match (bound, header) {
        (Some(b), Some(h)) if b != h => Err(TenantError::InvalidKey(format!(
            "this key belongs to environment {b:?}, but x-inngest-env selects {h:?}"
        ))),
        (Some(b), _) => Ok(b.to_string()),
        (None, Some(h)) => Ok(h.to_string()),
        (None, None) => Ok(DEFAULT_ENV.to_string()),
    }
}

/// Resolves the tenant scope of a request from its bearer token and `x-inngest-env`.
///
/// `dev`: a request without a valid key belongs to the default workspace.
pub fn resolve(
    store: &dyn Store,
    configured_keys: &[String],
    dev: bool,
    authorization: Option<&str>,
    env_header: Option<&str>,
) -> Result<String, TenantError> {
    let token = authorization.map(|h| h.strip_prefix("Bearer ").unwrap_or("").trim());
    let Some(token) = token else {
        if dev {
            return Ok(scope(DEFAULT_WORKSPACE, &pick_env(None, env_header)?));
        }
        return Err(TenantError::MissingKey);
    };
    let configured = configured_keys
        .iter()
        .map(|k| hashed_signing_key(k))
        .fold(false, |found, expected| {
            found | bool::from(expected.as_bytes().ct_eq(token.as_bytes()))
        });
    if configured {
        return Ok(scope(DEFAULT_WORKSPACE, &pick_env(None, env_header)?));
    }
    let found = if token.is_empty() {
        None
    } else {
        store.find_api_key(&token_digest(token))?
    };
    match found {
        Some(k) if k.revoked_at.is_none() => Ok(scope(
            &k.workspace,
            &pick_env(k.env.as_deref(), env_header)?,
        )),
        _ if dev => Ok(scope(DEFAULT_WORKSPACE, &pick_env(None, env_header)?)),
        Some(_) => Err(TenantError::InvalidKey("the API key was revoked".into())),
        None => Err(TenantError::InvalidKey("the API key is not valid".into())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbx_store::SqliteStore;

    fn bearer(key: &str) -> String {
        format!("Bearer {}", hashed_signing_key(key))
    }

    #[test]
    fn keys_resolve_to_their_tenant() {
        let store = SqliteStore::in_memory().unwrap();
        let (bound, key_a) = create_key(&store, "acme", Some("staging"), Some("ci")).unwrap();
        let (_, key_b) = create_key(&store, "globex", None, None).unwrap();
        assert!(key_a.starts_with(KEY_PREFIX) && key_a.len() == KEY_PREFIX.len() + 64);
        let stored = store.list_api_keys().unwrap();
        assert!(stored
            .iter()
            .all(|k| !k.digest.contains(&key_a[KEY_PREFIX.len()..])));
        let r = |auth: Option<&str>, env: Option<&str>| resolve(&store, &[], false, auth, env);
        assert_eq!(r(Some(&bearer(&key_a)), None).unwrap(), "acme/staging");
        assert_eq!(
            r(Some(&bearer(&key_a)), Some("staging")).unwrap(),
            "acme/staging"
        );
        assert!(matches!(
            r(Some(&bearer(&key_a)), Some("production")),
            Err(TenantError::InvalidKey(_))
        ));
        assert_eq!(r(Some(&bearer(&key_b)), None).unwrap(), "globex/production");
        assert_eq!(
            r(Some(&bearer(&key_b)), Some("feature/x")).unwrap(),
            "globex/feature/x"
        );
        assert!(matches!(
            r(Some(&bearer(&key_b)), Some("a b")),
            Err(TenantError::BadName(_))
        ));
        assert!(matches!(r(None, None), Err(TenantError::MissingKey)));
        assert!(matches!(
            r(Some("Bearer nope"), None),
            Err(TenantError::InvalidKey(_))
        ));
        // The raw key (not its hash) is not a bearer token.
        assert!(r(Some(&format!("Bearer {key_a}")), None).is_err());
        revoke_key(&store, bound.id).unwrap();
        assert!(matches!(
            r(Some(&bearer(&key_a)), None),
            Err(TenantError::InvalidKey(_))
        ));
        assert!(matches!(
            revoke_key(&store, bound.id),
            Err(TenantError::UnknownKey(_))
        ));
    }

    #[test]
    fn configured_keys_and_dev_mode_use_the_default_workspace() {
        let store = SqliteStore::in_memory().unwrap();
        let keys = vec!["signkey-prod-00ff".to_string()];
        let auth = bearer("signkey-prod-00ff");
        assert_eq!(
            resolve(&store, &keys, false, Some(&auth), None).unwrap(),
            "default/production"
        );
        assert_eq!(
            resolve(&store, &keys, false, Some(&auth), Some("main")).unwrap(),
            "default/main"
        );
        assert_eq!(
            resolve(&store, &[], true, None, None).unwrap(),
            "default/production"
        );
        assert_eq!(
            resolve(&store, &[], true, Some("Bearer junk"), None).unwrap(),
            "default/production"
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(check_workspace("acme-1").is_ok());
        for bad in ["", "Acme", "a/b", "-a", &"a".repeat(64)] {
            assert!(check_workspace(bad).is_err(), "{bad}");
        }
        assert!(check_env("feature/login").is_ok());
        assert!(check_env("").is_err() && check_env("a b").is_err() && check_env("é").is_err());
    }
}
