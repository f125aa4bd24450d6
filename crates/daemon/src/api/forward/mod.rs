//! Cluster forwarding: any node serves the whole API.
//!
//! A request about a sandbox that runs on another live node of the cluster is
//! sent to that node as it came (method, path, query, headers, the body
//! streamed) and its answer is streamed back, so uploads, downloads, NDJSON
//! output streams and long waits work the same through any node. The client
//! cannot tell: the answer is the owner's, under the same request id.
//!
//! The forwarding node authenticates the caller first (an unknown key never
//! leaves it) and passes the caller's `Authorization` on; the owner
//! authenticates it again against the same database, so the tenant is the
//! same and a node never takes another's word for who the caller is. What the
//! owner does take on trust is that the request came from a node: only with
//! the cluster token ([`CLUSTER_TOKEN`]), which [`check_forwarded`] demands of
//! every request that says it was forwarded ([`FORWARDED_BY`]). A forwarded
//! request is never forwarded again (one hop): if the sandbox moved meanwhile,
//! the owner answers as a node without it would.
//!
//! Creates are placed (`service::placement`): a fresh create whose shape the
//! body names goes to the node placement chooses, and to the next choice if
//! that node refuses it (`503`). A clone goes where its snapshot's files are
//! (or, with snapshots in object storage, is placed like a create). Requests
//! that start a Connect job sandbox (Run now, a connection test, a package
//! build) are placed like a create of the job's shape; the run or build then
//! shows the node that ran it (`nodeId`).

mod upgrade;

pub(super) use upgrade::switched_answer;

use super::{ApiError, AppState, Workspace};
use crate::config::ClusterToken;
use crate::service::{NodeSelector, Placement};
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use futures::TryStreamExt;
use sbx_api_types::ErrorCode;
use std::time::Duration;
use uuid::Uuid;

/// Names the node that forwarded a request.
pub const FORWARDED_BY: &str = "x-sbx-forwarded-by";
/// Carries the cluster token on a forwarded request.
pub const CLUSTER_TOKEN: &str = "x-sbx-cluster-token";

/// How many nodes a create is offered to before their refusal is the answer.
const PLACEMENT_TRIES: usize = 3;

/// How long a forwarding node waits to connect to the owner.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The request id a request runs under, set by the request-context layer.
#[derive(Debug, Clone)]
pub struct RequestId(pub String);

/// Sends requests on to other nodes.
pub struct Forwarder {
    client: reqwest::Client,
    node_id: HeaderValue,
    token: Option<ClusterToken>,
}

impl Forwarder {
    /// A forwarder for this node (`token`: the cluster's, if it is in one).
    pub fn new(node_id: &str, token: Option<ClusterToken>) -> Forwarder {
        let client = reqwest::Client::builder()
            .connect_timeout(CONNECT_TIMEOUT)
            // Nodes talk to each other directly, never through the host's proxy.
            .no_proxy()
            .tcp_keepalive(Duration::from_secs(15))
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap_or_default();
        Forwarder {
            client,
            node_id: HeaderValue::from_str(node_id).unwrap_or(HeaderValue::from_static("node")),
            token,
        }
    }

    /// Whether `headers` say the request was forwarded by another node.
    pub fn is_forwarded(headers: &HeaderMap) -> bool {
        headers.contains_key(FORWARDED_BY)
    }

    /// Whether a request marked as forwarded shows this cluster's token.
    pub fn token_shown(&self, headers: &HeaderMap) -> bool {
        match (&self.token, headers.get(CLUSTER_TOKEN)) {
            (Some(token), Some(shown)) => token.matches(shown.as_bytes()),
            _ => false,
        }
    }

