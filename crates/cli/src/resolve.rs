//! Turning command-line references (ids or names) into ids.

use sbx_client::api::{Process, ProcessState, Sandbox};
use sbx_client::{Client, Snapshot, SnapshotStatus};
use std::fmt;
use uuid::Uuid;

/// Why a reference matched nothing or too much.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResolveError {
    /// Nothing active has the name; `inactive` counts ended sandboxes that do.
    NotFound {
        /// What was asked for.
        kind: &'static str,
        /// The reference.
        name: String,
        /// Matches in a state that cannot be used.
        inactive: usize,
    },
    /// More than one candidate.
    Ambiguous {
        /// What was asked for.
        kind: &'static str,
        /// The reference.
        name: String,
        /// The candidates.
        ids: Vec<Uuid>,
    },
}

impl fmt::Display for ResolveError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ResolveError::NotFound {
                kind,
                name,
                inactive: 0,
            } => write!(f, "no {kind} named {name:?}"),
            ResolveError::NotFound {
                kind,
                name,
                inactive,
            } => write!(
                f,
                "no usable {kind} named {name:?} ({inactive} ended or failed one(s) have that name; use an id)"
            ),
            ResolveError::Ambiguous { kind, name, ids } => {
                let ids: Vec<String> = ids.iter().map(Uuid::to_string).collect();
                write!(
                    f,
                    "{kind} name {name:?} is ambiguous; use one of these ids: {}",
                    ids.join(", ")
                )
            }
        }
    }
}

impl std::error::Error for ResolveError {}

/// A canonical id when the argument is a UUID (any case); names never are.
pub fn as_uuid(arg: &str) -> Option<Uuid> {
    (arg.len() == 36)
        .then(|| Uuid::parse_str(arg).ok())
        .flatten()
}

/// The one active (not TERMINATED or FAILED) sandbox with this exact name.
pub fn pick_active_sandbox(name: &str, sandboxes: &[Sandbox]) -> Result<Uuid, ResolveError> {
    let named: Vec<&Sandbox> = sandboxes.iter().filter(|s| s.name == name).collect();
    let active: Vec<Uuid> = named
        .iter()
        .filter(|s| s.status.is_active())
        .map(|s| s.id)
        .collect();
    match active.as_slice() {
        [id] => Ok(*id),
        [] => Err(ResolveError::NotFound {
            kind: "active sandbox",
            name: name.to_string(),
            inactive: named.len(),
        }),
        _ => Err(ResolveError::Ambiguous {
            kind: "sandbox",
            name: name.to_string(),
            ids: active,
        }),
    }
}

/// The one CREATING or READY snapshot with this exact name.
pub fn pick_snapshot(name: &str, snapshots: &[Snapshot]) -> Result<Uuid, ResolveError> {
    let named: Vec<&Snapshot> = snapshots
        .iter()
        .filter(|s| s.name.as_deref() == Some(name))
        .collect();
    let live: Vec<Uuid> = named
        .iter()
        .filter(|s| matches!(s.status, SnapshotStatus::Ready | SnapshotStatus::Creating))
        .map(|s| s.id)
        .collect();
    match live.as_slice() {
        [id] => Ok(*id),
        [] => Err(ResolveError::NotFound {
            kind: "snapshot",
            name: name.to_string(),
            inactive: named.len(),
        }),
        _ => Err(ResolveError::Ambiguous {
            kind: "snapshot",
            name: name.to_string(),
            ids: live,
        }),
    }
}

/// The process with this guest pid, preferring a live one when pids were reused.
pub fn pick_process_by_pid(pid: i32, processes: &[Process]) -> Result<Uuid, ResolveError> {
    let matching: Vec<&Process> = processes.iter().filter(|p| p.pid == Some(pid)).collect();
    let live: Vec<Uuid> = matching
        .iter()
        .filter(|p| matches!(p.state, ProcessState::Running | ProcessState::Starting))
        .map(|p| p.id)
        .collect();
    match (live.as_slice(), matching.as_slice()) {
        ([id], _) => Ok(*id),
        ([], [only]) => Ok(only.id),
        ([], []) => Err(ResolveError::NotFound {
            kind: "process with pid",
            name: pid.to_string(),
            inactive: 0,
        }),
        _ => Err(ResolveError::Ambiguous {
            kind: "process pid",
            name: pid.to_string(),
            ids: matching.iter().map(|p| p.id).collect(),
        }),
    }
}

/// A sandbox id from an id or a name.
pub async fn sandbox(client: &Client, arg: &str) -> anyhow::Result<Uuid> {
    if let Some(id) = as_uuid(arg) {
        return Ok(id);
    }
    let all = client.list_all_sandboxes().await?;
    Ok(pick_active_sandbox(arg, &all)?)
}

/// A snapshot id from an id or a name.
pub async fn snapshot(client: &Client, arg: &str) -> anyhow::Result<Uuid> {
    if let Some(id) = as_uuid(arg) {
        return Ok(id);
    }
    let all = client.snapshot_list_all(Some(arg)).await?;
    Ok(pick_snapshot(arg, &all)?)
}

