//! Preview URLs over HTTP: a request for `{port}-{id}.{domain}` (any port
//! but envd's) is forwarded, as HTTP/1.1 over a `port_open` stream, to the
//! server listening on that port inside the sandbox; the response streams
//! back. Upgrades (WebSocket, anything with `Upgrade`) become a byte pipe
//! between the client and the guest server once the guest answers `101`.
//!
//! What is forwarded: method, origin-form target, the headers minus the
//! hop-by-hop ones (RFC 9110 §7.6.1, and those named in `Connection`) and
//! minus `e2b-traffic-access-token` (the guest never sees the token), Host as
//! the client sent it, plus `X-Forwarded-For` (appended) and
//! `X-Forwarded-Proto`. Errors before the guest answers are
//! `{"code": <status>, "message": …}` bodies: 404 unknown sandbox, 409 not
//! running, 401 token missing, 403 token wrong, 502 nothing listening or the
//! guest server broke the connection.

use crate::server::ClientConn;
use crate::service::preview::{Preview, PreviewError, TRAFFIC_TOKEN_HEADER};
use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, Version};
use axum::response::{IntoResponse, Response};
use axum::Router;
use hyper_util::rt::TokioIo;
use std::sync::Arc;

/// A router that forwards every request to `port` of sandbox `id`.
pub fn router(preview: Arc<Preview>, port: u16, id: String) -> Router {
    Router::new().fallback(move |req: Request| {
        let (preview, id) = (preview.clone(), id.clone());
        // Its own request span like API requests (no X-Request-Id on the guest's answer).
        let request_id = uuid::Uuid::new_v4().to_string();
        let span = super::forward::request_span(&request_id, &req);
        async move {
            use tracing::Instrument;
            let resp = proxy(&preview, port, &id, req)
                .instrument(span.clone())
                .await;
            span.record("status", i64::from(resp.status().as_u16()));
            resp
        }
    })
}

async fn proxy(preview: &Preview, port: u16, id: &str, req: Request) -> Response {
    let token = req
        .headers()
        .get(TRAFFIC_TOKEN_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    let opened = match preview.open(id, port, token.as_deref()).await {
        Ok(o) => o,
        Err(e) => return Failure::Preview(e).into_response(),
    };
    match forward(opened.stream, req).await {
        Ok(resp) => resp,
        Err(e) => Failure::Guest(port, e).into_response(),
    }
}

/// Why a preview request got no answer from the guest.
enum Failure {
    /// Refused before connecting.
    Preview(PreviewError),
    /// The guest server broke the HTTP exchange.
    Guest(u16, hyper::Error),
}

/// The one place where preview failures become statuses.
impl IntoResponse for Failure {
    fn into_response(self) -> Response {
        let (status, message) = match self {
            Failure::Preview(e) => {
                let status = match &e {
                    PreviewError::NotFound(_) => StatusCode::NOT_FOUND,
                    PreviewError::NotRunning(..) => StatusCode::CONFLICT,
                    PreviewError::TokenMissing => StatusCode::UNAUTHORIZED,
                    PreviewError::TokenWrong => StatusCode::FORBIDDEN,
                    PreviewError::NothingListening(_) | PreviewError::Unavailable(..) => {
                        StatusCode::BAD_GATEWAY
                    }
                };
                (status, e.to_string())
            }
            Failure::Guest(port, e) => (
                StatusCode::BAD_GATEWAY,
                format!("the server on port {port} in the sandbox did not answer: {e}"),
            ),
        };
        tracing::debug!(%status, %message, "preview request refused");
        let body = serde_json::json!({"code": status.as_u16(), "message": message});
        (status, axum::Json(body)).into_response()
    }
}

/// Sends `req` over `stream` and returns the guest's response (for a
/// `101`, after arranging the byte pipe).
async fn forward<S>(stream: S, mut req: Request) -> Result<Response, hyper::Error>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Send + Unpin + 'static,
{
    let upgrade = wants_upgrade(req.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let client = req.extensions().get::<ClientConn>().copied();
    let (parts, body) = req.into_parts();
    let mut out = axum::http::Request::new(body);
    *out.method_mut() = parts.method;
    *out.uri_mut() = origin_form(&parts.uri);
    *out.version_mut() = Version::HTTP_11;
    *out.headers_mut() = request_headers(&parts.headers, upgrade, client);
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await?;
    tokio::spawn(async move {
        if let Err(e) = conn.with_upgrades().await {
            tracing::debug!(error = %e, "preview connection to the guest ended");
        }
    });
    let mut resp = sender.send_request(out).await?;
    if resp.status() == StatusCode::SWITCHING_PROTOCOLS {
        if let Some(client_side) = client_side {
            let guest_side = hyper::upgrade::on(&mut resp);
            tokio::spawn(async move {
                let (client, guest) = tokio::join!(client_side, guest_side);
                let (Ok(client), Ok(guest)) = (client, guest) else {
                    return;
                };
                let (mut client, mut guest) = (TokioIo::new(client), TokioIo::new(guest));
                let _ = tokio::io::copy_bidirectional(&mut client, &mut guest).await;
            });
        }
        return Ok(resp.map(Body::new));
    }
    strip_hop_by_hop(resp.headers_mut(), false);
    Ok(resp.map(Body::new))
}

/// Whether the request asks for a protocol switch (`Connection: upgrade` and `Upgrade`).
fn wants_upgrade(headers: &HeaderMap) -> bool {
    headers.contains_key(header::UPGRADE)
        && connection_tokens(headers).any(|t| t.eq_ignore_ascii_case("upgrade"))
}

fn connection_tokens(headers: &HeaderMap) -> impl Iterator<Item = &str> {
    headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|t| !t.is_empty())
}

/// Hop-by-hop headers (RFC 9110 §7.6.1 and the old proxy ones).
const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
];

