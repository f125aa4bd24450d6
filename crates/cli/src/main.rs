//! `sbx`: the command-line client of sbxd.

mod commands;
mod connect;
mod follow;
mod network;
mod resolve;
mod tarball;
mod util;

use clap::{Args, Parser, Subcommand};
use sbx_client::ClientError;
use std::process::ExitCode;
use std::time::Duration;
use util::{
    parse_duration, parse_env_pair, parse_mode, parse_shape, parse_signal, parse_volume_mount,
};

/// Command-line client of sbxd. Sandboxes may be named by id or by name.
#[derive(Debug, Parser)]
#[command(name = "sbx", version, propagate_version = true)]
pub struct Cli {
    /// sbxd base URL.
    #[arg(
        long,
        env = "SBX_URL",
        default_value = "http://127.0.0.1:8731",
        global = true
    )]
    pub url: String,
    /// Signing key (sent hashed, as the inngest SDK does).
    #[arg(long, env = "SBX_SIGNING_KEY", hide_env_values = true, global = true)]
    pub key: Option<String>,
    /// Environment of the key's workspace to work in (sent as x-inngest-env).
    #[arg(long = "workspace-env", env = "SBX_ENV", global = true)]
    pub workspace_env: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// Every subcommand.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Create a sandbox (waits until RUNNING) and print its id.
    #[command(after_help = network::HELP)]
    Create(CreateArgs),
    /// List sandboxes.
    List,
    /// List the shapes (vCPUs and memory) the server offers for new sandboxes.
    Shapes,
    /// Show running and paused sandboxes by CPU and memory (refreshed every
    /// 2 s on a terminal; one table otherwise).
    Top {
        /// Print one table and exit.
        #[arg(long)]
        once: bool,
    },
    /// Show a sandbox as JSON (the /v1 detail: environment, network policy and counters).
    Get {
        /// Sandbox id or name.
        sandbox: String,
    },
    /// Change a running sandbox's egress policy (for its new connections); prints the new network status.
    #[command(after_help = network::HELP)]
    Network {
        /// Sandbox id or name.
        sandbox: String,
        /// Network egress: none, public, https-only or allowlist.
        #[arg(long, value_name = "MODE", value_parser = network::parse_mode)]
        network: Option<sbx_client::api::NetworkMode>,
        /// Allowlist entry host=NAME[:PORT,...] or cidr=ADDR/LEN[:PORT,...] (repeatable).
        #[arg(long = "allow", value_name = "RULE", value_parser = network::parse_allow)]
        allow: Vec<sbx_client::api::AllowRule>,
    },
    /// Turn a sandbox's preview URLs on (--public, or --token: requests need
    /// its token) or off (--off); without a flag, show them. Prints JSON.
    Preview {
        /// Sandbox id or name.
        sandbox: String,
        /// Anyone who knows the URL may call.
        #[arg(long, conflicts_with_all = ["token", "off"])]
        public: bool,
        /// Requests need the sandbox's preview token.
        #[arg(long, conflicts_with = "off")]
        token: bool,
        /// No preview URLs.
        #[arg(long)]
        off: bool,
    },
    /// Print the preview URL of a port of a sandbox (and, on stderr, the
    /// header with its token when it needs one).
    Port {
        /// Sandbox id or name.
        sandbox: String,
        /// The port a server listens on inside the sandbox.
        port: u16,
    },
    /// Destroy a sandbox.
    Destroy {
        /// Sandbox id or name.
        sandbox: String,
    },
    /// Run a command to completion; exits with the command's exit code.
    Exec(ExecArgs),
    /// List the managed processes of a sandbox.
    Ps {
        /// Sandbox id or name.
        sandbox: String,
    },
    /// Start a background process and print its id.
    Start(StartArgs),
    /// Wait for a process to end and print its final state as JSON.
    Wait {
        /// Sandbox id or name.
        sandbox: String,
        /// Process id (or guest pid).
        process: String,
        /// Give up after this long (default: wait forever).
        #[arg(long, value_parser = parse_duration)]
        timeout: Option<Duration>,
    },
    /// Send a signal to a process (and, by default, its children).
    Kill {
        /// Sandbox id or name.
        sandbox: String,
        /// Process id (or guest pid).
        process: String,
        /// Signal number or name (TERM, KILL, INT, ...).
        #[arg(short, long, default_value = "15", value_parser = parse_signal)]
        signal: i64,
        /// Signal only the process itself, not its process group.
        #[arg(long)]
        no_children: bool,
    },
    /// Print a process's retained output (stdout and stderr to their streams).
    Output {
        /// Sandbox id or name.
        sandbox: String,
        /// Process id (or guest pid).
        process: String,
        /// Only about the last N bytes (0: everything retained).
        #[arg(long, default_value_t = 0)]
        tail: u64,
    },
    /// Print the sandbox console log, or a process's output with --process.
    Logs {
        /// Sandbox id or name.
        sandbox: String,
        /// Keep streaming new output (reconnects without loss for --process).
        #[arg(short, long)]
        follow: bool,
        /// Show this process's output instead of the console log.
        #[arg(short, long, value_name = "PROCESS")]
        process: Option<String>,
        /// With --process: start about N bytes from the end (0: everything retained).
        #[arg(long, default_value_t = 0, requires = "process")]
        tail: u64,
    },
    /// Copy a file: `sbx cp LOCAL SANDBOX:/path` or `sbx cp SANDBOX:/path LOCAL` (`-` is stdin/stdout).
    Cp {
        /// Source.
        src: String,
        /// Destination.
        dst: String,
        /// Mode of an uploaded file, in octal (default: the local file's permissions).
        #[arg(long, value_parser = parse_mode)]
        mode: Option<u32>,
    },
    /// List a directory: `sbx ls SANDBOX:/path`.
    Ls {
        /// `SANDBOX:/path` (a bare `SANDBOX` lists `/`).
        target: String,
    },
    /// Remove a file or directory: `sbx rm [-r] SANDBOX:/path`.
    Rm {
        /// Remove directories and their contents.
        #[arg(short, long)]
        recursive: bool,
        /// `SANDBOX:/path`.
        target: String,
    },
    /// Rename inside a sandbox: `sbx mv SANDBOX:/from /to`.
    Mv {
        /// `SANDBOX:/from`.
        from: String,
        /// `/to` (or `SANDBOX:/to`, same sandbox).
        to: String,
    },
    /// Create a directory and its parents: `sbx mkdir SANDBOX:/path`.
    Mkdir {
        /// `SANDBOX:/path`.
        target: String,
    },
    /// Pause a sandbox (waits until PAUSED).
    Pause(LifecycleArgs),
    /// Resume a paused sandbox (waits until RUNNING).
    Resume(LifecycleArgs),
    /// Snapshot a sandbox (waits until READY) and print the snapshot id.
    Snapshot {
        /// Sandbox id or name.
        sandbox: String,
        /// Snapshot name.
        #[arg(long)]
        name: Option<String>,
        /// Return as soon as the snapshot is accepted.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for READY.
        #[arg(long, default_value = "5m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// List snapshots.
    Snapshots {
        /// Only snapshots with this exact name.
        #[arg(long)]
        name: Option<String>,
    },
    /// Create a sandbox from a snapshot (waits until RUNNING) and print its id.
    Clone {
        /// Snapshot id or name.
        snapshot: String,
        /// Name of the new sandbox.
        #[arg(long)]
        name: String,
        /// Return without waiting for RUNNING.
        #[arg(long)]
        no_wait: bool,
        /// How long to wait for RUNNING.
        #[arg(long, default_value = "2m", value_parser = parse_duration)]
        timeout: Duration,
    },
    /// Delete a snapshot.
    #[command(name = "snapshot-rm")]
    SnapshotRm {
        /// Snapshot id or name.
        snapshot: String,
    },
    /// Manage workspace secrets.
    #[command(subcommand)]
    Secret(SecretCommand),
    /// Persistent volumes: create, list, show, remove.
    #[command(subcommand)]
    Volume(VolumeCommand),
    /// Custom images: import, make from a sandbox, list, show, remove.
    #[command(subcommand)]
    Image(ImageCommand),
    /// Templates: an image booted, started and snapshotted; `sbx create --template` clones it.
    #[command(subcommand)]
    Template(TemplateCommand),
    /// List the nodes sharing the server's database, or drain/undrain one (operator only).
    Nodes {
        /// drain or undrain; without one, the list.
        #[command(subcommand)]
        command: Option<NodesCommand>,
    },
    /// Connect: connector packages, builds, connections, sync runs, logs and records.
    #[command(subcommand)]
    Connect(connect::ConnectCommand),
}

