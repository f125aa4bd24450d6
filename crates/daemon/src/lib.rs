//! sbxd: HTTP API, lifecycle service and gVisor runtime of sbx.

pub mod api;
pub mod config;
pub mod connect;
pub mod console;
pub mod data_dir;
pub mod migrate_store;
pub mod network;
pub mod reaper;
pub mod runtime;
pub mod secret_keys;
pub mod server;
pub mod service;
pub mod tenants;
