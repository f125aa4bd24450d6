//! Per-sandbox usage: CPU, memory, processes and disk of each running
//! sandbox, sampled every few seconds by one task of the control plane and
//! kept here as a short in-memory history.
//!
//! [`read`] reads a sandbox's counters (cgroupfs, `/proc`, its disk);
//! [`Runtime::usage`](crate::runtime::Runtime::usage) puts them together;
//! [`History`] turns successive readings into samples (CPU % needs two) and
//! forgets a sandbox when it is no longer on the node.

pub mod read;

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use uuid::Uuid;

/// One reading of a sandbox's counters, as the runtime reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Reading {
    /// cgroup counters.
    pub cgroup: read::CgroupCounters,
    /// Guest processes: the host cannot tell them apart from the platform's
    /// stubs, so the runtime leaves this `None` and the control plane asks
    /// the sandbox's agent.
    pub processes: Option<u64>,
    /// The sandbox's disk.
    pub disk: read::DiskCounters,
}

/// One point of a sandbox's usage history.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    /// When it was taken, ms since the Unix epoch.
    pub unix_ms: u64,
    /// CPU used over the interval before it, percent of the sandbox's vCPUs (0-100).
    pub cpu_percent: f64,
    /// CPU used over that interval, percent of one core (up to 100 × vCPUs).
    pub cpu_core_percent: f64,
    /// CPU time used since the sandbox started, ms.
    pub cpu_time_ms: u64,
    /// Memory in use, bytes.
    pub memory_bytes: u64,
    /// Highest memory use so far, bytes (the kernel's, else the highest sampled).
    pub memory_peak_bytes: u64,
    /// Host page cache of the sandbox's files, bytes.
    pub memory_cache_bytes: u64,
    /// Bytes used on the sandbox's disk.
    pub disk_used_bytes: u64,
    /// Size of the sandbox's disk, bytes; 0 when it has no limit.
    pub disk_total_bytes: u64,
    /// Guest processes (`None` when the agent did not say).
    pub processes: Option<u64>,
}

struct Entry {
    /// The previous reading's CPU time and when it was taken; `None` after a
    /// gap (a pause), so that the next reading starts a fresh interval.
    last: Option<(u64, Instant)>,
    samples: VecDeque<Sample>,
    peak: u64,
}

/// The recent samples of every sandbox of the node.
pub struct History {
    keep: Duration,
    entries: HashMap<Uuid, Entry>,
}

