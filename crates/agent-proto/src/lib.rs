//! The protocol between `sbxd` and `sbx-agent` (PID 1 inside every sandbox).
//!
//! See `PROTOCOL.md` in this crate for the documented schema. In short: the
//! daemon and the agent exchange [`Frame`]s over a byte stream (the stdio of a
//! `runsc exec sbx-agent relay` process, bridged to the agent's in-sandbox
//! socket). Every frame carries a request id so that many requests run
//! concurrently on one stream; bulk bytes (file contents, process output) ride
//! in the frame's binary payload, never inside the JSON header.

pub mod codec;
pub mod direct;
pub mod messages;

pub use codec::{read_frame, write_frame, CodecError, Frame, MAX_FRAME_BYTES, MAX_HEADER_BYTES};
pub use direct::*;
pub use messages::*;

/// Protocol version announced in [`messages::Reply::Hello`]; bump on incompatible change.
pub const PROTOCOL_VERSION: u32 = 1;

/// Path of the agent's listening socket inside the sandbox.
pub const AGENT_SOCKET_PATH: &str = "/run/sbx-agent.sock";

/// Where the agent binary is mounted (read-only) inside every sandbox.
pub const AGENT_BINARY_PATH: &str = "/.sbx/bin/sbx-agent";