/// `sbx create`.
#[derive(Debug, Args)]
pub struct CreateArgs {
    /// Sandbox name (creating again with the same configuration returns the same sandbox).
    #[arg(long)]
    pub name: String,
    /// Virtual CPUs: 1, 2 or 4.
    #[arg(long, default_value_t = 1, conflicts_with = "shape")]
    pub vcpu: u64,
    /// Memory in MiB: 1, 2 or 4 GiB per vCPU (e.g. 2048 with --vcpu 2, up to 16384 with --vcpu 4).
    #[arg(long, default_value_t = 1024, conflicts_with = "shape")]
    pub memory: u64,
    /// vCPUs and memory as VCPUxMIB, e.g. 2x4096 (`sbx shapes` lists what the server offers).
    #[arg(long, value_name = "VCPUxMIB", value_parser = parse_shape)]
    pub shape: Option<(u32, u32)>,
    /// Environment variable K=V (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V", value_parser = parse_env_pair)]
    pub env: Vec<(String, String)>,
    /// Workspace secret to inject as an environment variable (repeatable).
    #[arg(long = "secret", value_name = "NAME")]
    pub secrets: Vec<String>,
    /// Network egress: none, public, https-only or allowlist (see below).
    #[arg(long, value_name = "MODE", value_parser = network::parse_mode)]
    pub network: Option<sbx_client::api::NetworkMode>,
    /// Allowlist entry host=NAME[:PORT,...] or cidr=ADDR/LEN[:PORT,...] (repeatable).
    #[arg(long = "allow", value_name = "RULE", value_parser = network::parse_allow)]
    pub allow: Vec<sbx_client::api::AllowRule>,
    /// Preview URLs on from the start: public, or token (requests need the
    /// sandbox's preview token; see `sbx preview`).
    #[arg(long, value_name = "ACCESS", value_parser = ["public", "token"])]
    pub preview: Option<String>,
    /// Mount a volume: NAME:/guest/path, or NAME:/guest/path:ro read-only (repeatable).
    #[arg(long = "volume", value_name = "NAME:PATH[:ro]", value_parser = parse_volume_mount)]
    pub volumes: Vec<sbx_client::api::VolumeMount>,
    /// Image to boot: NAME:TAG, NAME or a sha256: digest (`sbx image ls`); default: the default image.
    #[arg(long, value_name = "NAME:TAG", conflicts_with = "template")]
    pub image: Option<String>,
    /// Template to clone (`sbx template ls`): its shape, image, environment and
    /// network are the template's.
    #[arg(long, value_name = "NAME", conflicts_with_all = ["shape", "env", "secrets", "network", "allow", "volumes"])]
    pub template: Option<String>,
    /// Return without waiting for RUNNING.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for RUNNING.
    #[arg(long, default_value = "2m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `sbx exec`.
#[derive(Debug, Args)]
pub struct ExecArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// Working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variable K=V (repeatable), merged over the sandbox's.
    #[arg(short = 'e', long = "env", value_name = "K=V", value_parser = parse_env_pair)]
    pub env: Vec<(String, String)>,
    /// Server-side timeout (e.g. 30s, 500ms, 5m; at most 5m).
    #[arg(long, default_value = "30s", value_parser = parse_duration)]
    pub timeout: Duration,
    /// Run this string with /bin/sh -c instead of an argv.
    #[arg(long, conflicts_with = "command")]
    pub shell: Option<String>,
    /// The argv after `--`, run as-is (no shell).
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "shell",
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// `sbx start`.
#[derive(Debug, Args)]
pub struct StartArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// Working directory.
    #[arg(long)]
    pub cwd: Option<String>,
    /// Environment variable K=V (repeatable).
    #[arg(short = 'e', long = "env", value_name = "K=V", value_parser = parse_env_pair)]
    pub env: Vec<(String, String)>,
    /// Run this string with /bin/sh -c instead of an argv.
    #[arg(long, conflicts_with = "command")]
    pub shell: Option<String>,
    /// The argv after `--`.
    #[arg(
        trailing_var_arg = true,
        allow_hyphen_values = true,
        required_unless_present = "shell",
        value_name = "CMD"
    )]
    pub command: Vec<String>,
}

