//! The web console's server side: in-memory sign-in sessions (an opaque cookie
//! id mapped to the key text), per-session CSRF tokens, and the embedded assets.
//!
//! A session never replaces key verification: every request authenticated by
//! the cookie is turned back into the key's bearer token and verified by
//! `api::auth` exactly like an `Authorization` header.

pub mod assets;

use axum::http::{HeaderMap, Method};
use sbx_api_types::signing_key::hashed_signing_key;
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use subtle::ConstantTimeEq;

/// Name of the session cookie.
pub const COOKIE: &str = "sbx_session";
/// Header that must carry the session's CSRF token on unsafe cookie-authenticated requests.
pub const CSRF_HEADER: &str = "x-csrf-token";
/// A session unused for this long is forgotten.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(12 * 3600);
/// At most this many sessions are kept; the least recently used goes first.
pub const MAX_SESSIONS: usize = 1024;

/// Errors of the console's session handling.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ConsoleError {
    /// The cookie names no live session.
    #[error("the console session is unknown or has expired; sign in again")]
    SessionInvalid,
    /// An unsafe request authenticated by the cookie lacks the session's token.
    #[error("X-CSRF-Token is missing or does not match the console session")]
    CsrfMismatch,
    /// A cross-origin sign-in attempt.
    #[error("sign-in must come from the console's own origin")]
    CrossOrigin,
    /// A WebSocket upgrade authenticated by the cookie from another origin
    /// (or with no `Origin`): cross-site WebSocket hijacking.
    #[error(
        "a WebSocket authenticated by the console session must come from the console's own origin"
    )]
    CrossOriginSocket,
    /// The sign-in body has no key.
    #[error("key is required")]
    KeyMissing,
    /// The sign-in body cannot be parsed.
    #[error("invalid sign-in body: {0}")]
    BadBody(String),
    /// No embedded asset of that name.
    #[error("no console asset named {0:?}")]
    AssetNotFound(String),
}

/// One signed-in browser.
struct Session {
    key: String,
    csrf: String,
    last_used: Instant,
}

/// A new session's cookie id and CSRF token.
#[derive(Debug, Clone)]
pub struct NewSession {
    /// Opaque random cookie value.
    pub id: String,
    /// Token the page sends back in `X-CSRF-Token`.
    pub csrf: String,
}

/// The live sessions, in sbxd's memory only (a restart signs everybody out).
pub struct Sessions {
    map: Mutex<HashMap<String, Session>>,
    secure_cookie: bool,
}

/// 256 bits from the OS random source (two v4 UUIDs use getrandom; 244 random bits).
fn random_token() -> String {
    let a = uuid::Uuid::new_v4();
    let b = uuid::Uuid::new_v4();
    format!("{}{}", a.simple(), b.simple())
}