    /// Sends `req` to the node at `base` and streams its answer back. The
    /// request id goes along from the request's [`RequestId`]. Its own failures
    /// (no cluster token, the owner not answering) are left for the caller to
    /// put in its API's error shape.
    pub async fn try_send(&self, base: &str, req: Request) -> Result<Response, ApiError> {
        let (parts, body) = req.into_parts();
        let request_id = parts
            .extensions
            .get::<RequestId>()
            .map_or("", |r| r.0.as_str());
        let path = parts.uri.path_and_query().map_or("/", |p| p.as_str());
        let url = format!("{base}{path}");
        let mut headers = self.node_headers(request_id)?;
        for (name, value) in &parts.headers {
            if !hop_by_hop(name) && !is_cluster_header(name) {
                headers.append(name.clone(), value.clone());
            }
        }
        let mut outgoing = self
            .client
            .request(parts.method.clone(), &url)
            .headers(headers);
        if has_body(&parts.headers) {
            outgoing = outgoing.body(reqwest::Body::wrap_stream(body.into_data_stream()));
        }
        let answer = self.send(base, outgoing).await?;
        let status = answer.status();
        streamed_answer(answer, status, hop_by_hop)
    }

    /// The headers that mark a request as forwarded by this node: its id,
    /// the cluster token and the request id. Without a cluster token this
    /// node cannot forward.
    pub(super) fn node_headers(&self, request_id: &str) -> Result<HeaderMap, ApiError> {
        let Some(token) = &self.token else {
            return Err(ApiError::new(
                ErrorCode::InternalError,
                "this node has no cluster token to forward with",
            ));
        };
        let mut headers = HeaderMap::new();
        headers.insert(FORWARDED_BY, self.node_id.clone());
        if let Ok(v) = HeaderValue::from_str(token.expose()) {
            headers.insert(CLUSTER_TOKEN, v);
        }
        if let Ok(v) = HeaderValue::from_str(request_id) {
            headers.insert("x-request-id", v);
        }
        Ok(headers)
    }

    /// The client nodes talk to each other with.
    pub(super) fn client(&self) -> &reqwest::Client {
        &self.client
    }

    /// Sends a request built on [`Forwarder::client`] to the node at `base`;
    /// the node not answering is `ComputeUnavailable`.
    pub(super) async fn send(
        &self,
        base: &str,
        outgoing: reqwest::RequestBuilder,
    ) -> Result<reqwest::Response, ApiError> {
        outgoing.send().await.map_err(|e| {
            tracing::warn!(owner = %base, error = %e, "forwarding to the sandbox's node");
            ApiError::new(
                ErrorCode::ComputeUnavailable,
                "the node that runs this sandbox did not answer; retry",
            )
        })
    }
}

/// HTTP/1.1: a request has a body when it says how long it is or that it is chunked.
pub(super) fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key("content-length") || headers.contains_key("transfer-encoding")
}

/// The owner's answer as this node's response, with `status`, the headers
/// `drop` does not name and the body streamed.
pub(super) fn streamed_answer(
    answer: reqwest::Response,
    status: axum::http::StatusCode,
    drop: fn(&HeaderName) -> bool,
) -> Result<Response, ApiError> {
    let mut resp = Response::builder().status(status);
    if let Some(h) = resp.headers_mut() {
        for (name, value) in answer.headers() {
            if !drop(name) {
                h.append(name.clone(), value.clone());
            }
        }
    }
    // The owner dying mid-stream ends this body with an error: the client's
    // connection is cut, it does not hang.
    let stream = answer.bytes_stream().map_err(std::io::Error::other);
    resp.body(Body::from_stream(stream))
        .map_err(|_| ApiError::new(ErrorCode::InternalError, "forwarding"))
}

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1).
fn hop_by_hop(name: &HeaderName) -> bool {
    matches!(
        name.as_str(),
        "connection"
            | "keep-alive"
            | "proxy-connection"
            | "te"
            | "trailer"
            | "transfer-encoding"
            | "upgrade"
            | "host"
            | "content-length"
    )
}

/// Whether `name` is one of the headers that mark a forwarded request.
pub(super) fn is_cluster_header(name: &HeaderName) -> bool {
    name.as_str() == FORWARDED_BY || name.as_str() == CLUSTER_TOKEN
}

/// The sandbox a request is about, if its path names one.
fn sandbox_in_path(path: &str) -> Option<Uuid> {
    let rest = path
        .strip_prefix("/v2/sandboxes/")
        .or_else(|| path.strip_prefix("/v1/sandboxes/"))?;
    let raw = rest.split('/').next()?;
    super::parse_id(raw, "id").ok()
}

