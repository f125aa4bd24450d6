//! Dockerfile builds (`POST /v1/images/build`): the context and Dockerfile
//! are checked before any work ([`Service::build_image`] answers a normal
//! error then), then a task runs the steps in a build sandbox of the tenant
//! (created through the normal create path: limits, network policy and
//! accounting apply) and reports NDJSON events on a channel. The sandbox is
//! always destroyed: on success, failure, and when the client goes away.
//!
//! Layer cache: step N's key is sha256(key N-1, the instruction after
//! substitution, the env a RUN sees, the digest of the files a COPY takes).
//! The key of the last step maps to the image content it made
//! (`image_builds`), so an unchanged Dockerfile and context name the image
//! without booting anything; the changes of every filesystem step are kept
//! as layers (`layers.rs`), so a build sharing a prefix replays it.

pub mod context;
pub mod dockerfile;
mod layers;

use super::envd::process::{pump, Output, ProcessEvent};
use super::{Result, Service, ServiceError};
use context::{Context, Selection};
use dockerfile::{Action, Plan};
use futures::{Stream, StreamExt};
use sbx_agent_proto::{CommandSpec, ProcessOptions, ProcessState, Reply, Request};
use sbx_api_types::{BuildEvent, CreateSandboxRequest, Image, NetworkPolicy, SandboxStatus};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::sync::mpsc;
use uuid::Uuid;

/// The build sandbox's vCPUs unless the request names them.
pub const DEFAULT_BUILD_VCPU: u64 = 1;
/// The build sandbox's memory unless the request names it.
pub const DEFAULT_BUILD_MEMORY_MB: u64 = 1024;
/// Default budget of one RUN (seconds).
pub const DEFAULT_RUN_TIMEOUT_SECS: u64 = 600;
/// Largest budget of one RUN (seconds).
pub const MAX_RUN_TIMEOUT_SECS: u64 = 3600;
/// Bytes of a failing step's output kept for the error event.
const OUTPUT_TAIL_BYTES: usize = 2048;

/// A build as the API parsed it.
#[derive(Debug, Default)]
pub struct BuildRequest {
    /// Image name.
    pub name: Option<String>,
    /// Image tag (default `latest`).
    pub tag: Option<String>,
    /// Dockerfile path in the context (default `Dockerfile`).
    pub dockerfile: Option<String>,
    /// `ARG` values.
    pub build_args: BTreeMap<String, String>,
    /// The build sandbox's egress policy (default `public`).
    pub network: Option<NetworkPolicy>,
    /// The build sandbox's vCPUs.
    pub vcpu: Option<u64>,
    /// The build sandbox's memory.
    pub memory_mb: Option<u64>,
    /// Budget of each RUN, seconds.
    pub timeout_secs: Option<u64>,
}

/// How a build failed, for its error event.
#[derive(Debug)]
pub struct BuildFailure {
    /// What went wrong (the API gives it a code).
    pub error: ServiceError,
    /// The failing step's line.
    pub line: Option<usize>,
    /// A failing RUN's exit code (the code is then `build_failed`).
    pub exit_code: Option<i32>,
    /// The failing step's last output.
    pub output_tail: Option<String>,
}

impl BuildFailure {
    fn plain(error: ServiceError) -> Self {
        BuildFailure {
            error,
            line: None,
            exit_code: None,
            output_tail: None,
        }
    }
}

/// One item of a running build: an event, or its failure (last).
pub type BuildItem = std::result::Result<BuildEvent, BuildFailure>;

/// A checked build, ready to run.
struct Prepared {
    workspace: String,
    name: String,
    tag: String,
    plan: Plan,
    from_ref: String,
    /// Per step: its cache key (hex).
    keys: Vec<String>,
    /// Per COPY/ADD step: what it copies.
    copies: BTreeMap<usize, Selection>,
    network: Option<NetworkPolicy>,
    vcpu: Option<u64>,
    memory_mb: Option<u64>,
    run_timeout: Duration,
}

