//! HTTP routes. Handlers only parse into typed requests and call one service function.

mod auth;
pub mod browser_guard;
mod connect_connections;
mod connect_packages;
mod connect_runs;
mod connect_views;
mod connect_webhooks;
mod console;
pub mod e2b;
pub mod envd;
mod envelope;
mod error;
mod files;
pub mod forward;
mod idempotency;
mod image_build;
mod images;
mod metrics;
mod nodes;
mod pool;
mod preview;
mod processes;
mod sandbox_preview;
mod sandboxes;
mod snapshots;
mod templates;
mod terminal;
mod volumes;

pub use error::ApiError;

use crate::service::Service;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::HeaderValue;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, MethodRouter};
use axum::Router;
use futures::FutureExt;
use sbx_api_types::ErrorCode;
use serde::de::DeserializeOwned;
use std::sync::Arc;
use tracing::Instrument;
use uuid::Uuid;

/// Shared handler state: the lifecycle service and the Connect runtime, side by side
/// (neither holds the other, so that neither needs the other to start).
#[derive(Clone)]
pub struct AppState {
    service: Arc<Service>,
    connect: Option<Arc<sbx_connect::service::ConnectService>>,
    forwarder: Arc<forward::Forwarder>,
}

impl AppState {
    /// The Connect runtime, if this sbxd runs one.
    pub fn connect(&self) -> Option<&Arc<sbx_connect::service::ConnectService>> {
        self.connect.as_ref()
    }
}

impl std::ops::Deref for AppState {
    type Target = Arc<Service>;

    fn deref(&self) -> &Arc<Service> {
        &self.service
    }
}

/// The caller's workspace, set by the auth middleware.
#[derive(Debug, Clone)]
pub struct Workspace(pub String);