impl Sessions {
    /// An empty store; `secure_cookie` adds `Secure` to the cookie (not on loopback).
    pub fn new(secure_cookie: bool) -> Self {
        Sessions {
            map: Mutex::new(HashMap::new()),
            secure_cookie,
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Session>> {
        self.map.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts a session for an already verified key, ending the caller's previous one.
    pub fn create(&self, previous: &HeaderMap, key: String) -> NewSession {
        self.remove(previous);
        let new = NewSession {
            id: random_token(),
            csrf: random_token(),
        };
        let now = Instant::now();
        let mut map = self.lock();
        map.retain(|_, s| now.duration_since(s.last_used) < IDLE_TIMEOUT);
        while map.len() >= MAX_SESSIONS {
            let oldest = map
                .iter()
                .min_by_key(|(_, s)| s.last_used)
                .map(|(id, _)| id.clone());
            match oldest {
                Some(id) => map.remove(&id),
                None => break,
            };
        }
        map.insert(
            new.id.clone(),
            Session {
                key,
                csrf: new.csrf.clone(),
                last_used: now,
            },
        );
        new
    }

    /// Forgets the request's session, if any.
    pub fn remove(&self, headers: &HeaderMap) {
        if let Some(id) = cookie_value(headers) {
            self.lock().remove(&id);
        }
    }

    /// The request's live session as (key, csrf), refreshing its idle timer.
    fn lookup(&self, headers: &HeaderMap) -> Result<Option<(String, String)>, ConsoleError> {
        let Some(id) = cookie_value(headers) else {
            return Ok(None);
        };
        let now = Instant::now();
        let mut map = self.lock();
        match map.get_mut(&id) {
            Some(s) if now.duration_since(s.last_used) < IDLE_TIMEOUT => {
                s.last_used = now;
                Ok(Some((s.key.clone(), s.csrf.clone())))
            }
            Some(_) => {
                map.remove(&id);
                Err(ConsoleError::SessionInvalid)
            }
            None => Err(ConsoleError::SessionInvalid),
        }
    }

    /// The `Authorization` value that the request's session cookie stands for
    /// (`None` without a cookie). Unsafe methods must carry the CSRF token.
    pub fn bearer_for(
        &self,
        method: &Method,
        headers: &HeaderMap,
    ) -> Result<Option<String>, ConsoleError> {
        let Some((key, csrf)) = self.lookup(headers)? else {
            return Ok(None);
        };
        // A WebSocket handshake is a GET that no CSRF token can guard (a page
        // cannot set headers on it) and that CORS does not stop: the browser
        // sends the cookie and its page's `Origin`, which must be ours.
        if is_websocket(headers) {
            if !headers.contains_key("origin") {
                return Err(ConsoleError::CrossOriginSocket);
            }
            check_same_origin(headers).map_err(|_| ConsoleError::CrossOriginSocket)?;
        }
        if !is_safe(method) {
            let sent = headers
                .get(CSRF_HEADER)
                .map(|v| v.as_bytes())
                .unwrap_or_default();
            if !bool::from(sent.ct_eq(csrf.as_bytes())) {
                return Err(ConsoleError::CsrfMismatch);
            }
        }
        Ok(Some(format!("Bearer {}", hashed_signing_key(&key))))
    }

    /// The CSRF token of the request's session, if it has a live one.
    pub fn csrf_for(&self, headers: &HeaderMap) -> Option<String> {
        self.lookup(headers).ok().flatten().map(|(_, csrf)| csrf)
    }

    /// `Set-Cookie` value for a new session.
    pub fn set_cookie(&self, id: &str) -> String {
        format!(
            "{COOKIE}={id}; HttpOnly; SameSite=Strict; Path=/{}",
            if self.secure_cookie { "; Secure" } else { "" }
        )
    }

    /// `Set-Cookie` value that deletes the session cookie.
    pub fn clear_cookie(&self) -> String {
        format!(
            "{COOKIE}=; HttpOnly; SameSite=Strict; Path=/; Max-Age=0{}",
            if self.secure_cookie { "; Secure" } else { "" }
        )
    }
}

fn is_safe(method: &Method) -> bool {
    matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS)
}

/// Whether the request asks to be upgraded to a WebSocket.
pub fn is_websocket(headers: &HeaderMap) -> bool {
    headers
        .get("upgrade")
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.trim().eq_ignore_ascii_case("websocket"))
}

/// The session cookie's value, if the request carries one.
fn cookie_value(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all("cookie")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
        .find(|(name, _)| *name == COOKIE)
        .map(|(_, value)| value.trim().to_string())
        .filter(|v| !v.is_empty())
}

/// Requests that need no credential: the page, its assets and signing in.
pub fn is_public(method: &Method, path: &str) -> bool {
    match *method {
        Method::GET | Method::HEAD => path == "/" || path.starts_with("/console/assets/"),
        Method::POST => path == "/console/session",
        _ => false,
    }
}

/// The key of a sign-in request, refused when it comes from another origin.
pub fn sign_in_key(headers: &HeaderMap, body: &[u8]) -> Result<String, ConsoleError> {
    check_same_origin(headers)?;
    parse_sign_in(headers, body)
}

/// Refuses a sign-in whose `Origin` (browsers send it on POST) is not this host.
pub fn check_same_origin(headers: &HeaderMap) -> Result<(), ConsoleError> {
    let Some(origin) = headers.get("origin").and_then(|v| v.to_str().ok()) else {
        return Ok(());
    };
    let host = headers
        .get("host")
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default();
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
        .unwrap_or_default();
    if !host.is_empty() && origin_host == host {
        Ok(())
    } else {
        Err(ConsoleError::CrossOrigin)
    }
}

/// The key from a sign-in body: JSON `{"key": ...}` or a form `key=...`.
pub fn parse_sign_in(headers: &HeaderMap, body: &[u8]) -> Result<String, ConsoleError> {
    #[derive(serde::Deserialize)]
    struct SignIn {
        key: Option<String>,
    }
    let is_form = headers.get("content-type").is_some_and(|v| {
        v.as_bytes()
            .starts_with(b"application/x-www-form-urlencoded")
    });
    let parsed: SignIn = if is_form {
        serde_urlencoded::from_bytes(body).map_err(|e| ConsoleError::BadBody(e.to_string()))?
    } else {
        serde_json::from_slice(body).map_err(|e| ConsoleError::BadBody(e.to_string()))?
    };
    parsed
        .key
        .map(|k| k.trim().to_string())
        .filter(|k| !k.is_empty())
        .ok_or(ConsoleError::KeyMissing)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_cookie(id: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        let v = format!("other=1; {COOKIE}={id}");
        h.insert("cookie", HeaderValue::from_str(&v).unwrap());
        h
    }

    #[test]
    fn cookie_maps_to_the_keys_bearer_and_unsafe_methods_need_the_token() {
        let s = Sessions::new(false);
        let new = s.create(&HeaderMap::new(), "signkey-test-00ff".into());
        let mut h = with_cookie(&new.id);
        let want = format!("Bearer {}", hashed_signing_key("signkey-test-00ff"));
        assert_eq!(s.bearer_for(&Method::GET, &h), Ok(Some(want.clone())));
        assert_eq!(
            s.bearer_for(&Method::POST, &h),
            Err(ConsoleError::CsrfMismatch)
        );
        h.insert(CSRF_HEADER, HeaderValue::from_static("wrong"));
        assert_eq!(
            s.bearer_for(&Method::DELETE, &h),
            Err(ConsoleError::CsrfMismatch)
        );
        h.insert(CSRF_HEADER, HeaderValue::from_str(&new.csrf).unwrap());
        assert_eq!(s.bearer_for(&Method::PUT, &h), Ok(Some(want)));
        s.remove(&h);
        assert_eq!(
            s.bearer_for(&Method::GET, &h),
            Err(ConsoleError::SessionInvalid)
        );
        assert_eq!(s.bearer_for(&Method::GET, &HeaderMap::new()), Ok(None));
    }

    #[test]
    fn signing_in_again_ends_the_previous_session() {
        let s = Sessions::new(false);
        let first = s.create(&HeaderMap::new(), "k".into());
        let old = with_cookie(&first.id);
        let second = s.create(&old, "k".into());
        assert_eq!(
            s.bearer_for(&Method::GET, &old),
            Err(ConsoleError::SessionInvalid)
        );
        assert!(s.bearer_for(&Method::GET, &with_cookie(&second.id)).is_ok());
    }

    #[test]
    fn cookies_are_http_only_strict_and_secure_off_loopback() {
        let c = Sessions::new(true).set_cookie("abc");
        assert_eq!(
            c,
            "sbx_session=abc; HttpOnly; SameSite=Strict; Path=/; Secure"
        );
        assert!(!Sessions::new(false).set_cookie("abc").contains("Secure"));
        assert!(Sessions::new(false).clear_cookie().contains("Max-Age=0"));
    }

    #[test]
    fn sign_in_bodies_and_origins() {
        let mut h = HeaderMap::new();
        assert_eq!(parse_sign_in(&h, br#"{"key":" k1 "}"#), Ok("k1".into()));
        assert_eq!(parse_sign_in(&h, b"{}"), Err(ConsoleError::KeyMissing));
        h.insert(
            "content-type",
            HeaderValue::from_static("application/x-www-form-urlencoded"),
        );
        assert_eq!(parse_sign_in(&h, b"key=k%2B2"), Ok("k+2".into()));
        h.insert("host", HeaderValue::from_static("127.0.0.1:8731"));
        assert!(check_same_origin(&h).is_ok());
        h.insert("origin", HeaderValue::from_static("http://127.0.0.1:8731"));
        assert!(check_same_origin(&h).is_ok());
        h.insert("origin", HeaderValue::from_static("https://evil.example"));
        assert_eq!(check_same_origin(&h), Err(ConsoleError::CrossOrigin));
    }

    #[test]
    fn public_paths() {
        assert!(is_public(&Method::GET, "/"));
        assert!(is_public(&Method::GET, "/console/assets/app.js"));
        assert!(is_public(&Method::POST, "/console/session"));
        assert!(!is_public(&Method::DELETE, "/console/session"));
        assert!(!is_public(&Method::GET, "/console/session"));
        assert!(!is_public(&Method::GET, "/v2/sandboxes"));
    }
}
