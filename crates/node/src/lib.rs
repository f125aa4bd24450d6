//! The node: what acts on one host. It runs sandboxes under gVisor (`runtime`:
//! runsc, disks, console logs, OOM handling, the connection to each sandbox's
//! agent), serves their network (`network`: the egress broker, relays and DNS),
//! runs Connect's job and build sandboxes (`jobs`: mounts, limits, the job
//! channel, the memory watchdog), keeps snapshot files in a local directory or
//! S3-compatible object storage (`snapshot_store`) and reaps runsc's children (`reaper`). It
//! decides nothing: the control plane (`sbx-daemon`: HTTP API, lifecycle
//! service, admission, tenants, Connect) tells it what to do, through the
//! [`runtime::Runtime`] trait, [`network::Network`] and [`jobs::GvisorJobs`],
//! and answers its questions through [`jobs::Admission`]. It depends on neither
//! `sbx-daemon` nor `sbx-connect`.

pub mod images;
pub mod jobs;
pub mod network;
pub mod reaper;
pub mod runtime;
pub mod snapshot_store;
pub mod usage;
