//! `GET /metrics` (Prometheus) and the HTTP request metrics of every route.

use super::{ApiError, AppState};
use axum::extract::{MatchedPath, Request, State};
use axum::http::{header, HeaderMap, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::time::Instant;

/// `GET /metrics`: the scraper's `Authorization` header, checked by the service.
pub async fn scrape(
    State(state): State<AppState>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let authorization = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok());
    let text = state.scrape(authorization).await?;
    Ok((
        StatusCode::OK,
        [(header::CONTENT_TYPE, sbx_metrics::CONTENT_TYPE)],
        text,
    )
        .into_response())
}

/// The route template that answered a request, carried on its response to [`observed`].
#[derive(Clone)]
struct RouteLabel(String);

/// Middleware on each API's router: notes the matched route template (never the raw
/// path, whose ids would make a series per sandbox).
pub async fn route_label(req: Request, next: Next) -> Response {
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string());
    let mut resp = next.run(req).await;
    if let Some(route) = route {
        resp.extensions_mut().insert(RouteLabel(route));
    }
    resp
}

/// Runs the request through `answer` and counts it by route template, method and status,
/// with its latency until the response head.
pub async fn observed<F>(req: Request, answer: F) -> Response
where
    F: FnOnce(Request) -> futures::future::BoxFuture<'static, Response>,
{
    let started = Instant::now();
    // Methods outside the standard set are one label: a client cannot add series.
    let method: &'static str = match req.method().as_str() {
        "GET" => "GET",
        "HEAD" => "HEAD",
        "POST" => "POST",
        "PUT" => "PUT",
        "PATCH" => "PATCH",
        "DELETE" => "DELETE",
        "OPTIONS" => "OPTIONS",
        _ => "other",
    };
    let resp = answer(req).await;
    let route = resp
        .extensions()
        .get::<RouteLabel>()
        .map_or("unmatched", |r| r.0.as_str());
    sbx_metrics::global().http_request(route, method, resp.status().as_u16(), started.elapsed());
    resp
}
