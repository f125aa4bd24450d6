//! Usage sampling on the fake runtime, whose readings the test sets (fake
//! counters, not cgroup files): samples need two readings, follow RUNNING
//! sandboxes only, are per tenant, and end with the sandbox.

use super::*;
use crate::service::{DestroyOutcome, ServiceError};
use sbx_node::usage::{read::CgroupCounters, Reading};

fn reading(cpu_usec: u64, memory_bytes: u64) -> Reading {
    Reading {
        cgroup: CgroupCounters {
            cpu_usec,
            memory_bytes,
            ..CgroupCounters::default()
        },
        ..Reading::default()
    }
}

#[tokio::test]
async fn samples_follow_running_sandboxes_and_end_with_them() {
    let h = Harness::new();
    let r = h.running("busy").await;
    let metrics = |ws: &'static str| h.service.sandbox_metrics(ws, r.id);

    h.runtime.set_usage(r.id, reading(0, 10 << 20));
    h.service.sample_usage().await;
    assert!(
        metrics(WS).await.unwrap().samples.is_empty(),
        "one reading is a baseline"
    );
    h.runtime.set_usage(r.id, reading(1_000_000, 20 << 20));
    h.service.sample_usage().await;
    let m = metrics(WS).await.unwrap();
    assert_eq!(
        (m.vcpu, m.memory_mb, m.samples.len()),
        (r.vcpu, r.memory_mb, 1)
    );
    let s = &m.samples[0];
    assert!(s.cpu_percent > 0.0 && s.cpu_time_ms == 1000, "{s:?}");
    assert_eq!((s.memory_bytes, s.memory_peak_bytes), (20 << 20, 20 << 20));
    assert!(matches!(
        metrics("other-ws/env").await,
        Err(ServiceError::SandboxNotFound)
    ));

    // Paused: no samples, the earlier ones stay.
    h.service.pause(WS, r.id).await.unwrap();
    h.runtime.set_usage(r.id, reading(2_000_000, 30 << 20));
    h.service.sample_usage().await;
    h.service.sample_usage().await;
    assert_eq!(metrics(WS).await.unwrap().samples.len(), 1);
    // Resumed: a fresh baseline first, then samples again.
    h.service.resume(WS, r.id).await.unwrap();
    h.service.sample_usage().await;
    assert_eq!(metrics(WS).await.unwrap().samples.len(), 1);
    h.runtime.set_usage(r.id, reading(2_500_000, 30 << 20));
    h.service.sample_usage().await;
    assert_eq!(metrics(WS).await.unwrap().samples.len(), 2);

    // Destroyed: 404, and the history is forgotten at the next round.
    let outcome = h.service.destroy(WS, r.id).await.unwrap();
    assert!(matches!(outcome, DestroyOutcome::Terminated), "{outcome:?}");
    assert!(matches!(
        metrics(WS).await,
        Err(ServiceError::SandboxNotFound)
    ));
    h.service.sample_usage().await;
    assert!(h.service.usage_samples(r.id).is_empty());
}
