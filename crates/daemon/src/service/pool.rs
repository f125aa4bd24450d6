//! The warm pool: sandboxes booted ahead of demand, per shape.
//!
//! A member is booted exactly like a fresh sandbox (`runtime.start`, agent
//! connection) but has no store row and belongs to no workspace until a
//! create takes it; its container id is `sbx-<uuid>` like every sandbox, so
//! the uuid becomes the sandbox id. Its agent has run nothing: the create's
//! boot sends `Configure` (environment, secrets, proxy variables) and starts
//! the network service exactly as for a cold start. Members are never
//! returned to the pool after assignment. A daemon restart finds members
//! without a row and reconciliation destroys them as orphans; the pool is
//! then refilled from scratch.
//!
//! How many members each shape gets is [`super::pool_sizing`]'s decision
//! (by default sbxd sizes the pool itself). Members never stand in the way
//! of real work: a create or job that does not fit evicts ready members
//! first (see `Service::admit`), and host memory pressure empties the pool.

use super::pool_sizing::Sizing;
use super::Service;
use crate::config::WarmPool;
use crate::runtime::{AgentConn, SandboxSpec};
use sbx_agent_proto::{Reply, Request};
use serde::Serialize;
use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use uuid::Uuid;

/// How long a failed member start waits before the pool tries again.
const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);
/// How long a member gets to answer a ping when it is taken.
const TAKE_PING_TIMEOUT: Duration = Duration::from_secs(1);
/// How often the pool looks at host memory and at shapes no longer wanted.
const MAINTENANCE_EVERY: Duration = Duration::from_secs(10);

/// A shape: (vCPUs, MiB).
pub type Shape = (u32, u32);

/// A booted member waiting for assignment.
pub(super) struct Member {
    pub id: Uuid,
    pub conn: AgentConn,
}

#[derive(Default)]
struct ShapeState {
    ready: VecDeque<Member>,
    starting: usize,
}

/// Members per shape and the sizing policy, under one lock.
struct PoolState {
    shapes: BTreeMap<Shape, ShapeState>,
    sizing: Sizing,
}

/// Per-shape pool state; all counters change under one lock.
pub(super) struct Pool {
    state: Mutex<PoolState>,
    /// A refill postponed for lack of capacity is already scheduled.
    retry_scheduled: AtomicBool,
}

/// One shape's pool in `GET /v1/pool`.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct PoolShapeStatus {
    /// `VCPUxMIB`, as in `--warm-pool`.
    pub shape: String,
    /// vCPUs.
    pub vcpu: u32,
    /// Memory in MiB.
    pub memory_mb: u32,
    /// How many members the shape should have now (configured, or sbxd's choice).
    pub target: usize,
    /// Members booted and waiting.
    pub ready: usize,
    /// Members booting.
    pub starting: usize,
}

