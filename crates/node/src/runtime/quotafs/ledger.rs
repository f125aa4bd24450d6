//! The quota's accounting: bytes of regular files against a limit.
//!
//! Pure bookkeeping, no I/O: the filesystem asks it before an operation
//! that may grow a file and tells it what the operation really did after.

/// A refused growth: it would take the volume past its limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the volume is full: {wanted} more bytes wanted, {free} free")]
pub struct Full {
    /// Bytes the operation would add.
    pub wanted: u64,
    /// Bytes left under the limit.
    pub free: u64,
}

/// Bytes in use against a limit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ledger {
    limit: u64,
    used: u64,
}

impl Ledger {
    /// A ledger for `limit` bytes of which `used` are already taken (what
    /// the walk of the volume at mount found; it may exceed the limit when
    /// other nodes wrote past it, then only shrinking is allowed).
    pub fn new(limit: u64, used: u64) -> Self {
        Ledger { limit, used }
    }

    /// The limit, bytes.
    pub fn limit(&self) -> u64 {
        self.limit
    }

    /// Bytes in use.
    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used
    }

    /// Bytes left under the limit (0 when over it).
    pub fn free(&self) -> u64 {
        self.limit.saturating_sub(self.used)
    }

    /// A file goes from `old` to `new` bytes: growth is refused whole when
    /// it does not fit (a partial write would leave a caller with a short
    /// count it may not expect), shrinking always succeeds.
    pub fn resize(&mut self, old: u64, new: u64) -> Result<(), Full> {
        if new <= old {
            self.release(old - new);
            return Ok(());
        }
        let wanted = new - old;
        if wanted > self.free() {
            return Err(Full {
                wanted,
                free: self.free(),
            });
        }
        self.used += wanted;
        Ok(())
    }

    /// Records a change already made on disk (the outcome of an operation
    /// that was charged for something else, or that failed half-way): never
    /// refused, since the bytes are there whatever the ledger says.
    pub fn record(&mut self, old: u64, new: u64) {
        if new >= old {
            self.used = self.used.saturating_add(new - old);
        } else {
            self.release(old - new);
        }
    }

    /// `bytes` were freed (a file removed or replaced).
    pub fn release(&mut self, bytes: u64) {
        self.used = self.used.saturating_sub(bytes);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn growth_fits_up_to_the_limit_and_not_a_byte_past() {
        let mut l = Ledger::new(100, 0);
        assert_eq!(l.resize(0, 60), Ok(()));
        assert_eq!(l.resize(0, 40), Ok(()));
        assert_eq!(l.used(), 100);
        assert_eq!(l.free(), 0);
        assert_eq!(l.resize(40, 41), Err(Full { wanted: 1, free: 0 }));
        assert_eq!(l.used(), 100, "a refused growth charges nothing");
    }

    #[test]
    fn a_write_that_does_not_fit_is_refused_whole() {
        let mut l = Ledger::new(100, 90);
        assert_eq!(
            l.resize(10, 30),
            Err(Full {
                wanted: 20,
                free: 10
            })
        );
        assert_eq!(l.used(), 90);
        assert_eq!(l.resize(10, 20), Ok(()));
        assert_eq!(l.used(), 100);
    }

    #[test]
    fn shrinking_and_removing_give_bytes_back() {
        let mut l = Ledger::new(100, 100);
        assert_eq!(l.resize(50, 20), Ok(()));
        assert_eq!(l.used(), 70);
        l.release(20);
        assert_eq!(l.used(), 50);
        l.release(1000);
        assert_eq!(l.used(), 0, "never below zero");
    }

    #[test]
    fn over_the_limit_at_mount_only_shrinks() {
        // Two nodes wrote at once: the walk found more than the limit.
        let mut l = Ledger::new(100, 150);
        assert_eq!(l.free(), 0);
        assert!(l.resize(0, 1).is_err());
        assert_eq!(l.resize(60, 0), Ok(()));
        assert_eq!(l.used(), 90);
        assert_eq!(l.resize(0, 10), Ok(()));
    }

    #[test]
    fn record_takes_what_happened_even_past_the_limit() {
        let mut l = Ledger::new(100, 95);
        l.record(0, 10);
        assert_eq!(l.used(), 105);
        l.record(10, 0);
        assert_eq!(l.used(), 95);
    }
}
