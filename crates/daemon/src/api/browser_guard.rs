//! Browser guard: keeps web pages from driving sbxd through the user's browser.
//!
//! In dev mode nothing authenticates a request, so any page the user opens
//! could otherwise call the API: with a "simple" request a browser sends
//! without a CORS preflight (a POST with `Content-Type: text/plain`), or, after
//! DNS rebinding, as if it were sbxd's own origin. The guard refuses
//! * a `Host` (or absolute request URI) that is not this server: a loopback
//!   name (`localhost`, `*.localhost`, `127.0.0.1`, `[::1]`) or the listen
//!   address, with the listen port or none, or a name given by
//!   `--http-allowed-host` (any port). A rebinding page's requests carry its
//!   own name;
//! * an unsafe method (anything but GET, HEAD, OPTIONS, TRACE), or a
//!   WebSocket upgrade (the console's terminal), whose `Origin`
//!   is not this server (same host names, listen port), or whose
//!   `Sec-Fetch-Site` says another site;
//! * an unsafe method with a body on a JSON route without
//!   `Content-Type: application/json`, which no page can send cross-origin
//!   without a preflight (that sbxd never answers). The routes whose bodies
//!   are not JSON (file and package uploads, the console's form sign-in,
//!   webhook deliveries) are
//!   exempt; their methods or the checks above cover them.
//!
//! On by default in dev mode only (`--http-browser-guard`): with signing keys,
//! a page cannot send the `Authorization` header cross-origin, and the
//! console's cookie is `SameSite=Strict` and CSRF-checked.

use crate::config::Config;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;
use std::sync::Arc;

/// Why the guard refused a request (answered in `super::error`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GuardError {
    /// `Host` names another server (DNS rebinding) or is missing.
    #[error("Host {0:?} is not this server; use 127.0.0.1, localhost or the listen address (more names: --http-allowed-host)")]
    ForeignHost(String),
    /// An unsafe request from a page of another origin.
    #[error("cross-origin request refused: Origin {0:?} is not this server")]
    ForeignOrigin(String),
    /// An unsafe request the browser marks as coming from another site.
    #[error("cross-site request refused (Sec-Fetch-Site: {0})")]
    CrossSite(String),
    /// A body on a JSON route without the JSON content type.
    #[error("this route takes a JSON body: send Content-Type: application/json (got {0:?})")]
    NotJson(String),
}

/// The guard's settings, from the configuration.
#[derive(Debug, Clone)]
pub struct BrowserGuard {
    enabled: bool,
    listen: SocketAddr,
    allowed_hosts: Vec<String>,
}

impl BrowserGuard {
    /// The guard for this configuration (`http.browser_guard`, listen address, extra names).
    pub fn new(config: &Config) -> Self {
        BrowserGuard {
            enabled: config.http.browser_guard,
            listen: config.listen,
            allowed_hosts: config
                .http
                .allowed_hosts
                .iter()
                .map(|h| h.to_ascii_lowercase())
                .collect(),
        }
    }

    /// Decides on one request from its method, URI and headers.
    pub fn check(&self, method: &Method, uri: &Uri, headers: &HeaderMap) -> Result<(), GuardError> {
        if !self.enabled {
            return Ok(());
        }
        let host = header(headers, "host");
        let authorities = [host, uri.authority().map(|a| a.as_str())];
        if authorities.iter().all(Option::is_none) {
            return Err(GuardError::ForeignHost(String::new()));
        }
        for authority in authorities.into_iter().flatten() {
            let ours = split_authority(authority)
                .is_some_and(|(name, port)| self.is_this_server(&name, port, false));
            if !ours {
                return Err(GuardError::ForeignHost(authority.to_string()));
            }
        }
        // A WebSocket handshake is a GET, but CORS does not protect it: a
        // page of any origin could open the terminal. It is checked as an
        // unsafe request.
        if matches!(
            *method,
            Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE
        ) && !crate::console::is_websocket(headers)
        {
            return Ok(());
        }
        if let Some(origin) = header(headers, "origin") {
            if !self.is_our_origin(origin) {
                return Err(GuardError::ForeignOrigin(origin.to_string()));
            }
        }
        if let Some(site) = header(headers, "sec-fetch-site") {
            if !matches!(site, "same-origin" | "none") {
                return Err(GuardError::CrossSite(site.to_string()));
            }
        }
        if has_body(headers) && !body_is_not_json(method, uri.path()) {
            let content_type = header(headers, "content-type").unwrap_or("");
            if !is_json(content_type) {
                return Err(GuardError::NotJson(content_type.to_string()));
            }
        }
        Ok(())
    }

