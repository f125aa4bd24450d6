//! `sbxd`: the sbx daemon, and its admin commands.

mod admin;
mod args;
mod connect;
mod daemon;
mod stores;

use admin::{KeysArgs, MigrateStoreArgs, QuotafsArgs};
use args::Args;
use clap::Parser;
use stores::{open_connect_store, open_store};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let command = std::env::args().nth(1);
    if !command
        .as_deref()
        .is_some_and(|c| ADMIN_COMMANDS.contains(&c))
    {
        let args = Args::parse();
        let telemetry = sbx_daemon::telemetry::init(
            args.telemetry.log_format,
            args.telemetry.otlp_endpoint.as_deref(),
        )?;
        let result = daemon::daemon_main(args).await;
        // The spans of the last requests (and of a failed start) go out before exit.
        telemetry.shutdown().await;
        return result;
    }
    sbx_daemon::telemetry::init(sbx_daemon::telemetry::LogFormat::Text, None)?;
    if std::env::args().nth(1).as_deref() == Some("backup") {
        let args = sbx_daemon::backup::BackupArgs::parse_from(std::env::args().skip(1));
        println!("{}", sbx_daemon::backup::backup(&args)?);
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("restore") {
        let args = sbx_daemon::backup::RestoreArgs::parse_from(std::env::args().skip(1));
        println!("{}", sbx_daemon::backup::restore(&args)?);
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("quotafs") {
        let args = QuotafsArgs::parse_from(std::env::args().skip(1));
        // Blocks until the mount is unmounted; nothing else runs in this process.
        sbx_daemon::runtime::quotafs::serve(&args.source, &args.mount, args.limit_bytes)?;
        return Ok(());
    }
    if std::env::args().nth(1).as_deref() == Some("keys") {
        let args = KeysArgs::parse_from(std::env::args().skip(1));
        return admin::keys_main(args);
    }
    if std::env::args().nth(1).as_deref() == Some("migrate-store") {
        return admin::migrate_store_main(MigrateStoreArgs::parse_from(std::env::args().skip(1)));
    }
    if std::env::args().nth(1).as_deref() == Some("rotate-secret-key") {
        let args =
            sbx_daemon::secret_keys::rotate::RotateArgs::parse_from(std::env::args().skip(1));
        let store = open_store(
            &args.data_dir.join("sbx.sqlite"),
            args.database_url.as_deref(),
        )?;
        let connect = open_connect_store(&args.data_dir, args.database_url.as_deref())?;
        return Ok(sbx_daemon::secret_keys::rotate::rotate_main(
            &args,
            &*store,
            connect.as_ref(),
        )?);
    }
    anyhow::bail!("unknown command {command:?}")
}

/// The first arguments that run an admin command instead of the daemon.
const ADMIN_COMMANDS: &[&str] = &[
    "keys",
    "migrate-store",
    "rotate-secret-key",
    "backup",
    "restore",
    "quotafs",
];
