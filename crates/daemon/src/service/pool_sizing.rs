//! How many warm members each shape should have: fixed by `--warm-pool
//! SHAPE=N`, or, by default, sized by sbxd so that a new user's first creates
//! are warm without any configuration.
//!
//! Auto sizing: one member of the smallest offered shape the node can hold;
//! a shape whose create found no member (a miss) gets one member for
//! [`DEMAND_WINDOW`] after its last miss, the base shape a second one; all
//! auto members together hold at most a quarter of the node's memory (at
//! least one member). Under host memory pressure every target is zero for
//! [`PRESSURE_HOLD`]. Pure: the caller passes the time.

use super::pool::Shape;
use crate::config::WarmPool;
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a miss keeps its shape's extra member wanted.
pub const DEMAND_WINDOW: Duration = Duration::from_secs(600);
/// How long the pool stays empty after host memory ran low.
pub const PRESSURE_HOLD: Duration = Duration::from_secs(60);

/// The sizing policy and its recent inputs (misses, pressure).
#[derive(Debug)]
pub struct Sizing {
    policy: Policy,
    /// Last miss per shape (auto only).
    misses: BTreeMap<Shape, Instant>,
    /// No members until then (memory pressure).
    pressure_until: Option<Instant>,
}

#[derive(Debug)]
enum Policy {
    Fixed(BTreeMap<Shape, usize>),
    Auto {
        /// The smallest offered shape that fits the node; `None`: none fits.
        base: Option<Shape>,
        /// Most auto members at once, all shapes together.
        max_members: usize,
    },
}

impl Sizing {
    /// The policy of `setting` for a node offering `shapes` with
    /// `capacity_mb` of memory for sandboxes.
    pub fn new(setting: &WarmPool, shapes: &[Shape], capacity_mb: u64) -> Sizing {
        let policy = match setting {
            WarmPool::Fixed(targets) => Policy::Fixed(targets.clone()),
            WarmPool::Auto => {
                let base = shapes
                    .iter()
                    .copied()
                    .filter(|&(_, mem)| u64::from(mem) <= capacity_mb)
                    .min_by_key(|&(vcpu, mem)| (mem, vcpu));
                let max_members = base.map_or(0, |(_, mem)| {
                    ((capacity_mb / 4) / u64::from(mem).max(1)).max(1) as usize
                });
                Policy::Auto { base, max_members }
            }
        };
        Sizing {
            policy,
            misses: BTreeMap::new(),
            pressure_until: None,
        }
    }

    /// Whether sbxd sizes the pool (`--warm-pool auto`, the default).
    pub fn is_auto(&self) -> bool {
        matches!(self.policy, Policy::Auto { .. })
    }

    /// A create of `shape` found no member: in auto mode the shape is wanted.
    pub fn record_miss(&mut self, shape: Shape, now: Instant) {
        if self.is_auto() {
            self.misses.insert(shape, now);
        }
    }

    /// Host memory ran low: no members for a while.
    pub fn record_pressure(&mut self, now: Instant) {
        self.pressure_until = Some(now + PRESSURE_HOLD);
    }

    /// Whether the pool is held empty for memory pressure.
    pub fn under_pressure(&self, now: Instant) -> bool {
        self.pressure_until.is_some_and(|until| now < until)
    }

    /// Most members of all shapes together (`None`: no overall cap).
    pub fn max_members(&self) -> Option<usize> {
        match self.policy {
            Policy::Fixed(_) => None,
            Policy::Auto { max_members, .. } => Some(max_members),
        }
    }

    /// Targets per shape now, in the order members are booted (shapes with 0 left out).
    pub fn targets(&mut self, now: Instant) -> BTreeMap<Shape, usize> {
        if self.under_pressure(now) {
            return BTreeMap::new();
        }
        self.pressure_until = None;
        match &self.policy {
            Policy::Fixed(targets) => targets.clone(),
            Policy::Auto { base, .. } => {
                self.misses
                    .retain(|_, at| now.saturating_duration_since(*at) < DEMAND_WINDOW);
                let mut out = BTreeMap::new();
                if let Some(base) = base {
                    out.insert(*base, 1);
                }
                for shape in self.misses.keys() {
                    *out.entry(*shape).or_insert(0) += 1;
                }
                out
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GRID: [Shape; 3] = [(1, 1024), (2, 2048), (4, 4096)];

    #[test]
    fn fixed_is_what_was_asked() {
        let fixed = BTreeMap::from([((2, 2048), 3)]);
        let mut s = Sizing::new(&WarmPool::Fixed(fixed.clone()), &GRID, 8192);
        let now = Instant::now();
        s.record_miss((1, 1024), now);
        assert_eq!(s.targets(now), fixed);
        assert_eq!(s.max_members(), None);
    }

    #[test]
    fn auto_keeps_one_of_the_smallest_shape_that_fits() {
        let now = Instant::now();
        let mut s = Sizing::new(&WarmPool::Auto, &GRID, 8192);
        assert_eq!(s.targets(now), BTreeMap::from([((1, 1024), 1)]));
        assert_eq!(
            s.max_members(),
            Some(2),
            "a quarter of 8 GiB in 1 GiB members"
        );
        // Narrowed shapes: the smallest offered one.
        let mut s = Sizing::new(&WarmPool::Auto, &[(2, 2048), (4, 4096)], 8192);
        assert_eq!(s.targets(now), BTreeMap::from([((2, 2048), 1)]));
        // A small node still gets one member; a node holding no shape none.
        assert_eq!(
            Sizing::new(&WarmPool::Auto, &GRID, 1024).max_members(),
            Some(1)
        );
        let mut none = Sizing::new(&WarmPool::Auto, &[(4, 4096)], 2048);
        assert!(none.targets(now).is_empty());
    }

    #[test]
    fn misses_add_a_member_for_a_while() {
        let t0 = Instant::now();
        let mut s = Sizing::new(&WarmPool::Auto, &GRID, 16384);
        s.record_miss((2, 2048), t0);
        s.record_miss((1, 1024), t0);
        assert_eq!(
            s.targets(t0 + Duration::from_secs(1)),
            BTreeMap::from([((1, 1024), 2), ((2, 2048), 1)])
        );
        let later = t0 + DEMAND_WINDOW;
        assert_eq!(s.targets(later), BTreeMap::from([((1, 1024), 1)]));
    }

    #[test]
    fn memory_pressure_empties_the_pool_for_a_while() {
        let t0 = Instant::now();
        let mut s = Sizing::new(&WarmPool::Auto, &GRID, 8192);
        s.record_pressure(t0);
        assert!(s.under_pressure(t0));
        assert!(s.targets(t0 + Duration::from_secs(1)).is_empty());
        assert_eq!(
            s.targets(t0 + PRESSURE_HOLD),
            BTreeMap::from([((1, 1024), 1)])
        );
    }
}
