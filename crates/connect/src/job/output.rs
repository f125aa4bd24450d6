//! Output messages of a sync: records and checkpoints checked (object, key, limits, secrets)
//! and appended to the spool.

use super::screen;
use super::wire::Incoming;
use super::{JobEnv, JobOutcome, JobSpec, State, Stop};
use crate::model::{FailureCategory, PrimaryKey, SyncMode};
use serde_json::{Map, Value};
use std::sync::atomic::Ordering;

/// The text of a scalar key value; other values cannot be keys.
fn scalar_key(value: &Value) -> Option<String> {
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    }
}

/// The primary key text of a record: the value of one field, or the JSON array of several.
pub fn key_text(record: &Map<String, Value>, key: &PrimaryKey) -> Option<String> {
    match key {
        PrimaryKey::One(field) => scalar_key(record.get(field)?),
        PrimaryKey::Many(fields) => {
            let values = fields
                .iter()
                .map(|f| record.get(f).filter(|v| scalar_key(v).is_some()).cloned())
                .collect::<Option<Vec<Value>>>()?;
            Some(Value::Array(values).to_string())
        }
    }
}

fn is_object_text(text: &str) -> bool {
    text.trim_start().starts_with('{')
}

pub(super) fn spool_records(
    msg: Incoming,
    state: &mut State,
    spec: &JobSpec,
    env: &JobEnv,
) -> Result<(), Stop> {
    let (Some(target), Some(records)) = (&spec.sync, msg.records) else {
        return Err(Stop::protocol());
    };
    let Some(spool) = state.spool.as_mut() else {
        return Err(Stop::protocol());
    };
    let limits = &spec.limits;
    let secrets = screen::secrets(env);
    state.batches += 1;
    if state.batches > limits.max_batches {
        return Err(Stop::output_limit("max_batches"));
    }
    if records.len() as u64 > limits.max_records_per_batch {
        return Err(Stop::output_limit("max_records_per_batch"));
    }
    for raw in &records {
        let text = raw.get();
        if !is_object_text(text) {
            return Err(Stop::bad_batch());
        }
        let bytes = text.len() as u64;
        if bytes > limits.max_record_bytes {
            return Err(Stop::output_limit("max_record_bytes"));
        }
        if screen::leaks(secrets.as_deref(), text.as_bytes()) {
            return Err(Stop::credential_leak());
        }
        state.output_bytes += bytes;
        if state.output_bytes > limits.max_output_bytes {
            return Err(Stop::output_limit("max_output_bytes"));
        }
        let key = match (target.mode, &target.primary_key) {
            (SyncMode::Merge, Some(pk)) => {
                let map: Map<String, Value> =
                    serde_json::from_str(text).map_err(|_| Stop::bad_batch())?;
                Some(key_text(&map, pk).ok_or_else(Stop::bad_batch)?)
            }
            // A merge sync without a primary key cannot be committed.
            (SyncMode::Merge, None) => return Err(Stop::bad_batch()),
            _ => None,
        };
        spool.append_record(key.as_deref(), text).map_err(|e| {
            tracing::warn!(error = %e, "spool write failed");
            Stop {
                outcome: JobOutcome::failed(FailureCategory::Platform, "spool"),
                abort: Some("platform"),
            }
        })?;
        env.received.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

pub(super) fn spool_checkpoint(
    msg: Incoming,
    state: &mut State,
    spec: &JobSpec,
    env: &JobEnv,
) -> Result<(), Stop> {
    let (Some(_), Some(checkpoint), Some(spool)) =
        (&spec.sync, msg.checkpoint, state.spool.as_mut())
    else {
        return Err(Stop::protocol());
    };
    let text = checkpoint.get();
    if !is_object_text(text) {
        return Err(Stop::bad_batch());
    }
    if text.len() as u64 > spec.limits.max_checkpoint_bytes {
        return Err(Stop::output_limit("max_checkpoint_bytes"));
    }
    if screen::leaks(screen::secrets(env).as_deref(), text.as_bytes()) {
        return Err(Stop::credential_leak());
    }
    spool.append_checkpoint(text).map_err(|e| {
        tracing::warn!(error = %e, "spool write failed");
        Stop {
            outcome: JobOutcome::failed(FailureCategory::Platform, "spool"),
            abort: Some("platform"),
        }
    })
}