/// `sbx pause` / `sbx resume`.
#[derive(Debug, Args)]
pub struct LifecycleArgs {
    /// Sandbox id or name.
    pub sandbox: String,
    /// Return as soon as the request is accepted.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait.
    #[arg(long, default_value = "5m", value_parser = parse_duration)]
    pub timeout: Duration,
}

/// `sbx secret ...`.
#[derive(Debug, Subcommand)]
pub enum SecretCommand {
    /// Create or replace a secret (value from --value or stdin).
    Set {
        /// Secret name (also the environment variable it becomes).
        name: String,
        /// The value (default: read stdin, without one trailing newline).
        #[arg(long)]
        value: Option<String>,
    },
    /// List secret names.
    List,
    /// Delete a secret.
    Rm {
        /// Secret name.
        name: String,
    },
}

/// `sbx volume ...`.
#[derive(Debug, Subcommand)]
pub enum VolumeCommand {
    /// Create a volume and print it as JSON.
    Create {
        /// Volume name (unique in the workspace).
        name: String,
        /// Size limit in MiB (writes past it fail with ENOSPC inside the sandbox).
        #[arg(long = "size", value_name = "MIB")]
        size_mb: u64,
        /// Where its data lives: local (a filesystem on one node) or s3.
        #[arg(long, default_value = "local", value_parser = ["local", "s3"])]
        kind: String,
    },
    /// List volumes.
    Ls,
    /// Show one volume (with the bytes it uses) as JSON.
    Get {
        /// Volume name.
        name: String,
    },
    /// Delete a volume and its data (refused while a sandbox mounts it, unless --force).
    Rm {
        /// Volume name.
        name: String,
        /// Delete even while mounted (the mounting sandboxes lose it).
        #[arg(long)]
        force: bool,
    },
}

