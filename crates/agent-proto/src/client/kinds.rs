//! Each request's `op` word, the label of sbxd's agent call metrics.

use crate::Request;

/// A request's kind for metrics: its `op` word (a fixed set).
pub(super) fn request_kind(request: &Request) -> &'static str {
    match request {
        Request::Ping => "ping",
        Request::Hello => "hello",
        Request::Configure { .. } => "configure",
        Request::Exec { .. } => "exec",
        Request::ProcessStart { .. } => "process_start",
        Request::ProcessInput { .. } => "process_input",
        Request::ProcessCloseStdin { .. } => "process_close_stdin",
        Request::ProcessResize { .. } => "process_resize",
        Request::ProcessList => "process_list",
        Request::ProcessGet { .. } => "process_get",
        Request::ProcessSignal { .. } => "process_signal",
        Request::ProcessWait { .. } => "process_wait",
        Request::ProcessOutput { .. } => "process_output",
        Request::ProcessStream { .. } => "process_stream",
        Request::FileWriteBegin { .. } => "file_write_begin",
        Request::FileWriteData => "file_write_data",
        Request::FileWriteEnd => "file_write_end",
        Request::FileWriteAbort => "file_write_abort",
        Request::FileRead { .. } => "file_read",
        Request::Stat { .. } => "stat",
        Request::ListDir { .. } => "list_dir",
        Request::Mkdir { .. } => "mkdir",
        Request::Remove { .. } => "remove",
        Request::Rename { .. } => "rename",
        Request::Watch { .. } => "watch",
        Request::Sync => "sync",
        Request::GuestProcesses => "guest_processes",
        Request::Quiesce => "quiesce",
        Request::NetServe => "net_serve",
        Request::NetDialResult { .. } => "net_dial_result",
        Request::NetData { .. } => "net_data",
        Request::NetAck { .. } => "net_ack",
        Request::NetClose { .. } => "net_close",
        Request::NetResolveResult { .. } => "net_resolve_result",
        Request::PortOpen { .. } => "port_open",
        Request::PortData => "port_data",
        Request::PortAck { .. } => "port_ack",
        Request::PortClose { .. } => "port_close",
    }
}
