//! The node: what acts on one host. It runs sandboxes under gVisor (`runtime`:
//! runsc, disks, console logs, OOM handling, the connection to each sandbox's
//! agent), serves their network (`network`: the egress broker, relays and DNS)
//! and reaps runsc's children (`reaper`). It decides nothing: the control plane
//! (`sbx-daemon`: HTTP API, lifecycle service, tenants, Connect) tells it what
//! to do, through the [`runtime::Runtime`] trait and [`network::Network`].

pub mod network;
pub mod reaper;
pub mod runtime;
