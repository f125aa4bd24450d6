//! Forwarding a protocol switch (a WebSocket: the console's terminal, a
//! preview URL's upgrade) to another node: once the owner answers `101`,
//! the client's connection and the owner's are joined byte for byte.

use super::{hop_by_hop, is_cluster_header, streamed_answer, Forwarder, RequestId};
use crate::api::ApiError;
use axum::body::Body;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::response::Response;
use hyper::upgrade::OnUpgrade;
use sbx_api_types::ErrorCode;

impl Forwarder {
    /// Sends a WebSocket handshake (the console's terminal) to the node at
    /// `base`; a `101` from it becomes a byte pipe between the client's
    /// connection and the node's. `Origin` stays here: this node checked it
    /// (`console::Sessions::bearer_for`, the browser guard), and it names
    /// this node, not the owner.
    pub async fn try_send_upgrade(
        &self,
        base: &str,
        mut req: Request,
    ) -> Result<Response, ApiError> {
        let client_side = hyper::upgrade::on(&mut req);
        let (parts, _) = req.into_parts();
        let request_id = parts
            .extensions
            .get::<RequestId>()
            .map_or("", |r| r.0.as_str());
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let mut headers = self.node_headers(request_id)?;
        for (name, value) in &parts.headers {
            if !hop_by_hop(name) && !is_cluster_header(name) && name != "origin" {
                headers.append(name.clone(), value.clone());
            }
        }
        headers.insert("connection", HeaderValue::from_static("upgrade"));
        if let Some(upgrade) = parts.headers.get("upgrade") {
            headers.insert("upgrade", upgrade.clone());
        }
        let outgoing = self
            .client
            .request(parts.method.clone(), format!("{base}{path}"))
            .headers(headers);
        let answer = self.send(base, outgoing).await?;
        let status = answer.status();
        if status != axum::http::StatusCode::SWITCHING_PROTOCOLS {
            return streamed_answer(answer, status, hop_by_hop);
        }
        switched_answer(answer, Some(client_side))
    }
}

/// The owner's `101` as this node's answer (its `Upgrade` and `Connection`
/// kept); the two connections are joined once both sides have switched.
/// Without `client_side` (the client did not ask to switch) nothing is joined.
pub(in crate::api) fn switched_answer(
    answer: reqwest::Response,
    client_side: Option<OnUpgrade>,
) -> Result<Response, ApiError> {
    let mut resp = Response::builder().status(answer.status());
    if let Some(h) = resp.headers_mut() {
        for (name, value) in answer.headers() {
            h.append(name.clone(), value.clone());
        }
    }
    if let Some(client_side) = client_side {
        tokio::spawn(async move {
            let (client, owner) = tokio::join!(client_side, answer.upgrade());
            let (Ok(client), Ok(mut owner)) = (client, owner) else {
                return;
            };
            let mut client = hyper_util::rt::TokioIo::new(client);
            let _ = tokio::io::copy_bidirectional(&mut client, &mut owner).await;
        });
    }
    resp.body(Body::empty())
        .map_err(|_| ApiError::new(ErrorCode::InternalError, "forwarding"))
}
