//! `filesystem.Filesystem/*`: each method parses its message and calls one `Envd` function.

use super::connect::{self, parse, ConnectError};
use super::rpc_caller;
use super::wire::{self, ListDirRequest, MoveRequest, PathRequest, WatchRequest, WatcherRequest};
use crate::service::envd::{Caller, Envd};
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;

/// `POST /filesystem.Filesystem/{method}`.
pub async fn rpc(
    State(envd): State<Arc<Envd>>,
    Path(method): Path<String>,
    req: Request,
) -> Response {
    let (parts, body) = req.into_parts();
    let headers = parts.headers;
    let caller = match rpc_caller(&envd, &headers).await {
        Ok(c) => c,
        Err(e) => return connect::error_response(&headers, e.into()),
    };
    let message = match connect::read_message(&headers, body).await {
        Ok(m) => m,
        Err(e) => return connect::error_response(&headers, e),
    };
    if method == "WatchDir" {
        return watch(&envd, &caller, &headers, message).await;
    }
    match unary(&envd, &caller, &method, message).await {
        Ok(v) => connect::unary(v),
        Err(e) => e.into_response(),
    }
}

fn keepalive_message() -> Value {
    json!({"keepalive": {}})
}

/// `WatchDir`: `{"start":{}}`, then one message per change, until the
/// client leaves or its `Connect-Timeout-Ms` passes (`deadline_exceeded`).
async fn watch(envd: &Envd, caller: &Caller, headers: &HeaderMap, message: Value) -> Response {
    let opened = async {
        let req: WatchRequest = parse(message)?;
        let deadline = connect::timeout(headers)?;
        let events = envd
            .watch(caller, &req.path, req.recursive, req.include_entry)
            .await?;
        Ok::<_, ConnectError>((events, deadline))
    };
    let (events, deadline) = match opened.await {
        Ok(v) => v,
        Err(e) => return connect::error_response(headers, e),
    };
    let changes = tokio_stream::wrappers::ReceiverStream::new(events).map(|e| {
        e.map(|e| json!({"filesystem": wire::fs_event(&e)}))
            .map_err(ConnectError::from)
    });
    let messages = futures::stream::once(async { Ok(json!({"start": {}})) }).chain(changes);
    let messages: futures::stream::BoxStream<'static, Result<Value, ConnectError>> = match deadline
    {
        None => messages.boxed(),
        Some(limit) => {
            let until = tokio::time::sleep(limit);
            messages
                .take_until(until)
                .chain(futures::stream::once(async {
                    Err(ConnectError::new(
                        "deadline_exceeded",
                        "the watch's deadline (Connect-Timeout-Ms) passed",
                    ))
                }))
                .boxed()
        }
    };
    connect::stream_response(messages, connect::keepalive(headers), keepalive_message())
}

async fn unary(
    envd: &Envd,
    caller: &Caller,
    method: &str,
    message: Value,
) -> Result<Value, ConnectError> {
    match method {
        "Stat" => {
            let req: PathRequest = parse(message)?;
            let stat = envd.stat(caller, &req.path).await?;
            Ok(json!({"entry": wire::entry(&stat)}))
        }
        "ListDir" => {
            let req: ListDirRequest = parse(message)?;
            let entries = envd
                .list_dir(caller, &req.path, req.depth.unwrap_or(1))
                .await?;
            let entries: Vec<Value> = entries.iter().map(wire::entry).collect();
            Ok(json!({"entries": entries}))
        }
        "MakeDir" => {
            let req: PathRequest = parse(message)?;
            let stat = envd.make_dir(caller, &req.path).await?;
            Ok(json!({"entry": wire::entry(&stat)}))
        }
        "Move" => {
            let req: MoveRequest = parse(message)?;
            let stat = envd.rename(caller, &req.source, &req.destination).await?;
            Ok(json!({"entry": wire::entry(&stat)}))
        }
        "Remove" => {
            let req: PathRequest = parse(message)?;
            envd.remove(caller, &req.path).await?;
            Ok(json!({}))
        }
        "CreateWatcher" => {
            let req: WatchRequest = parse(message)?;
            let id = envd
                .create_watcher(caller, &req.path, req.recursive, req.include_entry)
                .await?;
            Ok(json!({"watcherId": id}))
        }
        "GetWatcherEvents" => {
            let req: WatcherRequest = parse(message)?;
            let events = envd.watcher_events(caller, &req.watcher_id)?;
            let events: Vec<Value> = events.iter().map(wire::fs_event).collect();
            Ok(json!({"events": events}))
        }
        "RemoveWatcher" => {
            let req: WatcherRequest = parse(message)?;
            envd.remove_watcher(caller, &req.watcher_id)?;
            Ok(json!({}))
        }
        other => Err(ConnectError::new(
            "unimplemented",
            format!("filesystem.Filesystem/{other} is not a method"),
        )),
    }
}
