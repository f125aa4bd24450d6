//! Connect runtime: connector packages built and run one job at a time in fresh sandboxes,
//! with credentials only in the host broker and all-or-nothing sync output.

pub mod api;
pub mod artifact;
pub mod broker;
pub mod commit;
pub mod credentials;
pub mod crypto;
pub mod egress;
pub mod job;
pub mod limits;
pub mod logs;
pub mod model;
pub mod oauth;
pub mod package;
pub mod sandbox;
pub mod schema;
pub mod secrets;
pub mod service;
pub mod signature;
pub mod spool;
pub mod store;
