//! The protocol between `sbxd` and `sbx-agent` (PID 1 inside every sandbox).
//!
//! See `PROTOCOL.md` in this crate for the documented schema. In short: the
//! daemon and the agent exchange [`Frame`]s over a byte stream: PID 1's own
//! stdin and stdout (a host socket pair, see [`attach`]) or, for a sandbox
//! that outlived the sbxd that started it, the stdio of a `runsc exec
//! sbx-agent relay` process bridged to the agent's in-sandbox socket. Every frame carries a request id so that many requests run
//! concurrently on one stream; bulk bytes (file contents, process output) ride
//! in the frame's binary payload, never inside the JSON header.

pub mod attach;
#[cfg(feature = "client")]
pub mod client;
pub mod codec;
pub mod direct;
pub mod file_metadata;
pub mod messages;

pub use codec::{read_frame, write_frame, CodecError, Frame, MAX_FRAME_BYTES, MAX_HEADER_BYTES};
pub use direct::*;
pub use messages::*;

/// Protocol version announced in [`messages::Reply::Hello`]; bump on incompatible change.
pub const PROTOCOL_VERSION: u32 = 2;

/// Name of the agent's listening socket inside the sandbox, in the abstract
/// unix socket namespace: unlike a file under `/run`, the guest cannot unlink
/// it and bind its own in its place while the agent holds it.
pub const AGENT_SOCKET_NAME: &str = "sbx-agent";

/// Host directory mounted read-only at this path in every sandbox; the mount
/// point sits directly under `/`, so the guest (no `CAP_SYS_ADMIN`) can neither
/// rename it (`EBUSY`), unmount it nor mount over it.
pub const AGENT_MOUNT_PATH: &str = "/.sbx";

/// Where the agent binary is inside every sandbox (in [`AGENT_MOUNT_PATH`]).
pub const AGENT_BINARY_PATH: &str = "/.sbx/sbx-agent";