    /// Whether `name` (lower case) with `port` is this server. A Host header
    /// may omit the port; an origin's port is always known.
    fn is_this_server(&self, name: &str, port: Option<u16>, from_origin: bool) -> bool {
        if self.allowed_hosts.iter().any(|h| h == name) {
            // A name in front of a proxy: the proxy's port is not ours.
            return true;
        }
        let listen_ip = self.listen.ip();
        let ours = name == "localhost"
            || name.ends_with(".localhost")
            || name == "127.0.0.1"
            || name == "[::1]"
            || name == host_of(listen_ip)
            // On a wildcard address every address of the host is the
            // listen address; an address cannot be rebound, only a name.
            || (listen_ip.is_unspecified() && is_ip_literal(name));
        let port_ok = match port {
            Some(p) => p == self.listen.port(),
            None => !from_origin,
        };
        ours && port_ok
    }

    /// Whether an `Origin` header value is this server's origin.
    fn is_our_origin(&self, origin: &str) -> bool {
        let Some((scheme, authority)) = origin.split_once("://") else {
            return false; // "null" (sandboxed frames, file: pages) and garbage
        };
        let default_port = match scheme.to_ascii_lowercase().as_str() {
            "http" => 80,
            "https" => 443,
            _ => return false,
        };
        match split_authority(authority) {
            Some((name, port)) => {
                self.is_this_server(&name, Some(port.unwrap_or(default_port)), true)
            }
            None => false,
        }
    }
}

/// Middleware: refuses requests the guard does not let through.
pub async fn layer(State(guard): State<Arc<BrowserGuard>>, req: Request, next: Next) -> Response {
    match guard.check(req.method(), req.uri(), req.headers()) {
        Ok(()) => next.run(req).await,
        Err(e) => e.into_response(),
    }
}

/// A header's text, if present and valid.
fn header<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// `host[:port]` or `[v6][:port]` into the lower-case host (brackets kept) and port.
fn split_authority(authority: &str) -> Option<(String, Option<u16>)> {
    let authority = authority.trim();
    let (name, port) = if let Some(rest) = authority.strip_prefix('[') {
        let (inside, after) = rest.split_once(']')?;
        let port = match after {
            "" => None,
            p => Some(p.strip_prefix(':')?),
        };
        (format!("[{inside}]"), port)
    } else {
        match authority.split_once(':') {
            Some((name, port)) => (name.to_string(), Some(port)),
            None => (authority.to_string(), None),
        }
    };
    if name.is_empty() || name.contains('@') {
        return None;
    }
    let port = match port {
        None | Some("") => None,
        Some(p) => Some(p.parse::<u16>().ok()?),
    };
    Some((name.to_ascii_lowercase(), port))
}

/// How the listen address appears in a Host header.
fn host_of(ip: std::net::IpAddr) -> String {
    match ip {
        std::net::IpAddr::V4(v4) => v4.to_string(),
        std::net::IpAddr::V6(v6) => format!("[{v6}]"),
    }
}

fn is_ip_literal(name: &str) -> bool {
    let bare = name
        .strip_prefix('[')
        .and_then(|n| n.strip_suffix(']'))
        .unwrap_or(name);
    bare.parse::<std::net::IpAddr>().is_ok()
}

/// Whether the request has a body: a non-zero length, or a chunked one.
fn has_body(headers: &HeaderMap) -> bool {
    if headers.contains_key("transfer-encoding") {
        return true;
    }
    header(headers, "content-length").is_some_and(|n| n != "0")
}

/// Routes whose bodies are not JSON: file upload (raw bytes), package and
/// image uploads (tarballs), the console sign-in (JSON or a form, origin-checked itself) and
/// webhook deliveries (whatever the sender sends; the URL is the credential, so a
/// page can do nothing with it that its sender could not).
fn body_is_not_json(method: &Method, path: &str) -> bool {
    let segments: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(
        (method, segments.as_slice()),
        (&Method::PUT, ["v2", "sandboxes", _, "files"])
            | (&Method::POST, ["v1", "connect", "packages"])
            | (&Method::POST, ["v1", "images"])
            | (&Method::POST, ["v1", "images", "build"])
            | (&Method::POST, ["console", "session"])
            | (&Method::POST, ["v1", "connect", "webhooks", _])
    )
}