/// Whether `path` is `/v2/sandboxes/{id}` itself (no sub-resource).
fn is_resource_path(path: &str) -> bool {
    path.strip_prefix("/v2/sandboxes/")
        .is_some_and(|rest| !rest.trim_end_matches('/').contains('/'))
}

/// Middleware, first in line: a request marked as forwarded must show the
/// cluster token; otherwise it is refused, and logged, before anything else.
pub fn check_forwarded(forwarder: &Forwarder, req: &Request) -> Result<(), ApiError> {
    if !Forwarder::is_forwarded(req.headers()) || forwarder.token_shown(req.headers()) {
        return Ok(());
    }
    let from = req
        .headers()
        .get(FORWARDED_BY)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("?")
        .to_string();
    tracing::warn!(
        claimed_node = %from,
        path = %req.uri().path(),
        "refused a request claiming to be forwarded by a node, without the cluster token"
    );
    Err(ApiError::new(
        ErrorCode::ClusterTokenInvalid,
        "this request says it was forwarded by a node of the cluster but does not carry the cluster token",
    ))
}

/// The id a forwarded request was given by the node that forwarded it, if
/// the request is forwarded (its token checked by [`check_forwarded`] first)
/// and the id is a plausible one.
pub fn forwarded_request_id(req: &Request) -> Option<String> {
    Forwarder::is_forwarded(req.headers())
        .then(|| req.headers().get("x-request-id"))
        .flatten()
        .and_then(|v| v.to_str().ok())
        .filter(|v| v.len() <= 64 && v.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'))
        .map(str::to_string)
}

/// What the inngest router's request context does for the E2B and envd
/// routers, errors in their own shape (`refused`): a request that claims to
/// be forwarded without the cluster token is refused; the request runs under
/// its id (the forwarding node's, for a forwarded one), which goes on to an
/// owner it is forwarded to and back on the answer.
pub async fn request_context(
    forwarder: &Forwarder,
    mut req: Request,
    next: Next,
    refused: fn(ApiError) -> Response,
) -> Response {
    use tracing::Instrument;
    if let Err(e) = check_forwarded(forwarder, &req) {
        return refused(e);
    }
    let id = forwarded_request_id(&req).unwrap_or_else(|| Uuid::new_v4().to_string());
    req.extensions_mut().insert(RequestId(id.clone()));
    let span = request_span(&id, &req);
    let mut resp = next.run(req).instrument(span.clone()).await;
    span.record("status", i64::from(resp.status().as_u16()));
    if let Ok(v) = HeaderValue::from_str(&id) {
        resp.headers_mut().insert("x-request-id", v);
    }
    resp
}

/// The span a request runs in (its logs, and its trace with `--otlp-endpoint`):
/// the request id (also the `X-Request-Id` answer header), method, path, and
/// the status once answered.
pub fn request_span(request_id: &str, req: &Request) -> tracing::Span {
    tracing::info_span!(
        "request",
        request_id = %request_id,
        method = %req.method(),
        path = %req.uri().path(),
        status = tracing::field::Empty,
    )
}

/// What a create body asks for, as far as placement cares.
#[derive(Debug, PartialEq)]
pub(super) enum CreateKind {
    /// A fresh sandbox of (vCPUs, MiB).
    Fresh(u32, u32, NodeSelector),
    /// A fresh sandbox of (vCPUs, MiB) mounting these volumes (by name) or
    /// booting this image: on the node of its local volumes and image.
    WithVolumes(u32, u32, NodeSelector, Vec<String>, Option<String>),
    /// A clone of this snapshot.
    Clone(Uuid, NodeSelector),
    /// A Connect job sandbox (a manual run, a connection test or a package
    /// build): 1 vCPU and the Connect memory limit, on any node.
    ConnectJob,
}

/// Whether `path` (of a POST) starts a Connect job sandbox on the node that
/// answers it: `…/syncs/{sync}/runs` (Run now), `…/connections/{id}/test` and
/// `…/versions/{version}/builds`.
fn starts_connect_job(path: &str) -> bool {
    let parts: Vec<&str> = path.trim_end_matches('/').split('/').collect();
    matches!(
        parts.as_slice(),
        ["", "v1", "connect", "connections", _, "syncs", _, "runs"]
            | ["", "v1", "connect", "connections", _, "test"]
            | ["", "v1", "connect", "packages", _, "versions", _, "builds"]
    )
}

/// Runs a request that starts a Connect job on the node placement chooses for
/// the job's shape: the same best-of-K on free memory as a create, drained
/// and lost nodes left out, the next choice on a refusal.
async fn place_connect_job(state: AppState, req: Request, next: Next) -> Response {
    if state.connect().is_none() {
        return next.run(req).await;
    }
    place_request(state, req, next, |_| Some(CreateKind::ConnectJob)).await
}

/// What a create body asks for. A body that does not parse stays on this
/// node, whose handler answers it.
fn create_kind(body: &[u8]) -> Option<CreateKind> {
    let v: serde_json::Value = serde_json::from_slice(body).ok()?;
    // Absent or null: any node. Anything but an object of strings is the
    // handler's to refuse (400).
    let selector: NodeSelector = match v.get("nodeSelector") {
        None | Some(serde_json::Value::Null) => NodeSelector::new(),
        Some(s) => serde_json::from_value(s.clone()).ok()?,
    };
    if let Some(snap) = v.get("snapshotId").filter(|s| !s.is_null()) {
        return super::parse_id(snap.as_str()?, "snapshotId")
            .ok()
            .map(|id| CreateKind::Clone(id, selector));
    }
    let vcpu = u32::try_from(v.get("vcpu")?.as_u64()?).ok()?;
    let memory_mb = u32::try_from(v.get("memoryMb")?.as_u64()?).ok()?;
    let volumes: Vec<String> = match v.get("volumes") {
        None | Some(serde_json::Value::Null) => Vec::new(),
        Some(list) => list
            .as_array()?
            .iter()
            .map(|m| m.get("name")?.as_str().map(str::to_string))
            .collect::<Option<_>>()?,
    };
    let image = v.get("image").and_then(|i| i.as_str()).map(str::to_string);
    if volumes.is_empty() && image.is_none() {
        return Some(CreateKind::Fresh(vcpu, memory_mb, selector));
    }
    Some(CreateKind::WithVolumes(
        vcpu, memory_mb, selector, volumes, image,
    ))
}

/// Runs a create on the node placement chooses (a clone: where its snapshot's
/// files are, see `Service::place_clone`).
async fn place_create(state: AppState, req: Request, next: Next) -> Response {
    place_request(state, req, next, create_kind).await
}

/// Runs a request of the inngest/sbx API on the node placement chooses for
/// what `kind_of` reads in its body, as the caller's tenant.
async fn place_request(
    state: AppState,
    req: Request,
    next: Next,
    kind_of: fn(&[u8]) -> Option<CreateKind>,
) -> Response {
    let tenant = req
        .extensions()
        .get::<Workspace>()
        .map(|w| w.0.clone())
        .unwrap_or_default();
    place(
        state,
        tenant,
        req,
        next,
        kind_of,
        IntoResponse::into_response,
    )
    .await
}

/// Runs a create whose body `kind_of` reads on the node placement chooses; the
/// failures of placement are answered by `refused` (in the API's error shape).
pub(super) async fn place(
    state: AppState,
    tenant: String,
    req: Request,
    next: Next,
    kind_of: fn(&[u8]) -> Option<CreateKind>,
    refused: fn(ApiError) -> Response,
) -> Response {
    let limit = state.config().limits.json_body_bytes;
    let (parts, body) = req.into_parts();
    let bytes = match axum::body::to_bytes(body, limit).await {
        Ok(b) => b,
        Err(_) => {
            return refused(ApiError::new(
                ErrorCode::PayloadTooLarge,
                "request body is too large",
            ))
        }
    };
    let kind = match kind_of(&bytes) {
        None => {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        // A shape this node does not offer is refused here (400, naming the
        // offered ones) rather than placed: placement would answer 503 when no
        // node had room for it. The nodes of a cluster share one --shapes.
        Some(CreateKind::Fresh(vcpu, memory_mb, _))
        | Some(CreateKind::WithVolumes(vcpu, memory_mb, _, _, _))
            if !state.config().shapes.contains(&(vcpu, memory_mb)) =>
        {
            return next
                .run(Request::from_parts(parts, Body::from(bytes)))
                .await
        }
        Some(kind) => kind,
    };
    let mut tried = Vec::new();
    loop {
        let placed = match &kind {
            // Through the volume path with none: the tenant's default image
            // may be one of its own, pinned to its node without an object store.
            CreateKind::Fresh(vcpu, memory_mb, selector) => {
                state
                    .place_with_volumes(&tenant, &[], None, *vcpu, *memory_mb, &tried, selector)
                    .await
            }
            CreateKind::WithVolumes(vcpu, memory_mb, selector, volumes, image) => {
                state
                    .place_with_volumes(
                        &tenant,
                        volumes,
                        image.as_deref(),
                        *vcpu,
                        *memory_mb,
                        &tried,
                        selector,
                    )
                    .await
            }
            // A clone restores where its snapshot's files are (or can be fetched).
            CreateKind::Clone(snapshot, selector) => {
                state
                    .place_clone(&tenant, *snapshot, &tried, selector)
                    .await
            }
            CreateKind::ConnectJob => {
                let memory_mb = state.connect().map_or(u32::MAX, |c| {
                    u32::try_from(c.limits().memory_mib).unwrap_or(u32::MAX)
                });
                let any_node = NodeSelector::new();
                state
                    .place(sbx_node::jobs::JOB_VCPUS, memory_mb, &tried, &any_node)
                    .await
            }
        };
        match placed {
            Ok(Placement::Here) => {
                return next
                    .run(Request::from_parts(parts, Body::from(bytes)))
                    .await
            }
            Ok(Placement::Node { id, url }) => {
                let mut copy = Request::new(Body::from(bytes.clone()));
                *copy.method_mut() = parts.method.clone();
                *copy.uri_mut() = parts.uri.clone();
                *copy.headers_mut() = parts.headers.clone();
                if let Some(rid) = parts.extensions.get::<RequestId>() {
                    copy.extensions_mut().insert(rid.clone());
                }
                tracing::debug!(node = %id, ?kind, "placed on another node");
                let resp = match state.forwarder.try_send(&url, copy).await {
                    Ok(resp) => resp,
                    Err(e) => refused(e),
                };
                tried.push(id);
                // That node refused (full, or not answering): the next choice.
                if resp.status().as_u16() == 503 && tried.len() < PLACEMENT_TRIES {
                    continue;
                }
                return resp;
            }
            Err(e) => return refused(ApiError::from(e)),
        }
    }
}

/// Runs `req` on the node that holds snapshot `id`'s files.
async fn on_snapshot_node(state: AppState, id: Uuid, req: Request, next: Next) -> Response {
    let tenant = req.extensions().get::<Workspace>().map(|w| w.0.clone());
    match tenant {
        Some(t) => snapshot_node(state, &t, id, req, next, IntoResponse::into_response).await,
        None => next.run(req).await,
    }
}

/// Runs a request about volume `key` on the node that holds its data.
async fn on_volume_node(state: AppState, key: String, req: Request, next: Next) -> Response {
    let Some(Workspace(tenant)) = req.extensions().get::<Workspace>().cloned() else {
        return next.run(req).await;
    };
    // The path segment as sent: percent-decoded as the router does (an
    // undecodable one is the handler's to refuse).
    let Some(key) = crate::api::e2b::wire::percent_decode(&key) else {
        return next.run(req).await;
    };
    match state.volume_node(&tenant, &key).await {
        Ok(Placement::Here) => next.run(req).await,
        Ok(Placement::Node { url, .. }) => state
            .forwarder
            .try_send(&url, req)
            .await
            .unwrap_or_else(IntoResponse::into_response),
        Err(e) => ApiError::from(e).into_response(),
    }
}

/// Runs `req` of `tenant` on the node that holds snapshot `id`'s files.
pub(super) async fn snapshot_node(
    state: AppState,
    tenant: &str,
    id: Uuid,
    req: Request,
    next: Next,
    refused: fn(ApiError) -> Response,
) -> Response {
    match state.snapshot_node(tenant, id).await {
        Ok(Placement::Here) => next.run(req).await,
        Ok(Placement::Node { url, .. }) => state
            .forwarder
            .try_send(&url, req)
            .await
            .unwrap_or_else(refused),
        Err(e) => refused(ApiError::from(e)),
    }
}

/// Runs `req` about sandbox `id` of `tenant` on the node that runs it when
/// that is another node (here otherwise); failures are answered by `refused`.
pub(super) async fn on_owner(
    state: &AppState,
    tenant: &str,
    id: Uuid,
    req: Request,
    next: Next,
    refused: impl FnOnce(ApiError) -> Response,
) -> Response {
    match state.remote_owner(tenant, id).await {
        Ok(None) => next.run(req).await,
        Ok(Some(base)) => {
            tracing::debug!(sandbox = %id, owner = %base, "forwarding");
            let sent = if crate::console::is_websocket(req.headers()) {
                state.forwarder.try_send_upgrade(&base, req).await
            } else {
                state.forwarder.try_send(&base, req).await
            };
            match sent {
                Ok(resp) => resp,
                Err(e) => refused(e),
            }
        }
        Err(e) => refused(ApiError::from(e)),
    }
}

/// Whether this request is one to consider forwarding: in cluster mode, and
/// not forwarded already (one hop).
pub(super) fn may_forward(state: &AppState, req: &Request) -> bool {
    state.config().node.cluster && !Forwarder::is_forwarded(req.headers())
}

/// Middleware, after authentication: sends a request about another node's
/// sandbox to that node, and a create to the node placement chooses.
pub async fn layer(State(state): State<AppState>, req: Request, next: Next) -> Response {
    if Forwarder::is_forwarded(req.headers()) || !state.config().node.cluster {
        return next.run(req).await;
    }
    let path = req.uri().path();
    if req.method() == axum::http::Method::POST
        && (path == "/v2/sandboxes" || path == "/v1/sandboxes")
    {
        return place_create(state, req, next).await;
    }
    if req.method() == axum::http::Method::POST && starts_connect_job(path) {
        return place_connect_job(state, req, next).await;
    }
    // Deleting a snapshot removes its files: on the node that holds them.
    if req.method() == axum::http::Method::DELETE {
        if let Some(id) = path
            .strip_prefix("/v2/snapshots/")
            .and_then(|raw| super::parse_id(raw, "snapshotId").ok())
        {
            return on_snapshot_node(state, id, req, next).await;
        }
    }
    // A local volume's data (its deletion, its usage) is on its node.
    if let Some(key) = path
        .strip_prefix("/v1/volumes/")
        .filter(|k| !k.is_empty() && !k.contains('/'))
    {
        let key = key.to_string();
        return on_volume_node(state, key, req, next).await;
    }
    let Some(id) = sandbox_in_path(req.uri().path()) else {
        return next.run(req).await;
    };
    // The sandbox resource itself is the store's row: any node answers it, also
    // while the owner is gone and its fail-over is pending.
    if req.method() == axum::http::Method::GET && is_resource_path(req.uri().path()) {
        return next.run(req).await;
    }
    let Some(Workspace(tenant)) = req.extensions().get::<Workspace>().cloned() else {
        return next.run(req).await;
    };
    on_owner(&state, &tenant, id, req, next, IntoResponse::into_response).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_sandbox_paths_with_a_canonical_id_are_forwarded() {
        let id = "0b9e6f3a-9d1c-4f6e-8a4e-2f1d3c5b7a90";
        let want = Uuid::parse_str(id).ok();
        assert_eq!(sandbox_in_path(&format!("/v2/sandboxes/{id}")), want);
        assert_eq!(sandbox_in_path(&format!("/v2/sandboxes/{id}/files")), want);
        assert_eq!(
            sandbox_in_path(&format!("/v1/sandboxes/{id}/fs/list")),
            want
        );
        assert_eq!(sandbox_in_path("/v2/sandboxes"), None);
        assert_eq!(sandbox_in_path("/v2/snapshots/x"), None);
        assert_eq!(
            sandbox_in_path(&format!("/v2/sandboxes/{}", id.to_uppercase())),
            None
        );
        assert_eq!(sandbox_in_path("/v2/sandboxes/../nodes"), None);
        assert!(is_resource_path(&format!("/v2/sandboxes/{id}")));
        assert!(!is_resource_path(&format!("/v2/sandboxes/{id}/exec")));
        assert!(!is_resource_path(&format!("/v1/sandboxes/{id}")));
    }

    #[test]
    fn only_the_posts_that_start_a_connect_job_are_placed_as_jobs() {
        for path in [
            "/v1/connect/connections/c1/syncs/orders/runs",
            "/v1/connect/connections/c1/test",
            "/v1/connect/packages/p/versions/1.0.0/builds",
            "/v1/connect/packages/p/versions/1.0.0/builds/",
        ] {
            assert!(starts_connect_job(path), "{path}");
        }
        for path in [
            "/v1/connect/connections/c1/runs",
            "/v1/connect/connections/c1/syncs/orders/records",
            "/v1/connect/connections",
            "/v1/connect/packages",
            "/v1/connect/packages/p/versions/1.0.0",
            "/v1/connect/connections/c1/syncs/orders/runs/extra",
            "/v2/sandboxes",
        ] {
            assert!(!starts_connect_job(path), "{path}");
        }
    }

    #[test]
    fn creates_are_told_apart_and_bad_bodies_stay_here() {
        assert_eq!(
            create_kind(br#"{"vcpu": 2, "memoryMb": 2048}"#),
            Some(CreateKind::Fresh(2, 2048, NodeSelector::new()))
        );
        let zone: NodeSelector = [("zone".to_string(), "eu-1".to_string())].into();
        assert_eq!(
            create_kind(br#"{"vcpu": 2, "memoryMb": 2048, "nodeSelector": {"zone": "eu-1"}}"#),
            Some(CreateKind::Fresh(2, 2048, zone.clone()))
        );
        let snap = "0b9e6f3a-9d1c-4f6e-8a4e-2f1d3c5b7a90";
        assert_eq!(
            create_kind(format!(r#"{{"name": "c", "snapshotId": "{snap}"}}"#).as_bytes()),
            Some(CreateKind::Clone(
                Uuid::parse_str(snap).expect("uuid"),
                NodeSelector::new()
            ))
        );
        assert_eq!(
            create_kind(br#"{"vcpu": 1, "memoryMb": 1024, "snapshotId": null}"#),
            Some(CreateKind::Fresh(1, 1024, NodeSelector::new()))
        );
        for bad in [
            &b"{"[..],
            b"[]",
            br#"{"vcpu": -1, "memoryMb": 1}"#,
            br#"{"vcpu": 1}"#,
            br#"{"snapshotId": "not-a-uuid"}"#,
            br#"{"vcpu": 1, "memoryMb": 1024, "nodeSelector": {"zone": 1}}"#,
            br#"{"vcpu": 1, "memoryMb": 1024, "nodeSelector": ["zone"]}"#,
        ] {
            assert_eq!(create_kind(bad), None);
        }
    }

    #[test]
    fn the_token_is_checked_and_never_printed() {
        let token = ClusterToken::parse(&"a".repeat(40)).expect("token");
        assert_eq!(format!("{token:?}"), "ClusterToken(..)");
        let f = Forwarder::new("n1", Some(token));
        let mut h = HeaderMap::new();
        assert!(!Forwarder::is_forwarded(&h));
        h.insert(FORWARDED_BY, HeaderValue::from_static("n2"));
        assert!(!f.token_shown(&h), "no token");
        h.insert(CLUSTER_TOKEN, HeaderValue::from_static("aaaa"));
        assert!(!f.token_shown(&h), "a prefix of it");
        h.insert(
            CLUSTER_TOKEN,
            HeaderValue::from_str(&"b".repeat(40)).expect("v"),
        );
        assert!(!f.token_shown(&h), "another of the same length");
        h.insert(
            CLUSTER_TOKEN,
            HeaderValue::from_str(&"a".repeat(40)).expect("v"),
        );
        assert!(f.token_shown(&h));
        assert!(
            !Forwarder::new("n1", None).token_shown(&h),
            "no token configured"
        );
        assert!(ClusterToken::parse("short").is_err());
        assert!(ClusterToken::parse(&format!("{} {}", "a".repeat(20), "b".repeat(20))).is_err());
    }
}
