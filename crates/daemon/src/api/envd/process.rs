//! `process.Process/*`: each method parses its message and calls one `Envd` function.

use super::connect::{self, parse, ConnectError};
use super::wire::{
    self, ProcessOnly, SendInputRequest, SendSignalRequest, StartRequest, StreamInputRequest,
    UpdateRequest,
};
use super::{rpc_caller, wire::selector};
use crate::service::envd::process::{ProcessEvents, StartSpec};
use crate::service::envd::{Caller, Envd};
use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use futures::StreamExt;
use serde_json::{json, Value};
use std::sync::Arc;

/// `POST /process.Process/{method}`.
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
    if method == "StreamInput" {
        return connect::client_stream_response(stream_input(&envd, &caller, body).await);
    }
    let message = match connect::read_message(&headers, body).await {
        Ok(m) => m,
        Err(e) => return connect::error_response(&headers, e),
    };
    match method.as_str() {
        "Start" => match start(&envd, &caller, &headers, message).await {
            Ok(events) => stream(&headers, events),
            Err(e) => connect::error_response(&headers, e),
        },
        "Connect" => match attach(&envd, &caller, &headers, message).await {
            Ok(events) => stream(&headers, events),
            Err(e) => connect::error_response(&headers, e),
        },
        _ => match unary(&envd, &caller, &method, message).await {
            Ok(v) => connect::unary(v),
            Err(e) => e.into_response(),
        },
    }
}

fn stream(headers: &HeaderMap, events: ProcessEvents) -> Response {
    let messages = tokio_stream::wrappers::ReceiverStream::new(events).map(|e| {
        e.map(|e| wire::process_event(&e))
            .map_err(ConnectError::from)
    });
    connect::stream_response(
        messages,
        connect::keepalive(headers),
        wire::process_keepalive(),
    )
}

async fn start(
    envd: &Envd,
    caller: &Caller,
    headers: &HeaderMap,
    message: Value,
) -> Result<ProcessEvents, ConnectError> {
    let req: StartRequest = parse(message)?;
    let process = req
        .process
        .ok_or_else(|| ConnectError::invalid("process is required"))?;
    let pty = match req.pty {
        Some(p) => Some(
            p.size
                .ok_or_else(|| ConnectError::invalid("pty.size is required"))?
                .size()?,
        ),
        None => None,
    };
    let spec = StartSpec {
        cmd: process.cmd,
        args: process.args,
        envs: process.envs,
        cwd: process.cwd,
        // A terminal takes its input through the pty; the pipe would be unused.
        stdin: pty.is_none() && req.stdin.unwrap_or(true),
        pty,
        tag: req.tag,
        deadline: connect::timeout(headers)?,
    };
    Ok(envd.start(caller, spec).await?)
}

async fn attach(
    envd: &Envd,
    caller: &Caller,
    headers: &HeaderMap,
    message: Value,
) -> Result<ProcessEvents, ConnectError> {
    let req: ProcessOnly = parse(message)?;
    let selector = selector(req.process.as_ref())?;
    Ok(envd
        .attach(caller, &selector, connect::timeout(headers)?)
        .await?)
}

async fn unary(
    envd: &Envd,
    caller: &Caller,
    method: &str,
    message: Value,
) -> Result<Value, ConnectError> {
    match method {
        "List" => {
            let processes = envd.list(caller).await?;
            let list: Vec<Value> = processes.iter().map(wire::process_info).collect();
            Ok(json!({"processes": list}))
        }
        "SendInput" => {
            let req: SendInputRequest = parse(message)?;
            let selector = selector(req.process.as_ref())?;
            let (kind, bytes) = req.input.unwrap_or_default().decode()?;
            envd.send_input(caller, &selector, kind, bytes).await?;
            Ok(json!({}))
        }
        "CloseStdin" => {
            let req: ProcessOnly = parse(message)?;
            envd.close_stdin(caller, &selector(req.process.as_ref())?)
                .await?;
            Ok(json!({}))
        }
        "SendSignal" => {
            let req: SendSignalRequest = parse(message)?;
            let signal = req.signal()?;
            envd.signal(caller, &selector(req.process.as_ref())?, signal)
                .await?;
            Ok(json!({}))
        }
        "Update" => {
            let req: UpdateRequest = parse(message)?;
            let size = req
                .pty
                .and_then(|p| p.size)
                .ok_or_else(|| ConnectError::invalid("pty.size is required"))?
                .size()?;
            envd.resize(caller, &selector(req.process.as_ref())?, size)
                .await?;
            Ok(json!({}))
        }
        other => Err(ConnectError::new(
            "unimplemented",
            format!("process.Process/{other} is not a method"),
        )),
    }
}

/// `StreamInput` (Python): `start` names the process, then `data` messages
/// in order until the request body ends.
async fn stream_input(envd: &Envd, caller: &Caller, body: Body) -> Result<(), ConnectError> {
    let mut messages = connect::ClientStream::new(body);
    let mut target = None;
    while let Some(message) = messages.next().await {
        let req: StreamInputRequest = parse(message?)?;
        if let Some(start) = req.start {
            target = Some(selector(start.process.as_ref())?);
        } else if let Some(data) = req.data {
            let selector = target
                .as_ref()
                .ok_or_else(|| ConnectError::invalid("the first message must be start"))?;
            let (kind, bytes) = data.input.unwrap_or_default().decode()?;
            envd.send_input(caller, selector, kind, bytes).await?;
        }
    }
    Ok(())
}
