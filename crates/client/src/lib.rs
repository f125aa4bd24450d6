//! Rust client of the sbx HTTP API.