impl Service {
    /// `POST /v1/images/build`: reads the context, parses and checks the
    /// Dockerfile (errors here are ordinary 4xx answers), then runs the
    /// build in the background; the receiver yields its events.
    pub async fn build_image<S, E>(
        self: &Arc<Self>,
        workspace: &str,
        req: BuildRequest,
        mut body: S,
    ) -> Result<mpsc::Receiver<BuildItem>>
    where
        S: Stream<Item = std::result::Result<bytes::Bytes, E>> + Unpin,
        E: std::fmt::Display,
    {
        let (name, tag) = super::images::new_name(req.name, req.tag)?;
        let timeout = req.timeout_secs.unwrap_or(DEFAULT_RUN_TIMEOUT_SECS);
        if timeout == 0 || timeout > MAX_RUN_TIMEOUT_SECS {
            return Err(ServiceError::BadRequest(format!(
                "timeoutSecs must be 1..={MAX_RUN_TIMEOUT_SECS}"
            )));
        }
        let mut bytes = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk =
                chunk.map_err(|e| ServiceError::BadRequest(format!("reading the upload: {e}")))?;
            bytes.extend_from_slice(&chunk);
            // The tar of the files is a little larger than the files.
            if bytes.len() as u64 > context::MAX_CONTEXT_BYTES + (64 << 20) {
                return Err(ServiceError::ImageTooLarge(context::MAX_CONTEXT_BYTES));
            }
        }
        if bytes.is_empty() {
            return Err(ServiceError::BadRequest(
                "the request has no body; send the build context as a tar".into(),
            ));
        }
        let ctx = tokio::task::spawn_blocking(move || Context::read(&bytes))
            .await
            .map_err(|e| ServiceError::Internal(e.to_string()))?
            .map_err(context_error)?;
        let path = req.dockerfile.as_deref().unwrap_or("Dockerfile");
        let text = ctx.dockerfile(path).map_err(context_error)?;
        let plan = dockerfile::plan(&text, &req.build_args)
            .map_err(|e| ServiceError::BadRequest(e.to_string()))?;
        let from = self.resolve_image(workspace, &plan.from).await?;
        let base = super::images::digest_of(&from.image_ref)
            .map(str::to_string)
            .unwrap_or_else(|| format!("default:{}", self.image_id));
        let mut plan = plan;
        plan.config = merged_config(&from.config, &plan);
        let mut copies = BTreeMap::new();
        let mut keys = Vec::with_capacity(plan.steps.len());
        let mut key = hex::encode(Sha256::digest(format!("from\0{base}")));
        for (i, step) in plan.steps.iter().enumerate() {
            let mut h = Sha256::new();
            h.update(key.as_bytes());
            h.update(b"\0");
            h.update(step.instruction.as_bytes());
            match &step.action {
                Action::Run {
                    argv,
                    env,
                    cwd,
                    user,
                } => {
                    h.update(serde_json::to_vec(&(argv, env, cwd, user)).unwrap_or_default());
                }
                Action::Copy(spec) => {
                    let selection = ctx.select(step.line, spec).map_err(context_error)?;
                    h.update(selection.digest.as_bytes());
                    copies.insert(i, selection);
                }
                Action::Meta | Action::Mkdir(_) => {}
            }
            if i + 1 == plan.steps.len() {
                // The image's config is part of what the build makes.
                h.update(serde_json::to_vec(&plan.config).unwrap_or_default());
            }
            key = hex::encode(h.finalize());
            keys.push(key.clone());
        }
        let prepared = Prepared {
            workspace: workspace.to_string(),
            name,
            tag,
            from_ref: plan.from.clone(),
            plan,
            keys,
            copies,
            network: req.network,
            vcpu: req.vcpu,
            memory_mb: req.memory_mb,
            run_timeout: Duration::from_secs(timeout),
        };
        let (tx, rx) = mpsc::channel(64);
        let this = self.clone();
        tokio::spawn(async move { this.run_build(prepared, tx).await });
        Ok(rx)
    }

    /// Serves the build from the cache, or runs it; the build sandbox goes
    /// in every case.
    async fn run_build(self: Arc<Self>, p: Prepared, tx: mpsc::Sender<BuildItem>) {
        let of = p.plan.steps.len();
        let last_key = p.keys.last().cloned().unwrap_or_default();
        match self.cached_build(&p, &last_key).await {
            Ok(Some(image)) => {
                for (i, step) in p.plan.steps.iter().enumerate() {
                    let event = step_event(i, of, step, true);
                    if tx.send(Ok(event)).await.is_err() {
                        return;
                    }
                }
                let _ = tx
                    .send(Ok(BuildEvent::Result {
                        image: Box::new(image),
                    }))
                    .await;
                return;
            }
            Ok(None) => {}
            Err(e) => {
                let _ = tx.send(Err(BuildFailure::plain(e))).await;
                return;
            }
        }
        let mut sandbox = None;
        let outcome = tokio::select! {
            r = self.build_in_sandbox(&p, &tx, &mut sandbox) => r,
            // The client went away: stop (the sandbox goes below).
            _ = tx.closed() => Err(BuildFailure::plain(ServiceError::BadRequest("the client disconnected".into()))),
        };
        if let Some(id) = sandbox {
            if let Err(e) = self.destroy(&p.workspace, id).await {
                tracing::warn!(sandbox = %id, error = %e, "destroying a build sandbox");
            }
        }
        let item = match outcome {
            Ok(image) => {
                let record = sbx_store::ImageBuildRecord {
                    workspace: p.workspace.clone(),
                    cache_key: last_key,
                    digest: image.digest.clone(),
                    size_bytes: image.size_bytes,
                    created_at: chrono::Utc::now(),
                };
                if let Err(e) = self.store.put_image_build(&record).await {
                    tracing::warn!(error = %e, "recording a build in the cache");
                }
                Ok(BuildEvent::Result {
                    image: Box::new(image),
                })
            }
            Err(f) => Err(f),
        };
        let _ = tx.send(item).await;
    }

    /// The image a build with `key` made before, named `name:tag` again
    /// (`None`: no entry, or its content is gone from this node).
    async fn cached_build(&self, p: &Prepared, key: &str) -> Result<Option<Image>> {
        let Some(hit) = self.store.get_image_build(&p.workspace, key).await? else {
            return Ok(None);
        };
        if self.images.rootfs(&hit.digest).is_none() {
            return Ok(None);
        }
        let imported = sbx_node::images::Imported {
            digest: hit.digest,
            size_bytes: hit.size_bytes,
            config: p.plan.config.clone(),
        };
        let named = {
            let _turn = self.image_turn.lock().await;
            self.name_image(
                &p.workspace,
                p.name.clone(),
                p.tag.clone(),
                imported,
                "build",
            )
            .await
        };
        self.after_naming(named).await.map(Some)
    }

    /// Boots the build sandbox (its id goes to `sandbox` at once, for the
    /// caller to destroy), runs every step and captures the result.
    async fn build_in_sandbox(
        self: &Arc<Self>,
        p: &Prepared,
        tx: &mpsc::Sender<BuildItem>,
        sandbox: &mut Option<Uuid>,
    ) -> std::result::Result<Image, BuildFailure> {
        let of = p.plan.steps.len();
        let name = format!("sbx-build-{}", &Uuid::new_v4().simple().to_string()[..12]);
        let req = CreateSandboxRequest {
            name: Some(name),
            vcpu: Some(p.vcpu.unwrap_or(DEFAULT_BUILD_VCPU)),
            memory_mb: Some(p.memory_mb.unwrap_or(DEFAULT_BUILD_MEMORY_MB)),
            ..CreateSandboxRequest::default()
        };
        let network = Some(
            p.network
                .clone()
                .unwrap_or_else(|| NetworkPolicy::mode(sbx_api_types::NetworkMode::Public)),
        );
        let created = self
            .create_v1(
                &p.workspace,
                req,
                network,
                None,
                Vec::new(),
                Some(p.from_ref.clone()),
                None,
            )
            .await
            .map_err(BuildFailure::plain)?;
        let record = match created {
            super::lifecycle::CreateOutcome::Created(r)
            | super::lifecycle::CreateOutcome::Existing(r) => r,
        };
        *sandbox = Some(record.id);
        self.wait_build_sandbox(&p.workspace, record.id)
            .await
            .map_err(BuildFailure::plain)?;
        let id = record.id;
        // The longest prefix of steps whose layers this tenant has: replayed, not run.
        let prefix = p
            .plan
            .steps
            .iter()
            .zip(&p.keys)
            .take_while(|(s, k)| s.action == Action::Meta || self.has_layer(&p.workspace, k))
            .count();
        // It ends at its last replayed step: metadata steps after it run
        // (cheaply), and a prefix of metadata only is no cache hit.
        let prefix = p.plan.steps[..prefix]
            .iter()
            .rposition(|s| s.action != Action::Meta)
            .map_or(0, |last| last + 1);
        for (i, step) in p.plan.steps.iter().enumerate().take(prefix) {
            if tx.send(Ok(step_event(i, of, step, true))).await.is_err() {
                return Err(BuildFailure::plain(ServiceError::BadRequest(
                    "the client disconnected".into(),
                )));
            }
            if step.action != Action::Meta {
                self.apply_layer(id, &p.workspace, &p.keys[i])
                    .await
                    .map_err(|e| BuildFailure {
                        line: Some(step.line),
                        ..BuildFailure::plain(e)
                    })?;
            }
        }
        let mut listing = if prefix < of {
            self.listing_and_stamp(id)
                .await
                .map_err(BuildFailure::plain)?
        } else {
            Default::default()
        };
        for (i, step) in p.plan.steps.iter().enumerate().skip(prefix) {
            if tx.send(Ok(step_event(i, of, step, false))).await.is_err() {
                return Err(BuildFailure::plain(ServiceError::BadRequest(
                    "the client disconnected".into(),
                )));
            }
            let failed = |error: ServiceError| BuildFailure {
                error,
                line: Some(step.line),
                exit_code: None,
                output_tail: None,
            };
            match &step.action {
                Action::Meta => {}
                Action::Mkdir(dir) => {
                    let argv = vec!["mkdir".into(), "-p".into(), "--".into(), dir.clone()];
                    self.root_exec(record.id, argv, Vec::new())
                        .await
                        .map_err(failed)?;
                }
                Action::Copy(spec) => {
                    let Some(sel) = p.copies.get(&i) else {
                        return Err(failed(ServiceError::Internal("no selection".into())));
                    };
                    self.copy_in(record.id, sel, spec.chown.as_deref())
                        .await
                        .map_err(failed)?;
                }
                Action::Run {
                    argv,
                    env,
                    cwd,
                    user,
                } => {
                    self.build_run(
                        p,
                        record.id,
                        i,
                        step.line,
                        argv,
                        env,
                        cwd,
                        user.as_deref(),
                        tx,
                    )
                    .await?;
                }
            }
            if step.action != Action::Meta {
                listing = self
                    .capture_layer(id, &p.workspace, &p.keys[i], &listing)
                    .await
                    .map_err(failed)?;
            }
        }
        self.drop_stamp(id).await.map_err(BuildFailure::plain)?;
        self.capture_sandbox(
            &p.workspace,
            record.id,
            p.name.clone(),
            p.tag.clone(),
            p.plan.config.clone(),
            "build",
        )
        .await
        .map_err(BuildFailure::plain)
    }

    /// Waits for a created sandbox's boot; anything but RUNNING then is an error.
    async fn wait_build_sandbox(&self, workspace: &str, id: Uuid) -> Result<()> {
        let boot = self
            .boots
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&id)
            .cloned();
        if let Some(rx) = boot {
            super::lifecycle::wait_done(rx).await;
        }
        let record = self.load(workspace, id).await?;
        if record.status != SandboxStatus::Running {
            return Err(ServiceError::StartFailed(format!(
                "the build sandbox did not start: {}",
                record.error.unwrap_or_default()
            )));
        }
        Ok(())
    }

    /// One RUN: started as the step's user, its output streamed as events;
    /// a non-zero exit fails the build with the output's tail.
    #[allow(clippy::too_many_arguments)]
    async fn build_run(
        self: &Arc<Self>,
        p: &Prepared,
        id: Uuid,
        index: usize,
        line: usize,
        argv: &[String],
        env: &BTreeMap<String, String>,
        cwd: &str,
        user: Option<&str>,
        tx: &mpsc::Sender<BuildItem>,
    ) -> std::result::Result<(), BuildFailure> {
        let fail =
            |error: ServiceError, exit_code: Option<i32>, tail: Option<String>| BuildFailure {
                error,
                line: Some(line),
                exit_code,
                output_tail: tail,
            };
        let conn = self
            .agent(&p.workspace, id)
            .await
            .map_err(|e| fail(e, None, None))?;
        let request = Request::ProcessStart {
            command: CommandSpec {
                argv: argv.to_vec(),
                env: env.clone(),
                cwd: Some(cwd.to_string()),
            },
            options: ProcessOptions {
                // A `user:group` USER runs as the user (its groups come with it).
                user: user.map(|u| u.split(':').next().unwrap_or(u).to_string()),
                kill_after_ms: Some(p.run_timeout.as_millis() as u64),
                backpressure: true,
                ..ProcessOptions::default()
            },
        };
        let info = match conn.call(request).await {
            Ok((Reply::Process { process }, _)) => process,
            Ok((other, _)) => {
                return Err(fail(
                    ServiceError::Internal(format!("unexpected agent reply {other:?}")),
                    None,
                    None,
                ))
            }
            Err(e) => return Err(fail(super::agent_error(e), None, None)),
        };
        if info.state == ProcessState::Failed {
            return Err(fail(
                ServiceError::BadRequest(format!(
                    "line {line}: RUN could not start: {}",
                    info.error.unwrap_or_default()
                )),
                None,
                None,
            ));
        }
        let deadline = tokio::time::Instant::now() + p.run_timeout;
        let mut events = pump(conn, info, 0, Some(deadline));
        let mut tail: Vec<u8> = Vec::new();
        let step = index + 1;
        while let Some(event) = events.recv().await {
            match event {
                Ok(ProcessEvent::Start { .. }) => {}
                Ok(ProcessEvent::Data(stream, data)) => {
                    tail.extend_from_slice(&data);
                    if tail.len() > OUTPUT_TAIL_BYTES {
                        tail.drain(..tail.len() - OUTPUT_TAIL_BYTES);
                    }
                    let stream = match stream {
                        Output::Stderr => "stderr",
                        _ => "stdout",
                    };
                    let event = BuildEvent::Output {
                        step,
                        stream: stream.into(),
                        data: String::from_utf8_lossy(&data).into_owned(),
                    };
                    if tx.send(Ok(event)).await.is_err() {
                        return Err(fail(
                            ServiceError::BadRequest("the client disconnected".into()),
                            None,
                            None,
                        ));
                    }
                }
                Ok(ProcessEvent::End(end)) => {
                    if end.exited && end.exit_code == 0 {
                        return Ok(());
                    }
                    let tail = String::from_utf8_lossy(&tail).into_owned();
                    let why = if end.exited {
                        format!("exited with code {}", end.exit_code)
                    } else if tokio::time::Instant::now() >= deadline {
                        format!("was killed after its {}s budget", p.run_timeout.as_secs())
                    } else {
                        end.status.clone()
                    };
                    return Err(fail(
                        ServiceError::BadRequest(format!("line {line}: RUN {why}")),
                        Some(end.exit_code),
                        Some(tail),
                    ));
                }
                Err(e) => {
                    return Err(fail(
                        ServiceError::Unavailable(format!("line {line}: RUN: {e}")),
                        None,
                        Some(String::from_utf8_lossy(&tail).into_owned()),
                    ))
                }
            }
        }
        Err(fail(
            ServiceError::Unavailable(format!("line {line}: RUN: the output stream ended early")),
            None,
            None,
        ))
    }

    /// Unpacks a COPY/ADD's files in the sandbox (as root; `--chown` after).
    async fn copy_in(&self, id: Uuid, sel: &Selection, chown: Option<&str>) -> Result<()> {
        if !sel.paths.is_empty() {
            let argv = [
                "tar",
                "-x",
                "-p",
                "--no-overwrite-dir",
                "-C",
                "/",
                "-f",
                "-",
            ]
            .map(String::from)
            .to_vec();
            self.root_exec(id, argv, sel.tar.clone()).await?;
        }
        for (dir, gz, data) in &sel.archives {
            let flags = if *gz { "-xzpf" } else { "-xpf" };
            let argv = vec![
                "sh".into(),
                "-c".into(),
                "mkdir -p -- \"$1\" && tar -C \"$1\" \"$2\" -".into(),
                "sh".into(),
                dir.clone(),
                flags.into(),
            ];
            self.root_exec(id, argv, data.clone()).await?;
        }
        if let (Some(owner), false) = (chown, sel.paths.is_empty()) {
            let mut list = Vec::new();
            for p in &sel.paths {
                list.extend_from_slice(p.as_bytes());
                list.push(0);
            }
            let argv = ["xargs", "-0", "chown", "-h", "--", owner]
                .map(String::from)
                .to_vec();
            self.root_exec(id, argv, list).await?;
        }
        Ok(())
    }

    /// Runs `argv` as root in the sandbox with `input` on its stdin; a
    /// non-zero exit is an error.
    async fn root_exec(&self, id: Uuid, argv: Vec<String>, input: Vec<u8>) -> Result<()> {
        let shown = argv.join(" ");
        let mut child = self
            .runtime
            .spawn_exec(id, argv)
            .map_err(|e| ServiceError::Unavailable(format!("{shown}: {e}")))?;
        let stdin = child.stdin.take();
        let feed = async move {
            if let Some(mut stdin) = stdin {
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            }
        };
        let (_, status) = tokio::join!(feed, child.wait());
        match status {
            Ok(s) if s.success() => Ok(()),
            Ok(s) => Err(ServiceError::BadRequest(format!(
                "{shown} failed in the build sandbox ({s})"
            ))),
            Err(e) => Err(ServiceError::Internal(format!("{shown}: {e}"))),
        }
    }
}