/// Builds the router with every route and middleware.
pub fn router(
    service: Arc<Service>,
    connect: Option<Arc<sbx_connect::service::ConnectService>>,
    e2b_state: Arc<crate::service::e2b::E2b>,
) -> Router {
    let node = &service.config().node;
    let forwarder = Arc::new(forward::Forwarder::new(
        &node.id,
        node.cluster_token.clone(),
    ));
    let state = AppState {
        service: service.clone(),
        connect,
        forwarder: forwarder.clone(),
    };
    let json_limit = service.config().limits.json_body_bytes;
    let sessions = Arc::new(crate::console::Sessions::new(
        !service.config().listen.ip().is_loopback(),
    ));
    let guard = Arc::new(browser_guard::BrowserGuard::new(service.config()));
    let v2 = Router::new()
        .route(
            "/v2/sandboxes",
            post(sandboxes::create).get(sandboxes::list),
        )
        .route(
            "/v2/sandboxes/{id}",
            get(sandboxes::get).delete(sandboxes::destroy),
        )
        .route(
            "/v2/sandboxes/{id}/exec",
            idempotent(&state, post(sandboxes::exec)),
        )
        .route("/v2/sandboxes/{id}/logs", get(sandboxes::logs))
        .route(
            "/v2/sandboxes/{id}/processes",
            idempotent(&state, post(processes::start)).get(processes::list),
        )
        .route("/v2/sandboxes/{id}/processes/{pid}", get(processes::get))
        .route(
            "/v2/sandboxes/{id}/processes/{pid}/signals",
            idempotent(&state, post(processes::signal)),
        )
        .route(
            "/v2/sandboxes/{id}/processes/{pid}/wait",
            post(processes::wait),
        )
        .route(
            "/v2/sandboxes/{id}/processes/{pid}/output",
            get(processes::output),
        )
        .route(
            "/v2/sandboxes/{id}/processes/{pid}/output/stream",
            get(processes::stream),
        )
        .route("/v2/sandboxes/{id}/pause", post(snapshots::pause))
        .route("/v2/sandboxes/{id}/resume", post(snapshots::resume))
        .route(
            "/v2/sandboxes/{id}/snapshots",
            idempotent(&state, post(snapshots::create)),
        )
        .route("/v2/snapshots", get(snapshots::list))
        .route(
            "/v2/snapshots/{id}",
            get(snapshots::get).delete(snapshots::delete),
        )
        .route("/v1/secrets", get(snapshots::secret_list))
        .route(
            "/v1/secrets/{name}",
            axum::routing::put(snapshots::secret_put).delete(snapshots::secret_delete),
        )
        .route("/v1/sandboxes", post(sandboxes::create_v1))
        .route("/v1/sandboxes/{id}", get(sandboxes::detail))
        .route(
            "/v1/sandboxes/{id}/network",
            axum::routing::put(sandboxes::update_network),
        )
        .route("/v1/sandboxes/{id}/metrics", get(sandboxes::metrics))
        .route(
            "/v1/sandboxes/{id}/preview",
            get(sandbox_preview::get)
                .put(sandbox_preview::put)
                .delete(sandbox_preview::delete),
        )
        .route("/v1/sandboxes/{id}/terminal", get(terminal::open))
        .route("/v1/sandboxes/{id}/fs/stat", get(files::stat))
        .route("/v1/sandboxes/{id}/fs/list", get(files::list))
        .route("/v1/sandboxes/{id}/fs/mkdir", post(files::mkdir))
        .route("/v1/sandboxes/{id}/fs/remove", post(files::remove))
        .route("/v1/sandboxes/{id}/fs/rename", post(files::rename))
        .route(
            "/v1/images/{reference}",
            get(images::get).delete(images::delete),
        )
        .route("/v1/images/{reference}/tag", post(images::tag))
        .route(
            "/v1/templates",
            get(templates::list).post(templates::create),
        )
        .route(
            "/v1/templates/{name}",
            get(templates::get).delete(templates::delete),
        )
        .route("/v1/templates/{name}/rebuild", post(templates::rebuild))
        .route("/v1/sandboxes/{id}/image", post(images::from_sandbox))
        .route("/v1/volumes", get(volumes::list).post(volumes::create))
        .route(
            "/v1/volumes/{name}",
            get(volumes::get).delete(volumes::delete),
        )
        .route("/v1/pool", get(pool::status))
        .route("/v1/shapes", get(pool::shapes))
        .route("/v1/nodes", get(nodes::list))
        .route("/v1/nodes/{id}/drain", post(nodes::drain))
        .route("/v1/nodes/{id}/undrain", post(nodes::undrain))
        .route("/v1/connect/packages", get(connect_packages::list))
        .route(
            "/v1/connect/packages/{package}/versions",
            get(connect_packages::versions),
        )
        .route(
            "/v1/connect/packages/{package}/versions/{version}",
            get(connect_packages::version).delete(connect_packages::delete_version),
        )
        .route(
            "/v1/connect/packages/{package}/versions/{version}/builds",
            post(connect_packages::build_start).get(connect_packages::build_list),
        )
        .route(
            "/v1/connect/builds/{buildId}",
            get(connect_packages::build_get),
        )
        .route(
            "/v1/connect/connections",
            post(connect_connections::create).get(connect_connections::list),
        )
        .route(
            "/v1/connect/connections/{connectionId}",
            get(connect_connections::get)
                .patch(connect_connections::update)
                .delete(connect_connections::delete),
        )
        .route(
            "/v1/connect/connections/{connectionId}/oauth/start",
            post(connect_connections::oauth_start),
        )
        .route(
            "/v1/connect/oauth/callback",
            post(connect_connections::oauth_callback),
        )
        .route(
            "/v1/connect/connections/{connectionId}/test",
            post(connect_runs::test),
        )
        .route(
            "/v1/connect/connections/{connectionId}/syncs/{sync}/runs",
            post(connect_runs::run_now),
        )
        .route(
            "/v1/connect/connections/{connectionId}/runs",
            get(connect_runs::list),
        )
        .route(
            "/v1/connect/connections/{connectionId}/logs",
            get(connect_runs::connection_logs),
        )
        .route(
            "/v1/connect/connections/{connectionId}/syncs/{sync}/records",
            get(connect_runs::records),
        )
        .route(
            "/v1/connect/connections/{connectionId}/syncs/{sync}/checkpoint",
            get(connect_runs::checkpoint),
        )
        .route(
            "/v1/connect/connections/{connectionId}/webhooks",
            post(connect_webhooks::setup),
        )
        .route(
            "/v1/connect/connections/{connectionId}/deliveries",
            get(connect_webhooks::list),
        )
        .route(
            "/v1/connect/connections/{connectionId}/deliveries/{deliveryId}",
            get(connect_webhooks::get),
        )
        .route("/v1/connect/runs/{runId}", get(connect_runs::get))
        .route("/v1/connect/runs/{runId}/logs", get(connect_runs::run_logs))
        .layer(DefaultBodyLimit::max(json_limit));
    // Package uploads: a tarball up to the package size limit.
    let packages = Router::new()
        .route("/v1/connect/packages", post(connect_packages::upload))
        .layer(DefaultBodyLimit::max(
            sbx_connect::package::MAX_TARBALL_BYTES,
        ));
    // Webhook deliveries read their body up to the Connect limit themselves (a 413 in the
    // project's error envelope).
    let deliveries = Router::new()
        .route(
            "/v1/connect/webhooks/{token}",
            post(connect_webhooks::deliver),
        )
        .layer(DefaultBodyLimit::disable());
    // Uploads stream their body and enforce the file limit themselves.
    let uploads = Router::new()
        .route(
            "/v2/sandboxes/{id}/files",
            get(files::download).put(files::upload),
        )
        // Image imports stream to a spool file and enforce their own limit.
        .route("/v1/images", get(images::list).post(images::import))
        // Build contexts are read into memory up to their own limit.
        .route("/v1/images/build", post(image_build::build))
        .layer(DefaultBodyLimit::disable());
    let inngest = Router::new()
        .merge(v2)
        .merge(uploads)
        .merge(deliveries)
        .merge(packages)
        .route("/healthz", get(|| async { "ok" }))
        .route("/metrics", get(metrics::scrape))
        .route("/", get(console::index))
        .route("/console/assets/{file}", get(console::asset))
        .route(
            "/console/session",
            post(console::sign_in)
                .get(console::session)
                .delete(console::sign_out),
        )
        .fallback(not_found)
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            forward::layer,
        ))
        .layer(axum::middleware::from_fn_with_state(
            state.clone(),
            auth::authenticate,
        ))
        // Before authentication: a refused page learns nothing else.
        .layer(axum::middleware::from_fn_with_state(
            guard.clone(),
            browser_guard::layer,
        ))
        .layer(axum::Extension(sessions))
        .layer(axum::middleware::from_fn_with_state(
            forwarder,
            request_context,
        ))
        .layer(axum::middleware::from_fn(metrics::route_label))
        .with_state(state.clone());
    // The E2B and envd routers forward other nodes' sandboxes with the same state.
    let cluster_state = state;
    // Both APIs on one listener: E2B requests are told apart by their
    // `X-API-KEY` header or an E2B-only path (see `e2b::is_e2b`, docs/e2b.md).
    // envd (the E2B SDK's in-sandbox API) is told apart first, by the
    // `E2b-Sandbox-Id` header every envd request carries (see `envd::is_envd`).
    // With `--e2b-domain`, the Host `{port}-{id}.{domain}` routes first.
    let domain = service.config().e2b_domain.clone();
    let envd = envd::router(
        crate::service::envd::Envd::new(e2b_state.clone()),
        cluster_state.clone(),
    );
    let previews = crate::service::preview::Preview::new(e2b_state.clone());
    let preview_state = cluster_state.clone();
    let e2b = e2b::router(e2b_state, guard, cluster_state)
        .layer(axum::middleware::from_fn(metrics::route_label));
    let envd = envd.layer(axum::middleware::from_fn(metrics::route_label));
    Router::new().fallback_service(tower::service_fn(move |mut req: Request| {
        let target = match envd::host::route(req.headers(), req.uri(), domain.as_deref()) {
            envd::host::HostRoute::Api => {
                if envd::is_envd(req.headers(), req.uri()) {
                    envd.clone()
                } else if e2b::is_e2b(req.headers(), req.uri().path()) {
                    e2b.clone()
                } else {
                    inngest.clone()
                }
            }
            envd::host::HostRoute::Sandbox { port, id } if port != envd::ENVD_PORT => {
                preview::router(preview_state.clone(), previews.clone(), port, id)
            }
            envd::host::HostRoute::Sandbox { port, id } => {
                match envd::routed_by_host(req.headers_mut(), port, &id) {
                    Ok(()) => envd.clone(),
                    Err(refused) => envd::refusal(refused),
                }
            }
            envd::host::HostRoute::Refused(why) => envd::refusal(why),
        };
        metrics::observed(req, move |req| {
            Box::pin(async move {
                match tower::ServiceExt::oneshot(target, req).await {
                    Ok(resp) => resp,
                    Err(never) => match never {},
                }
            })
        })
        .map(Ok::<_, std::convert::Infallible>)
    }))
}

