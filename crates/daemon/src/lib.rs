//! sbxd, the control plane of sbx: what decides. The HTTP API (`api`), the lifecycle
//! service (`service`: state transitions decided by the store, idempotency, secrets,
//! admission), tenants, and the Connect runtime's wiring (`connect_jobs`: the node's job
//! and build sandboxes behind `sbx-connect`'s traits). What acts on the host lives in
//! `sbx-node` (re-exported here as `runtime`, `network` and `reaper`).

pub mod api;
pub mod backup;
pub mod config;
pub mod connect_jobs;
pub mod console;
pub mod data_dir;
pub mod migrate_store;
pub mod secret_keys;
pub mod server;
pub mod service;
pub mod telemetry;
pub mod tenants;
pub mod tls;

pub use sbx_node::{network, reaper, runtime};
