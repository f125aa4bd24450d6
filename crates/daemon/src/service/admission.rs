//! Admission control: a create (cold or clone) or a warm-pool refill starts
//! only if the node has room for it; otherwise it gets `compute_unavailable`
//! (503, retryable) at once, or `storage_full` (503, retryable) when the data
//! dir has less free disk than the minimum, never an overcommitted node or a
//! hung request.
//!
//! Capacity: memory (MemTotal minus a reserve) and CPUs, each times an
//! overcommit factor, and a minimum of free disk in the data dir. Usage: the
//! shapes of every sandbox that holds resources (not TERMINATED or FAILED),
//! the warm pool's members (booted or booting), and creates admitted but not
//! yet written to the store. Checks and reservations happen under one lock.
//!
//! A sandbox's disk (`--sandbox-disk-mb`) is not reserved against the free
//! disk: its image is sparse and takes host space only as the sandbox writes,
//! so reserving the full size (10 GiB each) would refuse most creates while
//! the space stays unused. Host disk is overcommitted, like CPU; the free-disk
//! minimum still stops creates on a node that is really running out.

use super::{Result, Service, ServiceError};
use crate::config::CapacityConfig;
use sbx_api_types::SandboxStatus;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// Statuses whose sandboxes hold memory and CPU on the node.
const HOLDING: [SandboxStatus; 7] = SandboxStatus::ACTIVE;

/// What the node may hand out.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Capacity {
    /// vCPUs, in thousandths (overcommit applied).
    pub vcpu_milli: u64,
    /// Memory in MiB (reserve and overcommit applied).
    pub memory_mb: u64,
    /// Least free space in the data dir for a new sandbox, bytes.
    pub min_free_disk: u64,
}

impl Capacity {
    /// Reads the host (`/proc/meminfo`, CPU count) and applies the configuration.
    pub fn detect(cfg: &CapacityConfig) -> Capacity {
        let memory_mb = match cfg.memory_mb {
            Some(m) => m,
            None => mem_total_mb().saturating_sub(cfg.memory_reserve_mb),
        };
        let vcpus = match cfg.vcpus {
            Some(v) => u64::from(v),
            None => std::thread::available_parallelism().map_or(1, |n| n.get() as u64),
        };
        Capacity {
            vcpu_milli: (vcpus as f64 * 1000.0 * cfg.cpu_overcommit.max(0.0)) as u64,
            memory_mb: (memory_mb as f64 * cfg.memory_overcommit.max(0.0)) as u64,
            min_free_disk: cfg.min_free_disk_mb.saturating_mul(1024 * 1024),
        }
    }
}

impl Capacity {
    /// The shapes of `shapes` larger than the whole capacity (vCPUs or memory):
    /// creates of them can only get `compute_unavailable` on this node.
    pub fn unfit(&self, shapes: &[(u32, u32)]) -> Vec<(u32, u32)> {
        shapes
            .iter()
            .copied()
            .filter(|&(vcpu, memory_mb)| {
                u64::from(vcpu) * 1000 > self.vcpu_milli || u64::from(memory_mb) > self.memory_mb
            })
            .collect()
    }
}

fn mem_total_mb() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemTotal:"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|kib| kib.parse::<u64>().ok())
        .map_or(0, |kib| kib / 1024)
}

/// Free bytes for unprivileged users on the filesystem holding `dir`.
fn free_disk(dir: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `path` is a valid C string and `st` a writable statvfs.
    let rc = unsafe { libc::statvfs(path.as_ptr(), &mut st) };
    (rc == 0).then(|| st.f_bavail as u64 * st.f_frsize as u64)
}

/// Capacity and the creates admitted but not yet in the store.
pub(super) struct Admission {
    capacity: Capacity,
    /// (vcpu_milli, memory_mb) of admitted creates without a store row yet.
    pending: Mutex<(u64, u64)>,
    /// Admits one at a time across the store read and the check, so that two creates
    /// do not both fit into the same room. A reservation released between the read and
    /// the check (its sandbox booted meanwhile) may be missed once: capacity is a soft
    /// limit of the node, each sandbox's own shape is enforced by its cgroup.
    order: tokio::sync::Mutex<()>,
}

/// Holds an admitted create's share until its store row exists; dropping it releases the share.
pub struct Reservation {
    owner: Arc<Service>,
    vcpu_milli: u64,
    memory_mb: u64,
}

impl Drop for Reservation {
    fn drop(&mut self) {
        let mut pending = self.owner.admission.lock();
        pending.0 = pending.0.saturating_sub(self.vcpu_milli);
        pending.1 = pending.1.saturating_sub(self.memory_mb);
    }
}

impl Admission {
    pub(super) fn new(capacity: Capacity) -> Admission {
        Admission {
            capacity,
            pending: Mutex::new((0, 0)),
            order: tokio::sync::Mutex::new(()),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, (u64, u64)> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }
}

impl Service {
    /// The node's capacity after reserve and overcommit.
    pub fn capacity(&self) -> Capacity {
        self.admission.capacity
    }

    /// (vcpu_milli, memory_mb) held by sandboxes in the store and by the warm pool.
    async fn usage(&self) -> Result<(u64, u64)> {
        let mut vcpu_milli = 0u64;
        let mut memory_mb = 0u64;
        for r in self
            .store
            .sandboxes_in_status(Some(&self.config.node.id), &HOLDING)
            .await?
        {
            vcpu_milli += u64::from(r.vcpu) * 1000;
            memory_mb += u64::from(r.memory_mb);
        }
        for ((vcpu, mem), members) in self.pool.members_by_shape() {
            vcpu_milli += u64::from(vcpu) * 1000 * members as u64;
            memory_mb += u64::from(mem) * members as u64;
        }
        Ok((vcpu_milli, memory_mb))
    }