/// Adds the `Idempotency-Key` layer to a route's methods (exec, process start, signal, snapshot create).
fn idempotent(state: &AppState, methods: MethodRouter<AppState>) -> MethodRouter<AppState> {
    methods.layer(axum::middleware::from_fn_with_state(
        state.clone(),
        idempotency::layer,
    ))
}

async fn not_found() -> ApiError {
    ApiError::new(ErrorCode::RouteNotFound, "no such route")
}

/// Gives each request an id and a tracing span, and stamps the id and `no-store`
/// (unless the route chose its own cache policy) on the response.
async fn request_context(
    State(forwarder): State<Arc<forward::Forwarder>>,
    mut req: Request,
    next: Next,
) -> Response {
    if let Err(refused) = forward::check_forwarded(&forwarder, &req) {
        return refused.into_response();
    }
    // A request forwarded by another node (its token was just checked) keeps the
    // id it was given there: one request, one id, across nodes.
    let request_id =
        forward::forwarded_request_id(&req).unwrap_or_else(|| Uuid::new_v4().to_string());
    req.extensions_mut()
        .insert(forward::RequestId(request_id.clone()));
    let span = forward::request_span(&request_id, &req);
    let mut resp = next.run(req).instrument(span.clone()).await;
    span.record("status", i64::from(resp.status().as_u16()));
    span.in_scope(|| tracing::debug!(status = resp.status().as_u16(), "response"));
    if resp.status().as_u16() >= 400 && !is_json(&resp) {
        resp = framework_error(resp.status()).into_response();
    }
    let headers = resp.headers_mut();
    if let Ok(v) = HeaderValue::from_str(&request_id) {
        headers.insert("x-request-id", v);
    }
    if !headers.contains_key("cache-control") {
        headers.insert("cache-control", HeaderValue::from_static("no-store"));
    }
    resp
}

