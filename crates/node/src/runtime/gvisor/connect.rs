//! Opening a session with a sandbox's agent: the stdio channel when this
//! sbxd holds one, else a `runsc exec sbx-agent relay` process.

use super::{
    container_id, GvisorRuntime, AGENT_BINARY_PATH, AGENT_READY_TIMEOUT, HANDSHAKE_TIMEOUT,
    RELAY_EXIT_TIMEOUT,
};
use crate::runtime::channel::{attach, handshake};
use crate::runtime::{AgentConn, RuntimeError};
use sbx_runsc::ExecOptions;
use std::process::Stdio;
use std::time::Duration;
use uuid::Uuid;

impl GvisorRuntime {
    pub(super) async fn wait_for_agent(&self, id: Uuid) -> Result<AgentConn, RuntimeError> {
        self.connect_within(id, AGENT_READY_TIMEOUT).await
    }

    /// Connects, retrying for up to `limit`: right after a boot or a restore
    /// `runsc exec` can fail for a moment before the sandbox accepts it.
    pub(super) async fn connect_within(
        &self,
        id: Uuid,
        limit: Duration,
    ) -> Result<AgentConn, RuntimeError> {
        crate::runtime::open_within(limit, || self.connect_inner(id)).await
    }

    /// A new session: over the stdio channel when this sbxd holds one,
    /// otherwise through a relay process.
    pub(super) async fn connect_inner(&self, id: Uuid) -> Result<AgentConn, RuntimeError> {
        let Some(channel) = self.channels.get(id) else {
            return self.connect_relay(id).await;
        };
        let unanswered = match attach(&channel, HANDSHAKE_TIMEOUT).await {
            Ok(conn) => return Ok(conn),
            Err(e) => e,
        };
        // An agent older than the channel (restored from a snapshot an
        // older sbxd took) never reads it: a relay reaches it, and the
        // channel is dropped (its peer writes its console there).
        match self.connect_relay(id).await {
            Ok(conn) => {
                tracing::info!(sandbox = %id, attach = %unanswered, "the agent does not answer on its stdio channel; using a relay");
                self.channels.set(id, None);
                Ok(conn)
            }
            Err(_) => Err(unanswered),
        }
    }

    pub(super) async fn connect_relay(&self, id: Uuid) -> Result<AgentConn, RuntimeError> {
        self.thaw_for_runsc(id).await?;
        let opts = ExecOptions {
            argv: vec![AGENT_BINARY_PATH.to_string(), "relay".to_string()],
            ..ExecOptions::default()
        };
        let mut cmd = self.runsc.exec_command(&container_id(id), &opts);
        cmd.stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null());
        let mut child = cmd.spawn()?;
        let (Some(stdin), Some(stdout)) = (child.stdin.take(), child.stdout.take()) else {
            return Err(RuntimeError::AgentNotReady("relay has no stdio".into()));
        };
        let (conn, close) = AgentConn::with_closer(stdout, stdin);
        // Reap the relay when it exits. On shutdown our end of its stdin is
        // already closed, so the relay inside the sandbox sees EOF and exits, and
        // `runsc exec` returns after it: waiting for that (instead of killing
        // `runsc exec`) tells us the in-sandbox process is gone.
        tokio::spawn(async move {
            tokio::select! {
                _ = child.wait() => {}
                Ok(closing) = close => {
                    if tokio::time::timeout(RELAY_EXIT_TIMEOUT, child.wait()).await.is_err() {
                        let _ = child.kill().await;
                    }
                    let _ = closing.done.send(());
                }
            }
        });
        // The handshake has a deadline (the relay's peer is untrusted); a
        // connection that fails it is closed, which stops its relay.
        handshake(conn, HANDSHAKE_TIMEOUT).await
    }
}
