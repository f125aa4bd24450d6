//! Where snapshots and S3 volumes live (`--snapshot-store`, `--s3-*`).

use super::ConfigError;
use std::path::PathBuf;

/// `--snapshot-store` (`local`, or `s3://bucket/prefix`), `--s3-endpoint` and
/// `--s3-region`; the credentials come from the environment only (never a
/// flag, which `ps` would show): `SBX_S3_ACCESS_KEY_ID` /
/// `SBX_S3_SECRET_ACCESS_KEY` / `SBX_S3_SESSION_TOKEN`, else the usual
/// `AWS_ACCESS_KEY_ID` / `AWS_SECRET_ACCESS_KEY` / `AWS_SESSION_TOKEN`.
pub fn snapshot_store_config(
    store: &str,
    endpoint: Option<String>,
    region: String,
) -> Result<sbx_node::snapshot_store::StoreConfig, ConfigError> {
    let env = |sbx: &str, aws: &str| {
        std::env::var(sbx)
            .ok()
            .or_else(|| std::env::var(aws).ok())
            .filter(|v| !v.is_empty())
    };
    let s3 = sbx_node::snapshot_store::S3Config {
        endpoint: endpoint.filter(|e| !e.trim().is_empty()),
        region,
        access_key_id: env("SBX_S3_ACCESS_KEY_ID", "AWS_ACCESS_KEY_ID"),
        secret_access_key: env("SBX_S3_SECRET_ACCESS_KEY", "AWS_SECRET_ACCESS_KEY"),
        session_token: env("SBX_S3_SESSION_TOKEN", "AWS_SESSION_TOKEN"),
        ..Default::default()
    };
    Ok(sbx_node::snapshot_store::StoreConfig::parse(store, s3)?)
}

/// Where S3 volumes live: beside the snapshots when they are in object
/// storage (`<prefix>/volumes/<id>/`, same bucket and credentials); `None`
/// otherwise (S3 volumes are then refused).
pub fn s3_volume_config(
    store: &sbx_node::snapshot_store::StoreConfig,
) -> Option<sbx_node::runtime::s3_volumes::S3VolumeConfig> {
    match store {
        sbx_node::snapshot_store::StoreConfig::Local => None,
        sbx_node::snapshot_store::StoreConfig::S3(c) => {
            Some(sbx_node::runtime::s3_volumes::S3VolumeConfig {
                s3: c.clone(),
                rclone: PathBuf::from("rclone"),
                // `sbxd quotafs`: this very binary, so the quota layer is
                // always the version sbxd expects, wherever it is installed.
                quotafs: std::env::current_exe().unwrap_or_else(|_| PathBuf::from("sbxd")),
            })
        }
    }
}