fn is_json(resp: &Response) -> bool {
    resp.headers()
        .get("content-type")
        .is_some_and(|v| v.as_bytes().starts_with(b"application/json"))
}

/// Errors produced by the HTTP framework itself (body too large, bad method) in our envelope.
fn framework_error(status: axum::http::StatusCode) -> ApiError {
    match status.as_u16() {
        413 => ApiError::new(ErrorCode::PayloadTooLarge, "request body is too large"),
        405 => ApiError::new(
            ErrorCode::MethodNotAllowed,
            "method not allowed on this route",
        ),
        404 => ApiError::new(ErrorCode::RouteNotFound, "no such route"),
        400..=499 => ApiError::new(ErrorCode::InvalidRequest, format!("bad request ({status})")),
        _ => ApiError::new(
            ErrorCode::InternalError,
            format!("unexpected server error ({status})"),
        ),
    }
}

/// Parses an optional JSON body: empty means "no body" (the SDK sends a JSON content type on bodiless requests).
pub fn parse_body<T: DeserializeOwned + Default>(bytes: &Bytes) -> Result<T, ApiError> {
    let Some(first) = bytes.iter().find(|b| !b.is_ascii_whitespace()) else {
        return Ok(T::default());
    };
    // serde reads a JSON array into a struct field by field (`["n",1,1024]` would create a
    // sandbox): only objects are request bodies.
    if *first != b'{' {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "invalid JSON body: expected a JSON object",
        ));
    }
    serde_json::from_slice(bytes).map_err(|e| {
        let msg = e.to_string();
        if msg.starts_with("missing field") {
            ApiError::new(ErrorCode::MissingField, msg)
        } else {
            ApiError::new(
                ErrorCode::InvalidRequest,
                format!("invalid JSON body: {msg}"),
            )
        }
    })
}

/// Parses a path id: a canonical lowercase, non-nil UUID.
pub fn parse_id(raw: &str, field: &'static str) -> Result<Uuid, ApiError> {
    let ok = raw.len() == 36
        && raw
            .bytes()
            .all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f' | b'-'));
    match Uuid::parse_str(raw) {
        Ok(id) if ok && !id.is_nil() && id.to_string() == raw => Ok(id),
        _ => Err(ApiError::new(
            ErrorCode::InvalidFieldFormat,
            format!("{field}: must be a lowercase UUID"),
        )),
    }
}

/// Query strings decoded with form rules (`+` is a space).
pub fn parse_query<T: DeserializeOwned>(query: Option<&str>) -> Result<T, ApiError> {
    serde_urlencoded::from_str(query.unwrap_or("")).map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidFieldFormat,
            format!("invalid query string: {e}"),
        )
    })
}

/// Handler helper: the state and the caller's workspace.
pub type Ctx = (State<AppState>, axum::Extension<Workspace>);

#[cfg(test)]
mod tests {
    use super::*;
    use sbx_api_types::CreateSandboxRequest;

    fn parse(body: &'static str) -> Result<CreateSandboxRequest, ApiError> {
        parse_body(&Bytes::from_static(body.as_bytes()))
    }

    #[test]
    fn request_bodies_are_json_objects() {
        let ok = parse(r#" {"name": "n", "vcpu": 1, "memoryMb": 1024}"#).expect("object");
        assert_eq!(ok.name.as_deref(), Some("n"));
        assert_eq!(
            parse(" \n").expect("empty"),
            CreateSandboxRequest::default()
        );
        for bad in [r#"["n", 1, 1024]"#, "null", "1", r#""n""#, "{"] {
            let e = parse(bad).expect_err(bad);
            assert_eq!(e.code, ErrorCode::InvalidRequest, "{bad}");
        }
    }
}