/// `application/json`, with or without parameters (`; charset=utf-8`).
fn is_json(content_type: &str) -> bool {
    let media = content_type.split(';').next().unwrap_or("").trim();
    media.eq_ignore_ascii_case("application/json")
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn guard() -> BrowserGuard {
        BrowserGuard {
            enabled: true,
            listen: "127.0.0.1:8731".parse().unwrap(),
            allowed_hosts: vec!["sbx.example.com".into()],
        }
    }

    fn check(method: Method, path: &str, headers: &[(&str, &str)]) -> Result<(), GuardError> {
        let mut map = HeaderMap::new();
        for (name, value) in headers {
            map.insert(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        let uri: Uri = path.parse().unwrap();
        guard().check(&method, &uri, &map)
    }

    const HOST: (&str, &str) = ("host", "127.0.0.1:8731");
    const JSON: (&str, &str) = ("content-type", "application/json");
    const BODY: (&str, &str) = ("content-length", "2");

    #[test]
    fn loopback_names_and_the_listen_address_are_this_server() {
        for host in [
            "127.0.0.1:8731",
            "127.0.0.1",
            "localhost:8731",
            "LocalHost",
            "app.localhost:8731",
            "[::1]:8731",
            "sbx.example.com",
            "sbx.example.com:443",
        ] {
            assert_eq!(
                check(Method::GET, "/healthz", &[("host", host)]),
                Ok(()),
                "{host}"
            );
        }
        for host in [
            "evil.example",
            "evil.example:8731",
            "127.0.0.1:8732",
            "localhost:80",
            "127.0.0.2:8731",
            "localhost.evil.example",
            "[::1",
            "::1:8731",
            "user@127.0.0.1:8731",
            "",
        ] {
            assert!(
                matches!(
                    check(Method::GET, "/healthz", &[("host", host)]),
                    Err(GuardError::ForeignHost(_))
                ),
                "{host}"
            );
        }
        assert!(matches!(
            check(Method::GET, "/healthz", &[]),
            Err(GuardError::ForeignHost(_))
        ));
        // An absolute request URI names the host too.
        assert!(matches!(
            check(Method::GET, "http://evil.example/healthz", &[HOST]),
            Err(GuardError::ForeignHost(_))
        ));
    }

    #[test]
    fn unsafe_requests_must_come_from_this_origin() {
        let exec = "/v2/sandboxes/x/exec";
        for origin in [
            "http://127.0.0.1:8731",
            "http://localhost:8731",
            "https://sbx.example.com",
        ] {
            let headers = [HOST, JSON, BODY, ("origin", origin)];
            assert_eq!(check(Method::POST, exec, &headers), Ok(()), "{origin}");
        }
        for origin in [
            "http://evil.example",
            "http://evil.example:8731",
            "http://127.0.0.1:3000",
            "http://localhost",
            "null",
            "file://",
            "ftp://127.0.0.1:8731",
        ] {
            let headers = [HOST, JSON, BODY, ("origin", origin)];
            assert!(
                matches!(
                    check(Method::POST, exec, &headers),
                    Err(GuardError::ForeignOrigin(_))
                ),
                "{origin}"
            );
        }
        // A WebSocket handshake is a GET that CORS does not protect.
        let ws = ("upgrade", "websocket");
        let terminal = "/v1/sandboxes/x/terminal";
        assert!(matches!(
            check(
                Method::GET,
                terminal,
                &[HOST, ws, ("origin", "http://evil.example")]
            ),
            Err(GuardError::ForeignOrigin(_))
        ));
        let ours = ("origin", "http://127.0.0.1:8731");
        assert_eq!(check(Method::GET, terminal, &[HOST, ws, ours]), Ok(()));
        // Safe methods may come from anywhere (the page cannot read the answer).
        let get = [HOST, ("origin", "http://evil.example")];
        assert_eq!(check(Method::GET, "/v2/sandboxes", &get), Ok(()));
        for site in ["cross-site", "same-site"] {
            let headers = [HOST, JSON, BODY, ("sec-fetch-site", site)];
            assert_eq!(
                check(Method::DELETE, "/v2/sandboxes/x", &headers),
                Err(GuardError::CrossSite(site.into()))
            );
        }
        for site in ["same-origin", "none"] {
            let headers = [HOST, JSON, BODY, ("sec-fetch-site", site)];
            assert_eq!(check(Method::POST, exec, &headers), Ok(()), "{site}");
        }
    }

    #[test]
    fn json_routes_need_the_json_content_type_when_they_have_a_body() {
        let exec = "/v2/sandboxes/x/exec";
        for ct in [
            "application/json",
            "application/json; charset=utf-8",
            "Application/JSON",
        ] {
            assert_eq!(
                check(Method::POST, exec, &[HOST, BODY, ("content-type", ct)]),
                Ok(()),
                "{ct}"
            );
        }
        for ct in [
            "text/plain",
            "text/plain;charset=UTF-8",
            "application/x-www-form-urlencoded",
            "multipart/form-data; boundary=x",
            "application/jsonp",
        ] {
            assert!(
                matches!(
                    check(Method::POST, exec, &[HOST, BODY, ("content-type", ct)]),
                    Err(GuardError::NotJson(_))
                ),
                "{ct}"
            );
        }
        assert!(matches!(
            check(Method::POST, exec, &[HOST, BODY]),
            Err(GuardError::NotJson(_))
        ));
        let chunked = ("transfer-encoding", "chunked");
        assert!(matches!(
            check(Method::PUT, "/v1/secrets/A", &[HOST, chunked]),
            Err(GuardError::NotJson(_))
        ));
        // No body: no content type needed (the SDK's pause and resume).
        assert_eq!(
            check(Method::POST, "/v2/sandboxes/x/pause", &[HOST]),
            Ok(())
        );
        let empty = ("content-length", "0");
        assert_eq!(
            check(Method::POST, "/v2/sandboxes/x/resume", &[HOST, empty]),
            Ok(())
        );
        // Routes whose bodies are not JSON.
        let octets = ("content-type", "application/octet-stream");
        assert_eq!(
            check(
                Method::PUT,
                "/v2/sandboxes/x/files?path=/a",
                &[HOST, BODY, octets]
            ),
            Ok(())
        );
        let gzip = ("content-type", "application/gzip");
        assert_eq!(
            check(Method::POST, "/v1/connect/packages", &[HOST, BODY, gzip]),
            Ok(())
        );
        let tar = ("content-type", "application/x-tar");
        assert_eq!(
            check(Method::POST, "/v1/images?name=a&tag=1", &[HOST, BODY, tar]),
            Ok(())
        );
        assert_eq!(
            check(Method::POST, "/v1/images/build?name=a", &[HOST, BODY, tar]),
            Ok(())
        );
        let form = ("content-type", "application/x-www-form-urlencoded");
        assert_eq!(
            check(
                Method::POST,
                "/v1/connect/webhooks/whk_x",
                &[HOST, BODY, form]
            ),
            Ok(())
        );
        assert_eq!(
            check(Method::POST, "/console/session", &[HOST, BODY, form]),
            Ok(())
        );
    }

    #[test]
    fn off_lets_everything_through_and_wildcards_accept_addresses() {
        let mut g = guard();
        g.enabled = false;
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("evil.example"));
        headers.insert("content-type", HeaderValue::from_static("text/plain"));
        headers.insert("content-length", HeaderValue::from_static("2"));
        let uri: Uri = "/v2/sandboxes/x/exec".parse().unwrap();
        assert_eq!(g.check(&Method::POST, &uri, &headers), Ok(()));
        let g = BrowserGuard {
            enabled: true,
            listen: "0.0.0.0:8731".parse().unwrap(),
            allowed_hosts: vec![],
        };
        let mut headers = HeaderMap::new();
        headers.insert("host", HeaderValue::from_static("192.0.2.7:8731"));
        assert_eq!(g.check(&Method::GET, &uri, &headers), Ok(()));
        headers.insert("host", HeaderValue::from_static("rebound.example:8731"));
        assert!(g.check(&Method::GET, &uri, &headers).is_err());
    }
}
