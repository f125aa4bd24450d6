//! Input and terminal control of running processes: `process_input`,
//! `process_close_stdin` and `process_resize` on the process table.

use crate::input::InputError;
use crate::table::{not_found, Proc, Table};
use sbx_agent_proto::{AgentError, AgentErrorCode, PtySize};
use std::os::fd::AsFd;
use tokio::sync::oneshot;
use uuid::Uuid;

fn invalid(message: String) -> AgentError {
    AgentError::new(AgentErrorCode::InvalidArgument, message)
}

impl Proc {
    /// Fails unless the process still runs (its status not yet collected).
    fn running(&self) -> Result<(), AgentError> {
        if self.status.is_some() || self.info.state.is_terminal() {
            return Err(invalid(format!("process {} has ended", self.info.id)));
        }
        Ok(())
    }
}

impl Table {
    /// Queues input for a running process's stdin pipe or terminal; the
    /// receiver tells when it was written.
    pub fn input(
        &self,
        id: Uuid,
        bytes: Vec<u8>,
    ) -> Result<oneshot::Receiver<std::io::Result<()>>, AgentError> {
        let inner = self.lock();
        let p = inner.procs.get(&id).ok_or_else(|| not_found(id))?;
        p.running()?;
        let input = p
            .input
            .as_ref()
            .ok_or_else(|| invalid(format!("stdin of process {id} is not open")))?;
        input.write(bytes).map_err(|e| match e {
            InputError::Backlog => AgentError::new(AgentErrorCode::Io, e.to_string()),
            InputError::Closed => invalid(format!("stdin of process {id} is closed")),
        })
    }

    /// Closes a running process's stdin pipe (after the queued input); the
    /// receiver fires once it is closed. Refused for a terminal.
    pub fn close_stdin(&self, id: Uuid) -> Result<oneshot::Receiver<()>, AgentError> {
        let mut inner = self.lock();
        let p = inner.procs.get_mut(&id).ok_or_else(|| not_found(id))?;
        if p.info.pty {
            return Err(invalid(format!(
                "process {id} runs on a terminal: send \\x04 (end of file) as input instead"
            )));
        }
        p.running()?;
        let input = p
            .input
            .take()
            .ok_or_else(|| invalid(format!("stdin of process {id} is not open")))?;
        p.info.stdin_open = false;
        p.changed.send_replace(());
        Ok(input.close())
    }

    /// Sets the terminal size of a running terminal process.
    pub fn resize(&self, id: Uuid, size: PtySize) -> Result<(), AgentError> {
        let inner = self.lock();
        let p = inner.procs.get(&id).ok_or_else(|| not_found(id))?;
        if !p.info.pty {
            return Err(invalid(format!("process {id} has no terminal")));
        }
        p.running()?;
        let master = p
            .master
            .as_ref()
            .ok_or_else(|| invalid(format!("process {id} has ended")))?;
        crate::pty::resize(master.as_fd(), size)
            .map_err(|e| AgentError::new(AgentErrorCode::Io, format!("resize: {e}")))
    }
}
