//! Webhook connections: the unauthenticated delivery URL (`POST /v1/connect/webhooks/{token}`),
//! the setup of a connection's URLs and secret, and its deliveries.

use super::{
    connect_views as views, envelope, parse_body, parse_query, ApiError, AppState, Workspace,
};
use axum::body::{Body, Bytes};
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use axum::Extension;
use sbx_connect::api::PageQuery;
use sbx_connect::service::WebhookSetupRequest;
use serde::Deserialize;
use serde_json::json;
use std::collections::BTreeMap;

/// `?limit&cursor&status` of the deliveries list.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct DeliveriesQuery {
    #[serde(default)]
    cursor: Option<String>,
    #[serde(default)]
    limit: Option<u32>,
    #[serde(default)]
    status: Option<String>,
}

/// `POST /v1/connect/webhooks/{token}`: no API key (the URL is the credential). 202 once
/// the delivery is stored; 200 for a replayed delivery id (dropped).
pub async fn deliver(
    State(svc): State<AppState>,
    Path(token): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Result<Response, ApiError> {
    let connect = views::runtime(&svc)?;
    let max = connect.limits().webhooks.max_body_bytes;
    // Read one byte past the limit: a body over it is refused whole, never cut.
    let body = axum::body::to_bytes(body, max + 1)
        .await
        .map_err(|_| ApiError::webhook(sbx_connect::service::WebhookError::TooLarge(max)))?;
    let headers: BTreeMap<String, String> = headers
        .iter()
        .filter_map(|(k, v)| Some((k.as_str().to_string(), v.to_str().ok()?.to_string())))
        .collect();
    let received =
        views::blocking_webhook(&svc, move |c| c.receive_delivery(&token, &headers, &body))
            .await??;
    let status = if received.duplicate {
        StatusCode::OK
    } else {
        StatusCode::ACCEPTED
    };
    Ok(envelope::data(
        status,
        json!({"id": received.delivery.id, "deliveryId": received.delivery.sender_id,
               "duplicate": received.duplicate}),
    ))
}

/// `POST /v1/connect/connections/{connectionId}/webhooks` (200 with the URLs made and the
/// new secret, shown once)
pub async fn setup(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    body: Bytes,
) -> Result<Response, ApiError> {
    let req: WebhookSetupRequest = parse_body(&body)?;
    let out = views::blocking(&svc, move |c| c.setup_webhooks(&ws.0, &id, &req))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, out))
}

/// `GET /v1/connect/connections/{connectionId}/deliveries?limit&cursor&status`
pub async fn list(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
) -> Result<Response, ApiError> {
    let q: DeliveriesQuery = parse_query(q.as_deref())?;
    let page_q = PageQuery {
        cursor: q.cursor,
        limit: q.limit,
    };
    let limit = page_q.limit();
    let status = q.status;
    let page = views::blocking(&svc, move |c| {
        c.list_deliveries(&ws.0, &id, status.as_deref(), &page_q)
    })
    .await?
    .map_err(views::other)?;
    let items = page
        .items
        .into_iter()
        .map(|d| serde_json::to_value(d).unwrap_or_default())
        .collect();
    Ok(envelope::list(items, limit, page.next_cursor))
}

/// `GET /v1/connect/connections/{connectionId}/deliveries/{deliveryId}`
pub async fn get(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path((id, delivery)): Path<(String, String)>,
) -> Result<Response, ApiError> {
    let d = views::blocking(&svc, move |c| c.get_delivery(&ws.0, &id, &delivery))
        .await?
        .map_err(views::other)?;
    Ok(envelope::data(StatusCode::OK, d))
}