fn step_event(i: usize, of: usize, step: &dockerfile::Step, cached: bool) -> BuildEvent {
    BuildEvent::Step {
        step: i + 1,
        of,
        line: step.line,
        instruction: step.instruction.clone(),
        cached,
    }
}

/// The built image's config: the FROM image's, with what the Dockerfile set over it.
fn merged_config(base: &sbx_api_types::ImageConfig, plan: &Plan) -> sbx_api_types::ImageConfig {
    let mut env = super::images::image_env(base);
    for kv in &plan.config.env {
        if let Some((k, v)) = kv.split_once('=') {
            env.insert(k.to_string(), v.to_string());
        }
    }
    let mut labels = base.labels.clone();
    labels.extend(plan.config.labels.clone());
    let mut ports = base.exposed_ports.clone();
    ports.extend(plan.config.exposed_ports.iter().cloned());
    sbx_api_types::ImageConfig {
        env: env.into_iter().map(|(k, v)| format!("{k}={v}")).collect(),
        workdir: plan.config.workdir.clone().or_else(|| base.workdir.clone()),
        user: plan.config.user.clone().or_else(|| base.user.clone()),
        entrypoint: plan
            .config
            .entrypoint
            .clone()
            .or_else(|| base.entrypoint.clone()),
        cmd: plan.config.cmd.clone().or_else(|| base.cmd.clone()),
        labels,
        exposed_ports: ports,
    }
}

fn context_error(e: context::ContextError) -> ServiceError {
    match e {
        context::ContextError::TooLarge => ServiceError::ImageTooLarge(context::MAX_CONTEXT_BYTES),
        e => ServiceError::BadRequest(e.to_string()),
    }
}