    /// Checks that `extra` more fits next to `used` (from [`Service::usage`]) and what is pending.
    fn check_fits(&self, used: (u64, u64), pending: (u64, u64), extra: (u64, u64)) -> Result<()> {
        let cap = self.admission.capacity;
        if let Some(free) = free_disk(&self.config.data_dir) {
            if free < cap.min_free_disk {
                sbx_metrics::global().admission_refused("disk");
                // The same code as a store write refused for a full disk: one cause, one code.
                return Err(ServiceError::StorageFull(format!(
                    "the data disk is full: {} MiB free in the data dir, a new sandbox needs {} MiB \
                     (--min-free-disk-mb); free space, then retry",
                    free / (1024 * 1024),
                    cap.min_free_disk / (1024 * 1024)
                )));
            }
        }
        let (used_cpu, used_mem) = used;
        let cpu = used_cpu + pending.0 + extra.0;
        let mem = used_mem + pending.1 + extra.1;
        if cpu > cap.vcpu_milli || mem > cap.memory_mb {
            let reason = if cpu > cap.vcpu_milli {
                "cpu"
            } else {
                "memory"
            };
            sbx_metrics::global().admission_refused(reason);
            return Err(ServiceError::Unavailable(format!(
                "node is at capacity ({:.1} of {:.1} vCPUs, {} of {} MiB in use or requested); retry later",
                (used_cpu + pending.0) as f64 / 1000.0,
                cap.vcpu_milli as f64 / 1000.0,
                used_mem + pending.1,
                cap.memory_mb
            )));
        }
        Ok(())
    }

    /// Admits a new sandbox of the shape or answers `Unavailable`. Warm
    /// pool members give way: while the node is full and the pool has ready
    /// members, they are evicted one by one until the sandbox fits.
    pub(super) async fn admit(self: &Arc<Self>, vcpu: u32, memory_mb: u32) -> Result<Reservation> {
        let share = (u64::from(vcpu) * 1000, u64::from(memory_mb));
        let _order = self.admission.order.lock().await;
        loop {
            let used = self.usage().await?;
            let mut pending = self.admission.lock();
            match self.check_fits(used, *pending, share) {
                Ok(()) => {
                    pending.0 += share.0;
                    pending.1 += share.1;
                    return Ok(Reservation {
                        owner: self.clone(),
                        vcpu_milli: share.0,
                        memory_mb: share.1,
                    });
                }
                Err(ServiceError::Unavailable(why)) => {
                    drop(pending);
                    if !self.evict_member() {
                        return Err(ServiceError::Unavailable(why));
                    }
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Admits a Connect job or build sandbox (no store row): the reservation holds its share
    /// of the node until it is dropped, when the job's sandbox is gone.
    pub async fn admit_job(self: &Arc<Self>, vcpu: u32, memory_mb: u32) -> Result<Reservation> {
        self.admit(vcpu, memory_mb).await
    }

    /// Holds the share of a warm member taken by a create (already booted: no check).
    pub(super) fn hold(self: &Arc<Self>, vcpu: u32, memory_mb: u32) -> Reservation {
        let share = (u64::from(vcpu) * 1000, u64::from(memory_mb));
        let mut pending = self.admission.lock();
        pending.0 += share.0;
        pending.1 += share.1;
        Reservation {
            owner: self.clone(),
            vcpu_milli: share.0,
            memory_mb: share.1,
        }
    }

    /// The admission turn: held by a create's admission and by a pool
    /// refill's reserve-and-check, so that a refill never takes the room a
    /// create has just made by evicting a member.
    pub(super) async fn admission_turn(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.admission.order.lock().await
    }

    /// Whether the warm pool's members (already counted as booting) fit;
    /// call with the [`Service::admission_turn`] held.
    pub(super) async fn pool_fits(&self) -> Result<()> {
        let used = self.usage().await?;
        let pending = *self.admission.lock();
        self.check_fits(used, pending, (0, 0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_larger_than_the_node_are_named() {
        let cap = Capacity {
            vcpu_milli: 64_000,
            memory_mb: 8192,
            min_free_disk: 0,
        };
        let grid = sbx_api_types::validate::SHAPES;
        assert_eq!(cap.unfit(&grid), vec![(4, 16384)]);
        let one_cpu = Capacity {
            vcpu_milli: 1000,
            ..cap
        };
        assert_eq!(
            one_cpu.unfit(&[(1, 4096), (2, 2048), (4, 4096)]),
            vec![(2, 2048), (4, 4096)]
        );
    }

    #[test]
    fn capacity_applies_reserve_and_overcommit() {
        let cfg = CapacityConfig {
            memory_mb: Some(4096),
            vcpus: Some(2),
            memory_reserve_mb: 1024,
            memory_overcommit: 1.5,
            cpu_overcommit: 2.0,
            min_free_disk_mb: 10,
        };
        let c = Capacity::detect(&cfg);
        // An explicit memory size is taken as is (no reserve).
        assert_eq!(c.memory_mb, 6144);
        assert_eq!(c.vcpu_milli, 4000);
        assert_eq!(c.min_free_disk, 10 * 1024 * 1024);
        let host = Capacity::detect(&CapacityConfig::default());
        assert!(host.memory_mb > 0 && host.vcpu_milli >= 1000);
        assert!(free_disk(Path::new("/")).is_some());
    }
}