/// Removes hop-by-hop headers (and those `Connection` names); keeps
/// `Upgrade` when `upgrade` (the caller then sets `Connection: upgrade`).
fn strip_hop_by_hop(headers: &mut HeaderMap, upgrade: bool) {
    let named: Vec<HeaderName> = connection_tokens(headers)
        .filter_map(|t| HeaderName::from_bytes(t.as_bytes()).ok())
        .collect();
    for name in named {
        if !(upgrade && name == header::UPGRADE) {
            headers.remove(name);
        }
    }
    for name in HOP_BY_HOP {
        headers.remove(name);
    }
    if !upgrade {
        headers.remove(header::UPGRADE);
    }
}

/// The headers sent to the guest server.
fn request_headers(incoming: &HeaderMap, upgrade: bool, client: Option<ClientConn>) -> HeaderMap {
    let mut headers = incoming.clone();
    strip_hop_by_hop(&mut headers, upgrade);
    headers.remove(TRAFFIC_TOKEN_HEADER);
    if upgrade {
        headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
    }
    if let Some(client) = client {
        let ip = client.peer.ip().to_string();
        let chain = match headers.get("x-forwarded-for").and_then(|v| v.to_str().ok()) {
            Some(before) if !before.trim().is_empty() => format!("{before}, {ip}"),
            _ => ip,
        };
        if let Ok(v) = HeaderValue::from_str(&chain) {
            headers.insert("x-forwarded-for", v);
        }
        if client.tls {
            headers.insert("x-forwarded-proto", HeaderValue::from_static("https"));
        } else if !headers.contains_key("x-forwarded-proto") {
            headers.insert("x-forwarded-proto", HeaderValue::from_static("http"));
        }
    }
    headers
}

/// `path?query` only (an absolute-form target was already matched to Host).
fn origin_form(uri: &Uri) -> Uri {
    uri.path_and_query()
        .map(|pq| pq.as_str())
        .filter(|pq| pq.starts_with('/'))
        .unwrap_or("/")
        .parse()
        .unwrap_or_else(|_| Uri::from_static("/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(
                HeaderName::from_bytes(k.as_bytes()).unwrap(),
                HeaderValue::from_str(v).unwrap(),
            );
        }
        h
    }

    #[test]
    fn hop_by_hop_headers_and_the_token_stay_behind() {
        let incoming = map(&[
            ("host", "8000-x.sbx.test"),
            ("connection", "keep-alive, x-secret"),
            ("x-secret", "1"),
            ("keep-alive", "5"),
            ("transfer-encoding", "chunked"),
            ("te", "trailers"),
            ("e2b-traffic-access-token", "t"),
            ("x-forwarded-for", "10.0.0.1"),
            ("accept", "*/*"),
        ]);
        let client = ClientConn {
            peer: "127.0.0.1:5000".parse().unwrap(),
            tls: true,
        };
        let out = request_headers(&incoming, false, Some(client));
        for gone in [
            "connection",
            "x-secret",
            "keep-alive",
            "transfer-encoding",
            "te",
            "e2b-traffic-access-token",
            "upgrade",
        ] {
            assert!(!out.contains_key(gone), "{gone} forwarded");
        }
        assert_eq!(out["host"], "8000-x.sbx.test");
        assert_eq!(out["accept"], "*/*");
        assert_eq!(out["x-forwarded-for"], "10.0.0.1, 127.0.0.1");
        assert_eq!(out["x-forwarded-proto"], "https");
    }

    #[test]
    fn upgrades_keep_their_headers() {
        let incoming = map(&[
            ("connection", "Upgrade"),
            ("upgrade", "websocket"),
            ("sec-websocket-key", "k"),
        ]);
        assert!(wants_upgrade(&incoming));
        let out = request_headers(&incoming, true, None);
        assert_eq!(out["connection"], "upgrade");
        assert_eq!(out["upgrade"], "websocket");
        assert_eq!(out["sec-websocket-key"], "k");
        assert!(!wants_upgrade(&map(&[("upgrade", "websocket")])));
    }

    #[test]
    fn targets_go_in_origin_form() {
        let abs: Uri = "http://8000-x.sbx.test/a/b?c=d".parse().unwrap();
        assert_eq!(origin_form(&abs), "/a/b?c=d");
        let star: Uri = "*".parse().unwrap();
        assert_eq!(origin_form(&star), "/");
    }
}