impl Pool {
    /// A pool sized by `setting` on a node offering `shapes` with `capacity_mb` for sandboxes.
    pub(super) fn new(setting: &WarmPool, shapes: &[Shape], capacity_mb: u64) -> Pool {
        Pool {
            state: Mutex::new(PoolState {
                shapes: BTreeMap::new(),
                sizing: Sizing::new(setting, shapes, capacity_mb),
            }),
            retry_scheduled: AtomicBool::new(false),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, PoolState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Ids and connections of every ready member.
    fn members(&self) -> Vec<(Uuid, AgentConn)> {
        self.lock()
            .shapes
            .values()
            .flat_map(|s| s.ready.iter().map(|m| (m.id, m.conn.clone())))
            .collect()
    }

    /// Removes one ready member of the shape (never the same one twice).
    fn pop(&self, shape: Shape) -> Option<Member> {
        self.lock().shapes.get_mut(&shape)?.ready.pop_front()
    }

    /// Removes one ready member of any shape, the largest first (room for real work).
    pub(super) fn evict_one(&self) -> Option<Member> {
        let mut state = self.lock();
        state
            .shapes
            .iter_mut()
            .rev()
            .find_map(|(_, s)| s.ready.pop_back())
    }

    /// Whether the shape has a pool now (its creates count as hits or misses).
    fn wanted(&self, shape: Shape) -> bool {
        let mut state = self.lock();
        state.sizing.targets(Instant::now()).contains_key(&shape)
    }

    /// A create of the shape found no member (auto sizing boots one for next time).
    fn record_miss(&self, shape: Shape) {
        self.lock().sizing.record_miss(shape, Instant::now());
    }

    /// Reserves one missing start (the first shape below its target), if any.
    fn reserve_one(&self) -> Option<Shape> {
        let mut state = self.lock();
        let targets = state.sizing.targets(Instant::now());
        let held: usize = state
            .shapes
            .values()
            .map(|s| s.ready.len() + s.starting)
            .sum();
        if state.sizing.max_members().is_some_and(|max| held >= max) {
            return None;
        }
        for (&shape, &target) in &targets {
            let s = state.shapes.entry(shape).or_default();
            if s.ready.len() + s.starting < target {
                s.starting += 1;
                return Some(shape);
            }
        }
        None
    }

    /// Ready members over their shape's target now (the shape no longer
    /// wanted, or memory pressure), removed from the pool.
    fn take_surplus(&self) -> Vec<Member> {
        let mut state = self.lock();
        let targets = state.sizing.targets(Instant::now());
        let mut out = Vec::new();
        for (shape, s) in state.shapes.iter_mut() {
            let target = targets.get(shape).copied().unwrap_or(0);
            while s.ready.len() + s.starting > target {
                match s.ready.pop_back() {
                    Some(m) => out.push(m),
                    None => break,
                }
            }
        }
        out
    }

    /// Host memory ran low: the pool empties for a while; answers the ready members.
    fn empty_for_pressure(&self) -> Vec<Member> {
        self.lock().sizing.record_pressure(Instant::now());
        self.take_surplus()
    }

    /// Reserves every missing start; returns one shape per start.
    #[cfg(test)]
    fn reserve(&self) -> Vec<Shape> {
        std::iter::from_fn(|| self.reserve_one()).collect()
    }

    /// A reserved start ended; `member` is the booted sandbox, if it booted.
    fn finish_start(&self, shape: Shape, member: Option<Member>) {
        let mut state = self.lock();
        let s = state.shapes.entry(shape).or_default();
        s.starting = s.starting.saturating_sub(1);
        if let Some(m) = member {
            s.ready.push_back(m);
        }
    }

    /// Puts an untouched member back if there is room; otherwise hands it back.
    fn put_back(&self, shape: Shape, member: Member) -> Option<Member> {
        let mut state = self.lock();
        let target = state
            .sizing
            .targets(Instant::now())
            .get(&shape)
            .copied()
            .unwrap_or(0);
        let s = state.shapes.entry(shape).or_default();
        if s.ready.len() + s.starting < target {
            s.ready.push_front(member);
            None
        } else {
            Some(member)
        }
    }

    /// Members (ready and booting) per shape: they hold node capacity but belong to no tenant.
    pub(super) fn members_by_shape(&self) -> Vec<(Shape, usize)> {
        self.lock()
            .shapes
            .iter()
            .map(|(&shape, s)| (shape, s.ready.len() + s.starting))
            .collect()
    }

    /// Every shape with a target or members now.
    fn status(&self) -> Vec<PoolShapeStatus> {
        let mut state = self.lock();
        let targets = state.sizing.targets(Instant::now());
        let mut shapes: Vec<Shape> = targets.keys().copied().collect();
        for (shape, s) in &state.shapes {
            if s.ready.len() + s.starting > 0 && !targets.contains_key(shape) {
                shapes.push(*shape);
            }
        }
        shapes.sort();
        shapes
            .into_iter()
            .map(|(vcpu, memory_mb)| {
                let s = state.shapes.get(&(vcpu, memory_mb));
                PoolShapeStatus {
                    shape: format!("{vcpu}x{memory_mb}"),
                    vcpu,
                    memory_mb,
                    target: targets.get(&(vcpu, memory_mb)).copied().unwrap_or(0),
                    ready: s.map_or(0, |s| s.ready.len()),
                    starting: s.map_or(0, |s| s.starting),
                }
            })
            .collect()
    }
}

impl Service {
    /// `GET /v1/pool`: configured size, ready and booting members per shape.
    pub fn pool_status(&self) -> Vec<PoolShapeStatus> {
        self.pool.status()
    }

    /// The shapes fresh sandboxes may have on this node (`--shapes`), in grid order.
    pub fn shapes(&self) -> Vec<sbx_api_types::ShapeInfo> {
        self.config
            .shapes
            .iter()
            .map(|&(vcpu, memory_mb)| sbx_api_types::ShapeInfo { vcpu, memory_mb })
            .collect()
    }

    /// Boots members until every shape has its configured size (ready +
    /// starting). Call after [`Service::reconcile`]; create calls it after
    /// each assignment.
    pub fn refill_pool(self: &Arc<Self>) {
        // The admission check reads the store, so it runs in a task of its own.
        let this = self.clone();
        tokio::spawn(async move { this.refill_pool_now().await });
    }

    async fn refill_pool_now(self: &Arc<Self>) {
        for member in self.pool.take_surplus() {
            self.discard_member(member);
        }
        loop {
            let turn = self.admission_turn().await;
            let Some(shape) = self.pool.reserve_one() else {
                return;
            };
            // Admission: the reserved start already counts as pool usage.
            if let Err(e) = self.pool_fits().await {
                self.pool.finish_start(shape, None);
                drop(turn);
                self.retry_refill_later(&e);
                return;
            }
            drop(turn);
            let this = self.clone();
            tokio::spawn(async move {
                let member = this.start_member(shape).await;
                let failed = member.is_none();
                if failed {
                    // Keep the slot reserved for a while: no hot loop of failing starts.
                    tokio::time::sleep(RETRY_AFTER_FAILURE).await;
                }
                this.pool.finish_start(shape, member);
                if failed {
                    this.refill_pool();
                }
            });
        }
    }

    /// The node is full: tries the refill again later (one timer at a time).
    fn retry_refill_later(self: &Arc<Self>, why: &super::ServiceError) {
        if self.pool.retry_scheduled.swap(true, Ordering::SeqCst) {
            return;
        }
        tracing::info!(reason = %why, "warm pool refill postponed");
        let this = self.clone();
        tokio::spawn(async move {
            tokio::time::sleep(RETRY_AFTER_FAILURE).await;
            this.pool.retry_scheduled.store(false, Ordering::SeqCst);
            this.refill_pool();
        });
    }

    async fn start_member(&self, (vcpu, memory_mb): Shape) -> Option<Member> {
        let id = Uuid::new_v4();
        let spec = SandboxSpec {
            id,
            vcpu,
            memory_mb,
            volumes: Vec::new(),
            rootfs: None,
        };
        let started =
            tokio::time::timeout(self.config.limits.start_timeout, self.runtime.start(spec)).await;
        match started {
            Ok(Ok(conn)) => {
                tracing::debug!(member = %id, vcpu, memory_mb, "warm pool member ready");
                Some(Member { id, conn })
            }
            other => {
                let reason = match other {
                    Ok(Err(e)) => e.to_string(),
                    _ => "did not start in time".to_string(),
                };
                tracing::warn!(member = %id, vcpu, memory_mb, %reason, "warm pool member failed to start");
                if let Err(e) = self.runtime.destroy(id).await {
                    tracing::error!(member = %id, error = %e, "removing failed warm pool member");
                }
                None
            }
        }
    }

    /// Takes a live ready member of the shape, if any; dead ones are removed.
    pub(super) async fn take_member(self: &Arc<Self>, shape: Shape) -> Option<Member> {
        // Read before the take: a miss may make the shape wanted.
        let wanted = self.pool.wanted(shape);
        let member = self.take_live_member(shape).await;
        // Only shapes with a pool count: without one every create boots cold by design.
        if wanted {
            sbx_metrics::global().warm_pool_claim(member.is_some());
        }
        if member.is_none() {
            self.pool.record_miss(shape);
            self.refill_pool();
        }
        member
    }

    async fn take_live_member(self: &Arc<Self>, shape: Shape) -> Option<Member> {
        while let Some(member) = self.pool.pop(shape) {
            let alive = !member.conn.is_closed()
                && matches!(
                    tokio::time::timeout(TAKE_PING_TIMEOUT, member.conn.call(Request::Ping)).await,
                    Ok(Ok((Reply::Pong, _)))
                );
            if alive {
                return Some(member);
            }
            tracing::warn!(member = %member.id, "warm pool member died while waiting; removing it");
            self.discard_member(member);
            self.refill_pool();
        }
        None
    }

    /// The ready members of every shape: their ids and connections.
    pub(super) fn pool_members(&self) -> Vec<(Uuid, AgentConn)> {
        self.pool.members()
    }

    /// Returns a member a create did not use (its name was held), untouched.
    pub(super) fn return_member(self: &Arc<Self>, shape: Shape, member: Member) {
        if let Some(extra) = self.pool.put_back(shape, member) {
            self.discard_member(extra);
        }
    }

    /// Every [`MAINTENANCE_EVERY`]: empties the pool while host memory is
    /// short (`MemAvailable` under `--memory-reserve-mb`), drops members of
    /// shapes no longer wanted, refills the rest. Runs until the process ends.
    pub async fn pool_maintenance(self: Arc<Self>) {
        let mut tick = tokio::time::interval(MAINTENANCE_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let low = mem_available_mb()
                .is_some_and(|free| free < self.config.capacity.memory_reserve_mb);
            if low {
                let members = self.pool.empty_for_pressure();
                if !members.is_empty() {
                    tracing::info!(
                        members = members.len(),
                        "host memory is short: warm pool emptied for a while"
                    );
                }
                for member in members {
                    self.discard_member(member);
                }
            }
            self.refill_pool();
        }
    }

    /// Gives the node to real work: removes one ready member (destroyed in
    /// the background; its share is free at once). `false`: none left.
    pub(super) fn evict_member(self: &Arc<Self>) -> bool {
        match self.pool.evict_one() {
            Some(member) => {
                tracing::info!(member = %member.id, "warm pool member evicted for a create");
                self.discard_member(member);
                true
            }
            None => false,
        }
    }

    fn discard_member(self: &Arc<Self>, member: Member) {
        let this = self.clone();
        tokio::spawn(async move {
            drop(member.conn);
            if let Err(e) = this.runtime.destroy(member.id).await {
                tracing::error!(member = %member.id, error = %e, "removing warm pool member");
            }
        });
    }
}

/// The host's `MemAvailable`, MiB.
fn mem_available_mb() -> Option<u64> {
    let info = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = info.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reserve_never_exceeds_the_target() {
        let fixed = WarmPool::Fixed(BTreeMap::from([((1, 1024), 2), ((2, 2048), 1)]));
        let pool = Pool::new(&fixed, &[(1, 1024), (2, 2048)], 8192);
        let first = pool.reserve();
        assert_eq!(first, vec![(1, 1024), (1, 1024), (2, 2048)]);
        assert!(pool.reserve().is_empty(), "starting members count");
        pool.finish_start((1, 1024), None);
        assert_eq!(pool.reserve(), vec![(1, 1024)]);
        let st = pool.status();
        assert_eq!(st[0].shape, "1x1024");
        assert_eq!((st[0].target, st[0].ready, st[0].starting), (2, 0, 2));
        assert!(pool.pop((1, 1024)).is_none());
        assert!(pool.pop((4, 4096)).is_none());
    }

    #[test]
    fn auto_reserves_within_its_overall_cap_and_a_miss_adds_a_shape() {
        let shapes = [(1, 1024), (2, 2048)];
        let pool = Pool::new(&WarmPool::Auto, &shapes, 8192);
        assert_eq!(pool.reserve(), vec![(1, 1024)]);
        assert!(pool.wanted((1, 1024)) && !pool.wanted((2, 2048)));
        pool.record_miss((2, 2048));
        assert_eq!(pool.reserve(), vec![(2, 2048)], "the missed shape");
        // A quarter of 8 GiB in 1 GiB members is 2: a third miss adds nothing.
        pool.record_miss((1, 1024));
        assert!(pool.reserve().is_empty());
        let st = pool.status();
        assert_eq!(
            st.iter()
                .map(|s| (s.shape.as_str(), s.target, s.starting))
                .collect::<Vec<_>>(),
            vec![("1x1024", 2, 1), ("2x2048", 1, 1)]
        );
    }
}