/// `sbx image ...`.
#[derive(Debug, Subcommand)]
pub enum ImageCommand {
    /// Build an image from a Dockerfile: packs CONTEXT (a directory) and
    /// prints the build log live; exits non-zero when the build fails.
    Build {
        /// The build context directory.
        context: std::path::PathBuf,
        /// The Dockerfile (default: CONTEXT/Dockerfile).
        #[arg(short = 'f', long = "file")]
        file: Option<std::path::PathBuf>,
        /// Name and tag of the image (tag `latest` when left out).
        #[arg(short = 't', long = "tag", value_name = "NAME:TAG")]
        tag: String,
        /// An ARG value, KEY=VALUE (repeatable).
        #[arg(long = "build-arg", value_name = "KEY=VALUE")]
        build_arg: Vec<String>,
        /// The build sandbox's egress: public (default), https-only or none.
        #[arg(long)]
        network: Option<String>,
    },
    /// Import an OCI image layout or `docker save` tarball and print the image as JSON.
    Import {
        /// The tarball.
        file: std::path::PathBuf,
        /// Name and tag of the image (tag `latest` when left out).
        #[arg(short = 't', long = "tag", value_name = "NAME:TAG")]
        tag: String,
    },
    /// Make an image of a running sandbox's files and print it as JSON.
    From {
        /// Sandbox id or name.
        sandbox: String,
        /// Name and tag of the image (tag `latest` when left out).
        #[arg(short = 't', long = "tag", value_name = "NAME:TAG")]
        tag: String,
    },
    /// Give an image another NAME:TAG (`default` makes it the workspace's
    /// default image, booted by every create that names none).
    Tag {
        /// The image: NAME:TAG, NAME or a sha256: digest.
        image: String,
        /// The new name and tag (tag `latest` when left out).
        target: String,
    },
    /// List images.
    Ls,
    /// Show one image as JSON.
    Get {
        /// NAME:TAG, NAME or a sha256: digest.
        image: String,
    },
    /// Delete an image (refused while a sandbox or snapshot uses it).
    Rm {
        /// NAME:TAG, NAME or a sha256: digest.
        image: String,
    },
}

