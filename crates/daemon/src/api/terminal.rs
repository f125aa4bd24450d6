//! `GET /v1/sandboxes/{id}/terminal`: the console's terminal over a
//! WebSocket. Binary frames carry the terminal's bytes both ways; text
//! frames carry JSON control messages: the client sends
//! `{"type":"resize","cols":N,"rows":M}`, the server sends
//! `{"type":"ready","pid":N}` first (the pid a reconnect names with `?pid=`),
//! `{"type":"exit","code":N}` when the shell ends and `{"type":"error",...}`
//! when the sandbox stops answering. Closing the socket leaves the shell running.

use super::{parse_id, parse_query, ApiError, AppState, Workspace};
use crate::service::terminal::{Terminal, TerminalOutput, TerminalRequest};
use axum::extract::ws::{Message, WebSocket, WebSocketUpgrade};
use axum::extract::{Path, RawQuery, State};
use axum::response::Response;
use axum::Extension;
use sbx_agent_proto::PtySize;
use sbx_api_types::ErrorCode;
use serde::Deserialize;

/// Size of a terminal opened without one.
const DEFAULT_SIZE: PtySize = PtySize { cols: 80, rows: 24 };

#[derive(Deserialize)]
struct TerminalQuery {
    pid: Option<u32>,
    cols: Option<u16>,
    rows: Option<u16>,
}

/// A control message from the browser.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
enum Control {
    Resize { cols: u16, rows: u16 },
}

/// Upgrades to the terminal's WebSocket once the shell is started (or found).
pub async fn open(
    State(svc): State<AppState>,
    Extension(ws): Extension<Workspace>,
    Path(id): Path<String>,
    RawQuery(q): RawQuery,
    upgrade: Result<WebSocketUpgrade, axum::extract::ws::rejection::WebSocketUpgradeRejection>,
) -> Result<Response, ApiError> {
    let id = parse_id(&id, "sandboxId")?;
    let q: TerminalQuery = parse_query(q.as_deref())?;
    // Refused before the shell starts: a plain GET must not leave one behind.
    let upgrade = upgrade.map_err(|e| {
        ApiError::new(
            ErrorCode::InvalidRequest,
            format!("this route is a WebSocket: {e}"),
        )
    })?;
    let request = TerminalRequest {
        pid: q.pid,
        size: PtySize {
            cols: q.cols.unwrap_or(DEFAULT_SIZE.cols),
            rows: q.rows.unwrap_or(DEFAULT_SIZE.rows),
        },
    };
    let terminal = svc.terminal_open(&ws.0, id, request).await?;
    Ok(upgrade.on_upgrade(move |socket| relay(socket, terminal)))
}

/// Joins the socket and the terminal until either ends.
async fn relay(mut socket: WebSocket, mut terminal: Terminal) {
    let ready = serde_json::json!({"type": "ready", "pid": terminal.pid});
    if send_json(&mut socket, ready).await.is_err() {
        return;
    }
    loop {
        tokio::select! {
            out = terminal.next() => match out {
                Some(Ok(TerminalOutput::Data(bytes))) => {
                    if socket.send(Message::Binary(bytes.into())).await.is_err() {
                        return;
                    }
                }
                Some(Ok(TerminalOutput::Exited(code))) => {
                    let _ = send_json(&mut socket, serde_json::json!({"type": "exit", "code": code})).await;
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
                Some(Err(e)) => {
                    let _ = send_error(&mut socket, &ApiError::from(e)).await;
                    let _ = socket.send(Message::Close(None)).await;
                    return;
                }
                None => return,
            },
            msg = socket.recv() => {
                let done = match msg {
                    Some(Ok(Message::Binary(bytes))) => terminal.input(bytes.to_vec()).await.err(),
                    Some(Ok(Message::Text(text))) => match serde_json::from_str::<Control>(text.as_str()) {
                        Ok(Control::Resize { cols, rows }) => terminal.resize(cols, rows).await.err(),
                        Err(e) => {
                            let bad = ApiError::new(ErrorCode::InvalidRequest, format!("invalid control message: {e}"));
                            if send_error(&mut socket, &bad).await.is_err() {
                                return;
                            }
                            None
                        }
                    },
                    // Pings are answered by the WebSocket layer itself.
                    Some(Ok(Message::Ping(_) | Message::Pong(_))) => None,
                    // The browser left: the shell keeps running for a reconnect.
                    Some(Ok(Message::Close(_)) | Err(_)) | None => return,
                };
                if let Some(e) = done {
                    if send_error(&mut socket, &ApiError::from(e)).await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

async fn send_json(socket: &mut WebSocket, value: serde_json::Value) -> Result<(), axum::Error> {
    socket.send(Message::Text(value.to_string().into())).await
}

async fn send_error(socket: &mut WebSocket, e: &ApiError) -> Result<(), axum::Error> {
    let value = serde_json::json!({"type": "error", "code": e.code.as_str(), "message": e.message});
    send_json(socket, value).await
}