/// A process id from its id or its guest pid.
pub async fn process(client: &Client, sandbox: Uuid, arg: &str) -> anyhow::Result<Uuid> {
    if let Some(id) = as_uuid(arg) {
        return Ok(id);
    }
    let pid: i32 = arg
        .parse()
        .map_err(|_| anyhow::anyhow!("{arg:?} is neither a process id nor a pid"))?;
    let all = client.process_list_all(sandbox).await?;
    Ok(pick_process_by_pid(pid, &all)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sbx_client::api::{Resources, SandboxStatus};

    fn sb(n: u128, name: &str, status: SandboxStatus) -> Sandbox {
        Sandbox {
            id: Uuid::from_u128(n),
            name: name.into(),
            status,
            vpc_id: Uuid::from_u128(99),
            image_ref: "default".into(),
            resources: Resources {
                vcpu: 1,
                memory_mb: 1024,
            },
            created_at: "2026-07-30T12:00:00Z".into(),
            started_at: None,
            ended_at: None,
            error: None,
        }
    }

    #[test]
    fn picks_the_active_sandbox_with_the_name() {
        let list = vec![
            sb(1, "web", SandboxStatus::Terminated),
            sb(2, "web", SandboxStatus::Running),
            sb(3, "web", SandboxStatus::Failed),
            sb(4, "db", SandboxStatus::Paused),
            sb(5, "Web", SandboxStatus::Running),
        ];
        assert_eq!(pick_active_sandbox("web", &list), Ok(Uuid::from_u128(2)));
        // Paused sandboxes are active: they hold their name.
        assert_eq!(pick_active_sandbox("db", &list), Ok(Uuid::from_u128(4)));
        // Names are case-sensitive.
        assert_eq!(pick_active_sandbox("Web", &list), Ok(Uuid::from_u128(5)));
    }

    #[test]
    fn missing_and_ambiguous_names_are_errors() {
        let list = vec![
            sb(1, "old", SandboxStatus::Terminated),
            sb(2, "twin", SandboxStatus::Running),
            sb(3, "twin", SandboxStatus::Starting),
        ];
        let err = pick_active_sandbox("old", &list).unwrap_err();
        assert_eq!(
            err,
            ResolveError::NotFound {
                kind: "active sandbox",
                name: "old".into(),
                inactive: 1
            }
        );
        assert!(err.to_string().contains("use an id"));
        assert_eq!(
            pick_active_sandbox("nope", &list).unwrap_err().to_string(),
            "no active sandbox named \"nope\""
        );
        let err = pick_active_sandbox("twin", &list).unwrap_err();
        assert!(matches!(err, ResolveError::Ambiguous { ref ids, .. } if ids.len() == 2));
        assert!(err
            .to_string()
            .contains("00000000-0000-0000-0000-000000000002"));
    }

    #[test]
    fn uuids_are_taken_as_ids() {
        assert_eq!(
            as_uuid("B066BDF7-A57B-4D8B-A1A7-76EAB1F91273").map(|u| u.to_string()),
            Some("b066bdf7-a57b-4d8b-a1a7-76eab1f91273".to_string())
        );
        assert_eq!(as_uuid("web"), None);
        assert_eq!(as_uuid("b066bdf7a57b4d8ba1a776eab1f91273"), None);
    }

    #[test]
    fn processes_by_pid_prefer_the_live_one() {
        let p = |n: u128, pid: i32, state: ProcessState| Process {
            id: Uuid::from_u128(n),
            command: vec!["sleep".into()],
            pid: Some(pid),
            state,
            exit_code: (state == ProcessState::Exited).then_some(0),
            termination_signal: None,
            started_at: None,
            ended_at: None,
        };
        let list = vec![
            p(1, 10, ProcessState::Exited),
            p(2, 10, ProcessState::Running),
            p(3, 11, ProcessState::Exited),
            p(4, 12, ProcessState::Exited),
            p(5, 12, ProcessState::Killed),
        ];
        assert_eq!(pick_process_by_pid(10, &list), Ok(Uuid::from_u128(2)));
        assert_eq!(pick_process_by_pid(11, &list), Ok(Uuid::from_u128(3)));
        assert!(matches!(
            pick_process_by_pid(12, &list),
            Err(ResolveError::Ambiguous { .. })
        ));
        assert!(matches!(
            pick_process_by_pid(13, &list),
            Err(ResolveError::NotFound { .. })
        ));
    }

    #[test]
    fn snapshots_by_name_skip_deleted_ones() {
        let snap = |n: u128, name: &str, status: &str| -> Snapshot {
            serde_json::from_value(serde_json::json!({
                "id": Uuid::from_u128(n), "name": name, "sourceImageId": "x", "status": status,
                "resources": {"vcpu": 1, "memoryMb": 1024}, "createdAt": "2026-07-30T12:00:00Z"
            }))
            .unwrap()
        };
        let list = vec![
            snap(1, "deps", "DELETED"),
            snap(2, "deps", "READY"),
            snap(3, "gone", "FAILED"),
        ];
        assert_eq!(pick_snapshot("deps", &list), Ok(Uuid::from_u128(2)));
        assert!(matches!(
            pick_snapshot("gone", &list),
            Err(ResolveError::NotFound { inactive: 1, .. })
        ));
    }
}