/// `sbx template ...`.
#[derive(Debug, Subcommand)]
pub enum TemplateCommand {
    /// Create a template and build it (boot, start command, ready check, snapshot); prints it as JSON.
    Create {
        /// Template name.
        name: String,
        /// Image: NAME:TAG, NAME, a sha256: digest or default.
        #[arg(long, value_name = "NAME:TAG")]
        image: Option<String>,
        /// Shell command started in the background (e.g. a server).
        #[arg(long, value_name = "CMD")]
        start_cmd: Option<String>,
        /// Ready once a TCP connect to this port inside the sandbox succeeds.
        #[arg(long, value_name = "PORT")]
        ready_port: Option<u16>,
        /// Ready once this shell command exits 0.
        #[arg(long, value_name = "CMD")]
        ready_cmd: Option<String>,
        /// Seconds the ready check may take (default 60).
        #[arg(long, value_name = "SECS")]
        ready_timeout: Option<u64>,
        /// Wait for the build to end (exit status 1 if it FAILED).
        #[arg(long)]
        wait: bool,
    },
    /// List templates.
    Ls,
    /// Show one template as JSON.
    Get {
        /// Template name.
        name: String,
    },
    /// Build a template again (its current snapshot serves until the new one is READY).
    Rebuild {
        /// Template name.
        name: String,
        /// Wait for the build to end.
        #[arg(long)]
        wait: bool,
    },
    /// Delete a template and its snapshot.
    Rm {
        /// Template name.
        name: String,
    },
}

/// `sbx nodes` subcommands.
#[derive(Debug, Subcommand)]
pub enum NodesCommand {
    /// Stop new placements on a node; its sandboxes keep running.
    Drain {
        /// Node id.
        id: String,
    },
    /// Let a drained node take new placements again.
    Undrain {
        /// Node id.
        id: String,
    },
}

/// The message for a failed command, in the documented format.
pub fn error_message(err: &anyhow::Error) -> String {
    match err.downcast_ref::<ClientError>() {
        Some(ClientError::Api {
            code,
            message,
            request_id: Some(id),
            ..
        }) => format!("error: {code}: {message} (request {id})"),
        Some(ClientError::Api { code, message, .. }) => format!("error: {code}: {message}"),
        _ => format!("error: {err:#}"),
    }
}

fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain().any(|e| {
        e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
    })
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(commands::run(cli)) {
        Ok(code) => ExitCode::from(code),
        Err(e) if is_broken_pipe(&e) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{}", error_message(&e));
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn the_cli_definition_is_valid() {
        Cli::command().debug_assert();
    }

    #[test]
    fn exec_takes_the_argv_after_the_double_dash() {
        let cli = Cli::parse_from([
            "sbx",
            "exec",
            "web",
            "--cwd",
            "/tmp",
            "-e",
            "A=1",
            "--",
            "echo hello world",
            "-n",
        ]);
        let Command::Exec(args) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(args.sandbox, "web");
        assert_eq!(args.cwd.as_deref(), Some("/tmp"));
        assert_eq!(args.env, vec![("A".to_string(), "1".to_string())]);
        assert_eq!(args.command, vec!["echo hello world", "-n"]);
        assert_eq!(args.timeout, Duration::from_secs(30));

        let cli = Cli::parse_from(["sbx", "exec", "web", "ls", "-la", "--cwd", "/x"]);
        let Command::Exec(args) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(args.command, vec!["ls", "-la", "--cwd", "/x"]);

        let cli = Cli::parse_from(["sbx", "exec", "web", "--shell", "echo $HOME | wc -c"]);
        let Command::Exec(args) = cli.command else {
            panic!("not exec")
        };
        assert_eq!(args.shell.as_deref(), Some("echo $HOME | wc -c"));
        assert!(args.command.is_empty());

        assert!(Cli::try_parse_from(["sbx", "exec", "web"]).is_err());
        assert!(Cli::try_parse_from(["sbx", "exec", "web", "--shell", "x", "--", "ls"]).is_err());
    }

    #[test]
    fn create_takes_network_flags() {
        use sbx_client::api::NetworkMode;
        let cli = Cli::parse_from(["sbx", "create", "--name", "a", "--network", "https-only"]);
        let Command::Create(args) = cli.command else {
            panic!("not create")
        };
        assert_eq!(args.network, Some(NetworkMode::HttpsOnly));
        assert!(args.allow.is_empty());
        let cli = Cli::parse_from([
            "sbx",
            "create",
            "--name",
            "a",
            "--allow",
            "host=example.com:443",
            "--allow",
            "cidr=1.2.3.0/24:80,443",
        ]);
        let Command::Create(args) = cli.command else {
            panic!("not create")
        };
        assert_eq!(args.network, None);
        assert_eq!(args.allow.len(), 2);
        assert_eq!(args.allow[1].ports, Some(vec![80, 443]));
        let p = network::policy(args.network, args.allow).unwrap().unwrap();
        assert_eq!(p.mode, NetworkMode::Allowlist);
        assert!(
            Cli::try_parse_from(["sbx", "create", "--name", "a", "--network", "open"]).is_err()
        );
        assert!(Cli::try_parse_from(["sbx", "create", "--name", "a", "--allow", "x"]).is_err());
    }

    #[test]
    fn create_takes_volume_mounts() {
        let cli = Cli::parse_from([
            "sbx",
            "create",
            "--name",
            "a",
            "--volume",
            "data:/data",
            "--volume",
            "ref:/ref:ro",
        ]);
        let Command::Create(args) = cli.command else {
            panic!("not create")
        };
        assert_eq!(args.volumes.len(), 2);
        assert_eq!(args.volumes[0].name, "data");
        assert_eq!(args.volumes[0].path, "/data");
        assert!(!args.volumes[0].read_only);
        assert!(args.volumes[1].read_only);
        for bad in [
            "data",
            "data:",
            ":/x",
            "data:rel",
            "data:/x:rw",
            "data:/x:ro:ro",
        ] {
            assert!(
                Cli::try_parse_from(["sbx", "create", "--name", "a", "--volume", bad]).is_err(),
                "{bad} was accepted"
            );
        }
    }

    #[test]
    fn global_flags_work_after_the_subcommand() {
        let cli = Cli::parse_from(["sbx", "list", "--url", "http://h:1", "--key", "k"]);
        assert_eq!(cli.url, "http://h:1");
        assert_eq!(cli.key.as_deref(), Some("k"));
    }

    #[test]
    fn api_errors_print_code_message_and_request_id() {
        let err = anyhow::Error::new(ClientError::Api {
            status: 404,
            code: "sandbox_not_found".into(),
            message: "no such sandbox".into(),
            request_id: Some("r-1".into()),
        });
        assert_eq!(
            error_message(&err),
            "error: sandbox_not_found: no such sandbox (request r-1)"
        );
        let err = anyhow::anyhow!("plain");
        assert_eq!(error_message(&err), "error: plain");
    }
}
