//! Preview requests for another node's sandbox: sent to that node as they
//! came (`Host` kept, so that the owner routes them to the same sandbox
//! port; the traffic token kept, so that the owner checks it again), with
//! the cluster's headers, the client added to `X-Forwarded-For`, and the
//! body streamed both ways. An upgrade (WebSocket) answered `101` by the
//! owner becomes a byte pipe between the client and the owner's connection.

use super::{proxied_headers, wants_upgrade};
use crate::api::forward::{self, Forwarder, RequestId};
use crate::api::ApiError;
use crate::server::ClientConn;
use axum::extract::Request;
use axum::http::{HeaderName, StatusCode};
use axum::response::Response;

/// Sends `req` to the node at `base` and answers with the node's response.
pub(super) async fn send(
    forwarder: &Forwarder,
    base: &str,
    mut req: Request,
) -> Result<Response, ApiError> {
    let upgrade = wants_upgrade(req.headers());
    let client_side = upgrade.then(|| hyper::upgrade::on(&mut req));
    let client = req.extensions().get::<ClientConn>().copied();
    let (parts, body) = req.into_parts();
    let request_id = parts
        .extensions
        .get::<RequestId>()
        .map_or("", |r| r.0.as_str());
    let mut headers = forwarder.node_headers(request_id)?;
    for (name, value) in &proxied_headers(&parts.headers, upgrade, client) {
        if !forward::is_cluster_header(name) {
            headers.append(name.clone(), value.clone());
        }
    }
    let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let mut outgoing = forwarder
        .client()
        .request(parts.method.clone(), format!("{base}{path}"))
        .headers(headers);
    if forward::has_body(&parts.headers) {
        outgoing = outgoing.body(reqwest::Body::wrap_stream(body.into_data_stream()));
    }
    let answer = forwarder.send(base, outgoing).await?;
    let status = answer.status();
    if status != StatusCode::SWITCHING_PROTOCOLS {
        return forward::streamed_answer(answer, status, hop_by_hop);
    }
    forward::switched_answer(answer, client_side)
}

/// Response headers that belong to the node-to-node connection.
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection" | "keep-alive" | "transfer-encoding" | "content-length" | "upgrade"
    )
}