fn unix_ms(at: SystemTime) -> u64 {
    at.duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl History {
    /// An empty history keeping samples for `keep`.
    pub fn new(keep: Duration) -> History {
        History {
            keep,
            entries: HashMap::new(),
        }
    }

    /// Adds a reading of sandbox `id` (with `vcpu` vCPUs) taken at
    /// `now`/`wall`. The first reading after a start or a gap only sets the
    /// baseline: CPU % is the CPU time used between two readings.
    pub fn record(&mut self, id: Uuid, vcpu: u32, r: &Reading, now: Instant, wall: SystemTime) {
        let entry = self.entries.entry(id).or_insert_with(|| Entry {
            last: None,
            samples: VecDeque::new(),
            peak: 0,
        });
        let cpu = r.cgroup.cpu_usec;
        let previous = entry.last.replace((cpu, now));
        let Some((last_cpu, last_at)) = previous else {
            return;
        };
        let wall_usec = now.saturating_duration_since(last_at).as_micros() as f64;
        // A counter that went back belongs to a new cgroup (a restore): start over.
        if cpu < last_cpu || wall_usec <= 0.0 {
            return;
        }
        let core_percent = (cpu - last_cpu) as f64 / wall_usec * 100.0;
        entry.peak = entry
            .peak
            .max(r.cgroup.memory_bytes)
            .max(r.cgroup.memory_peak_bytes.unwrap_or(0));
        entry.samples.push_back(Sample {
            unix_ms: unix_ms(wall),
            cpu_percent: core_percent / f64::from(vcpu.max(1)),
            cpu_core_percent: core_percent,
            cpu_time_ms: cpu / 1000,
            memory_bytes: r.cgroup.memory_bytes,
            memory_peak_bytes: entry.peak,
            memory_cache_bytes: r.cgroup.memory_cache_bytes,
            disk_used_bytes: r.disk.used_bytes,
            disk_total_bytes: r.disk.total_bytes,
            processes: r.processes,
        });
        let oldest = unix_ms(wall).saturating_sub(self.keep.as_millis() as u64);
        while entry.samples.front().is_some_and(|s| s.unix_ms < oldest) {
            entry.samples.pop_front();
        }
    }

    /// Marks a gap for `id` (it is paused, or its reading failed): its
    /// samples stay, and the next reading starts a fresh interval.
    pub fn gap(&mut self, id: Uuid) {
        if let Some(e) = self.entries.get_mut(&id) {
            e.last = None;
        }
    }

    /// Forgets every sandbox for which `keep` is false (it ended or left the node).
    pub fn retain(&mut self, mut keep: impl FnMut(Uuid) -> bool) {
        self.entries.retain(|id, _| keep(*id));
    }

    /// The samples of `id`, oldest first (none when it has no history).
    pub fn samples(&self, id: Uuid) -> Vec<Sample> {
        self.entries
            .get(&id)
            .map(|e| e.samples.iter().copied().collect())
            .unwrap_or_default()
    }

    /// The newest sample of `id`.
    pub fn latest(&self, id: Uuid) -> Option<Sample> {
        self.entries
            .get(&id)
            .and_then(|e| e.samples.back().copied())
    }

    /// How many sandboxes have a history.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no sandbox has a history.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reading(cpu_usec: u64, memory: u64) -> Reading {
        Reading {
            cgroup: read::CgroupCounters {
                cpu_usec,
                memory_bytes: memory,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn cpu_percent_is_the_cpu_time_between_two_readings() {
        let mut h = History::new(Duration::from_secs(600));
        let id = Uuid::new_v4();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        h.record(id, 2, &reading(1_000_000, 10), t0, w0);
        assert!(h.samples(id).is_empty(), "the first reading is a baseline");
        // 1.5 s of CPU in 2 s of wall time: 75 % of one core, 37.5 % of two vCPUs.
        let t1 = t0 + Duration::from_secs(2);
        h.record(
            id,
            2,
            &reading(2_500_000, 30),
            t1,
            w0 + Duration::from_secs(2),
        );
        let s = h.latest(id).unwrap();
        assert!((s.cpu_core_percent - 75.0).abs() < 1e-6, "{s:?}");
        assert!((s.cpu_percent - 37.5).abs() < 1e-6, "{s:?}");
        assert_eq!(
            (s.cpu_time_ms, s.memory_bytes, s.memory_peak_bytes),
            (2500, 30, 30)
        );
        // Memory went down: the peak stays.
        h.record(
            id,
            2,
            &reading(2_500_000, 20),
            t1 + Duration::from_secs(1),
            w0 + Duration::from_secs(3),
        );
        let s = h.latest(id).unwrap();
        assert_eq!(
            (s.cpu_percent, s.memory_bytes, s.memory_peak_bytes),
            (0.0, 20, 30)
        );
    }

    #[test]
    fn a_gap_restarts_the_interval_and_keeps_the_samples() {
        let mut h = History::new(Duration::from_secs(600));
        let id = Uuid::new_v4();
        let (t0, w0) = (Instant::now(), SystemTime::now());
        h.record(id, 1, &reading(0, 1), t0, w0);
        h.record(
            id,
            1,
            &reading(1_000_000, 1),
            t0 + Duration::from_secs(1),
            w0,
        );
        h.gap(id);
        h.record(
            id,
            1,
            &reading(1_000_000, 1),
            t0 + Duration::from_secs(100),
            w0,
        );
        assert_eq!(
            h.samples(id).len(),
            1,
            "after a gap the first reading is a baseline"
        );
        // A counter that went back (a restored sandbox's new cgroup) is a baseline too.
        h.record(id, 1, &reading(10, 1), t0 + Duration::from_secs(101), w0);
        assert_eq!(h.samples(id).len(), 1);
        h.record(
            id,
            1,
            &reading(500_010, 1),
            t0 + Duration::from_secs(102),
            w0,
        );
        assert_eq!(h.samples(id).len(), 2);
        assert!((h.latest(id).unwrap().cpu_percent - 50.0).abs() < 1e-6);
    }

    #[test]
    fn old_samples_and_ended_sandboxes_are_dropped() {
        let mut h = History::new(Duration::from_secs(10));
        let (a, b) = (Uuid::new_v4(), Uuid::new_v4());
        let (t0, w0) = (Instant::now(), SystemTime::now());
        for i in 0..30u64 {
            let (t, w) = (t0 + Duration::from_secs(i), w0 + Duration::from_secs(i));
            h.record(a, 1, &reading(i, 1), t, w);
            h.record(b, 1, &reading(i, 1), t, w);
        }
        let kept = h.samples(a);
        assert_eq!(kept.len(), 11, "samples of the last 10 s");
        h.retain(|id| id == a);
        assert_eq!((h.len(), h.samples(b).len()), (1, 0));
    }
}
