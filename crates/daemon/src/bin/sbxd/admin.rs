//! The admin commands that are not the daemon: `keys`, `migrate-store`, `quotafs`'s flags.

use crate::stores::open_store;
use clap::Parser;
use std::path::PathBuf;

/// `sbxd keys ...`: manages the signing keys in the data dir's store (sbxd may be running).
#[derive(Parser, Debug)]
#[command(name = "sbxd keys")]
pub(crate) struct KeysArgs {
    /// Data directory (holds the database).
    #[arg(
        long,
        env = "SBX_DATA_DIR",
        default_value = "/var/lib/sbx",
        global = true
    )]
    pub(crate) data_dir: PathBuf,
    /// PostgreSQL holding the keys, as given to sbxd (then the data dir's SQLite is not used).
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true, global = true)]
    pub(crate) database_url: Option<String>,
    #[command(subcommand)]
    pub(crate) command: KeysCommand,
}

#[derive(clap::Subcommand, Debug)]
pub(crate) enum KeysCommand {
    /// Creates a key and prints it once; only its hash is stored.
    Create {
        /// Workspace the key belongs to (a-z, 0-9, '_', '-').
        #[arg(long)]
        workspace: String,
        /// Environment the key is bound to; without it, x-inngest-env selects one (default production).
        #[arg(long)]
        env: Option<String>,
        /// A label shown by `keys list`.
        #[arg(long)]
        name: Option<String>,
    },
    /// Lists keys (ids, tenants, labels; never secrets).
    List,
    /// Revokes a key by id; requests with it get 401 at once.
    Revoke {
        /// Key id, from `keys list`.
        id: uuid::Uuid,
    },
}

/// `sbxd migrate-store`: copies a stopped single node's SQLite store into PostgreSQL.
#[derive(Parser, Debug)]
#[command(name = "sbxd migrate-store")]
pub(crate) struct MigrateStoreArgs {
    /// Data directory of the node (holds sbx.sqlite); sbxd must not be running on it.
    #[arg(long)]
    pub(crate) from: PathBuf,
    /// PostgreSQL to copy into (as later given to sbxd with --database-url).
    #[arg(long, env = "SBX_DATABASE_URL", hide_env_values = true)]
    pub(crate) to: String,
}

pub(crate) fn migrate_store_main(args: MigrateStoreArgs) -> anyhow::Result<()> {
    let report = sbx_daemon::migrate_store::migrate(&args.from, &args.to)?;
    let s = report.store;
    println!("signing keys: {}", s.api_keys);
    println!("sandboxes: {}", s.sandboxes);
    println!("snapshots: {}", s.snapshots);
    println!("secrets: {}", s.secrets);
    println!("E2B records: {}", s.e2b_records);
    println!("preview access rows: {}", s.previews);
    println!("volumes: {}", s.volumes);
    println!("volume mounts: {}", s.volume_mounts);
    println!("image names: {}", s.images);
    println!("{}", report.connect);
    eprintln!(
        "done: start sbxd with --data-dir {} --database-url {}",
        args.from.display(),
        sbx_store::redact_url(&args.to)
    );
    Ok(())
}

pub(crate) fn keys_main(args: KeysArgs) -> anyhow::Result<()> {
    let store = open_store(
        &args.data_dir.join("sbx.sqlite"),
        args.database_url.as_deref(),
    )?;
    let store = &*store;
    match args.command {
        KeysCommand::Create {
            workspace,
            env,
            name,
        } => {
            let (record, key) = sbx_daemon::tenants::create_key(
                store,
                &workspace,
                env.as_deref(),
                name.as_deref(),
            )?;
            eprintln!(
                "key {} for workspace {} ({}); it is shown only now:",
                record.id,
                record.workspace,
                record
                    .env
                    .as_deref()
                    .map_or("any environment".to_string(), |e| format!(
                        "environment {e}"
                    ))
            );
            println!("{key}");
        }
        KeysCommand::List => {
            println!("ID\tWORKSPACE\tENV\tNAME\tCREATED\tREVOKED");
            for k in store.list_api_keys()? {
                println!(
                    "{}\t{}\t{}\t{}\t{}\t{}",
                    k.id,
                    k.workspace,
                    k.env.as_deref().unwrap_or("*"),
                    k.name.as_deref().unwrap_or("-"),
                    sbx_api_types::format_time(k.created_at),
                    k.revoked_at
                        .map_or("-".to_string(), sbx_api_types::format_time),
                );
            }
        }
        KeysCommand::Revoke { id } => {
            sbx_daemon::tenants::revoke_key(store, id)?;
            eprintln!("key {id} revoked");
        }
    }
    Ok(())
}

/// `sbxd quotafs`: the size limit of one mounted S3 volume, a FUSE
/// passthrough of rclone's mount (started by sbxd itself, see docs/volumes.md).
#[derive(Parser, Debug)]
#[command(name = "sbxd quotafs")]
pub(crate) struct QuotafsArgs {
    /// The directory passed through (rclone's mount of the volume).
    #[arg(long)]
    pub(crate) source: PathBuf,
    /// Where the passthrough is mounted (what sandboxes bind).
    #[arg(long)]
    pub(crate) mount: PathBuf,
    /// The most bytes the volume's regular files may take.
    #[arg(long)]
    pub(crate) limit_bytes: u64,
}
