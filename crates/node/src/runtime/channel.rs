//! sbxd's end of the sandboxes' stdio channels: PID 1's stdin and stdout
//! are one end of a socket pair, this the other (see `sbx_agent_proto::attach`).

use super::{AgentConn, RuntimeError};
use sbx_agent_proto::{attach, Reply, Request};
use std::collections::HashMap;
use std::os::unix::net::UnixStream as StdUnixStream;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use uuid::Uuid;

/// How much of an older session's output an attach may skip before the agent's answer.
const ATTACH_SCAN_LIMIT: u64 = 64 << 20;

/// sbxd's end of one sandbox's stdio channel.
pub(super) struct Channel {
    socket: StdUnixStream,
    /// One attach at a time: each one ends the agent's previous session.
    attaching: tokio::sync::Mutex<()>,
}

/// The channels of the sandboxes this process started or restored.
#[derive(Default)]
pub(super) struct Channels(Mutex<HashMap<Uuid, Arc<Channel>>>);

impl Channels {
    /// The channel of `id`, if this process holds one.
    pub(super) fn get(&self, id: Uuid) -> Option<Arc<Channel>> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned()
    }

    /// Keeps `socket` as the channel of `id`; `None` drops it (closing it
    /// once no connection uses it).
    pub(super) fn set(&self, id: Uuid, socket: Option<StdUnixStream>) {
        let mut channels = self.0.lock().unwrap_or_else(|p| p.into_inner());
        match socket {
            Some(socket) => channels.insert(
                id,
                Arc::new(Channel {
                    socket,
                    attaching: tokio::sync::Mutex::new(()),
                }),
            ),
            None => channels.remove(&id),
        };
    }
}

/// A nonblocking tokio stream on a new descriptor of `socket`. Dropping it
/// closes only that descriptor (no `shutdown`), so the channel lives on.
fn tokio_stream(socket: &StdUnixStream) -> std::io::Result<tokio::net::UnixStream> {
    let dup = socket.try_clone()?;
    dup.set_nonblocking(true)?;
    tokio::net::UnixStream::from_std(dup)
}

/// Attaches a new session: the marker exchange (skipping whatever an older
/// session left in the stream) within `limit`, then `hello`.
pub(super) async fn attach(channel: &Channel, limit: Duration) -> Result<AgentConn, RuntimeError> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _one = channel.attaching.lock().await;
    let mut reader = tokio_stream(&channel.socket)?;
    let mut writer = tokio_stream(&channel.socket)?;
    let nonce = Uuid::new_v4().into_bytes();
    let exchange = async {
        writer.write_all(&attach::attach_bytes(&nonce)).await?;
        attach::skip_past(
            &mut reader,
            attach::attached_bytes(&nonce),
            ATTACH_SCAN_LIMIT,
        )
        .await
    };
    let rest = match tokio::time::timeout(limit, exchange).await {
        Ok(Ok(rest)) => rest,
        Ok(Err(e)) => return Err(RuntimeError::AgentNotReady(format!("attach: {e}"))),
        Err(_) => {
            return Err(RuntimeError::AgentNotReady(
                "the agent did not answer the attach".into(),
            ))
        }
    };
    let conn = AgentConn::over_stdio_channel(std::io::Cursor::new(rest).chain(reader), writer);
    handshake(conn, limit).await
}

/// `hello` within `limit`; a connection that fails it is closed.
pub(super) async fn handshake(conn: AgentConn, limit: Duration) -> Result<AgentConn, RuntimeError> {
    let failure = match conn.call_within(Request::Hello, limit).await {
        Ok((Reply::Hello { .. }, _)) => return Ok(conn),
        Ok((other, _)) => format!("unexpected hello reply {other:?}"),
        Err(e) => e.to_string(),
    };
    conn.shutdown().await;
    Err(RuntimeError::AgentNotReady(failure))
}
