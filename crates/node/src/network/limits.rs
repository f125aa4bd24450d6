//! What a guest can make the broker hold, bounded: dials in flight, open
//! tunnels, bytes buffered towards remote hosts, host lookups (rate and
//! concurrency), per sandbox and for the whole daemon.
//!
//! The figures (constants; issue #23):
//! * [`MAX_DIALS`] dials in flight (resolving or connecting) per sandbox, and
//!   [`MAX_TUNNELS`] connections per sandbox, dials included: each holds one
//!   descriptor, so one sandbox holds at most 512 sockets however it floods.
//! * [`MAX_SOCKETS`] broker sockets for the whole daemon (a third of the
//!   20,000 descriptors sbxd runs with), so many sandboxes together still
//!   leave descriptors for the API, the agents and the disks.
//! * [`MAX_BUFFERED_BYTES`] of guest data waiting for slow remote hosts per
//!   sandbox (each connection is also bounded by its credit window).
//! * DNS: [`DNS_RATE_PER_SEC`] host lookups per second per sandbox with
//!   bursts of [`DNS_BURST`] (a token bucket shared by the guest's DNS queries
//!   and its dials to names, which look a name up too), at most [`MAX_LOOKUPS_PER_SANDBOX`] host
//!   lookups at once per sandbox and [`MAX_LOOKUPS`] for the whole daemon, well
//!   under tokio's 512 blocking threads (every lookup is a blocking
//!   `getaddrinfo`; its permits are held until that call returns, even after
//!   the broker stopped waiting for it).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// Dials in flight per sandbox.
pub const MAX_DIALS: usize = 64;
/// Proxied connections per sandbox, dials in flight included.
pub const MAX_TUNNELS: usize = 512;
/// Broker sockets (dials and tunnels) for the whole daemon.
pub const MAX_SOCKETS: usize = 6144;
/// Guest bytes buffered towards remote hosts per sandbox.
pub const MAX_BUFFERED_BYTES: usize = 64 * 1024 * 1024;
/// DNS queries per second per sandbox (sustained).
pub const DNS_RATE_PER_SEC: u32 = 50;
/// DNS queries a sandbox may make at once after a quiet spell.
pub const DNS_BURST: u32 = 100;
/// Host lookups in progress per sandbox (DNS queries and dials to names).
pub const MAX_LOOKUPS_PER_SANDBOX: usize = 16;
/// Host lookups in progress for the whole daemon.
pub const MAX_LOOKUPS: usize = 64;

/// Why a guest's request was refused by a limit (the reason counted and shown).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum LimitError {
    /// [`MAX_DIALS`] reached.
    #[error("too-many-dials")]
    Dials,
    /// [`MAX_TUNNELS`] reached.
    #[error("too-many-connections")]
    Tunnels,
    /// [`MAX_SOCKETS`] reached.
    #[error("daemon-connection-limit")]
    Sockets,
    /// The sandbox's DNS token bucket is empty.
    #[error("dns-rate-limit")]
    DnsRate,
    /// [`MAX_LOOKUPS_PER_SANDBOX`] lookups are in progress.
    #[error("dns-concurrency")]
    DnsBusy,
}

impl LimitError {
    /// The reason as counters and logs show it.
    pub fn reason(self) -> &'static str {
        match self {
            LimitError::Dials => "too-many-dials",
            LimitError::Tunnels => "too-many-connections",
            LimitError::Sockets => "daemon-connection-limit",
            LimitError::DnsRate => "dns-rate-limit",
            LimitError::DnsBusy => "dns-concurrency",
        }
    }
}

/// A token bucket: `rate` tokens a second, at most `burst` saved up.
#[derive(Debug)]
pub struct TokenBucket {
    rate: f64,
    burst: f64,
    tokens: f64,
    at: Instant,
}

impl TokenBucket {
    /// A full bucket.
    pub fn new(rate: u32, burst: u32, now: Instant) -> TokenBucket {
        TokenBucket {
            rate: f64::from(rate),
            burst: f64::from(burst),
            tokens: f64::from(burst),
            at: now,
        }
    }

    /// Takes one token at `now`; false when the bucket is empty.
    pub fn take(&mut self, now: Instant) -> bool {
        let elapsed = now.saturating_duration_since(self.at).as_secs_f64();
        self.tokens = (self.tokens + elapsed * self.rate).min(self.burst);
        self.at = self.at.max(now);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
}

/// Daemon-wide limits, shared by every sandbox's broker.
#[derive(Debug)]
pub struct GlobalLimits {
    /// Broker sockets.
    pub sockets: Arc<Semaphore>,
    /// Host lookups in progress.
    pub lookups: Arc<Semaphore>,
}

impl Default for GlobalLimits {
    fn default() -> Self {
        GlobalLimits::with_caps(MAX_SOCKETS, MAX_LOOKUPS)
    }
}

impl GlobalLimits {
    /// Other caps (tests).
    pub fn with_caps(sockets: usize, lookups: usize) -> GlobalLimits {
        GlobalLimits {
            sockets: Arc::new(Semaphore::new(sockets)),
            lookups: Arc::new(Semaphore::new(lookups)),
        }
    }
}

/// One sandbox's limits (shared by its successive `net_serve` streams).
#[derive(Debug)]
pub struct SandboxLimits {
    dials: Arc<Semaphore>,
    tunnels: Arc<Semaphore>,
    lookups: Arc<Semaphore>,
    dns: Mutex<TokenBucket>,
    buffered: AtomicUsize,
    max_buffered: usize,
}

impl Default for SandboxLimits {
    fn default() -> Self {
        SandboxLimits::with_caps(MAX_DIALS, MAX_TUNNELS, MAX_BUFFERED_BYTES)
    }
}

/// What one admitted connection holds until it ends: its tunnel slot, its
/// daemon-wide socket slot and (while dialling) its dial slot.
#[derive(Debug)]
pub struct ConnPermits {
    /// Released once the dial is over (connected or failed).
    pub dial: Option<OwnedSemaphorePermit>,
    _tunnel: OwnedSemaphorePermit,
    _socket: OwnedSemaphorePermit,
}

/// A host lookup's slots, held by the blocking `getaddrinfo` until it returns.
#[derive(Debug)]
pub struct LookupPermits {
    _sandbox: OwnedSemaphorePermit,
    _global: OwnedSemaphorePermit,
}

impl SandboxLimits {
    /// Other caps (tests); DNS figures stay the defaults.
    pub fn with_caps(dials: usize, tunnels: usize, buffered: usize) -> SandboxLimits {
        SandboxLimits {
            dials: Arc::new(Semaphore::new(dials)),
            tunnels: Arc::new(Semaphore::new(tunnels)),
            lookups: Arc::new(Semaphore::new(MAX_LOOKUPS_PER_SANDBOX)),
            dns: Mutex::new(TokenBucket::new(
                DNS_RATE_PER_SEC,
                DNS_BURST,
                Instant::now(),
            )),
            buffered: AtomicUsize::new(0),
            max_buffered: buffered,
        }
    }

    /// Admits one more connection, or says which cap it hit. Never waits.
    pub fn admit(&self, global: &GlobalLimits) -> Result<ConnPermits, LimitError> {
        let dial = Arc::clone(&self.dials)
            .try_acquire_owned()
            .map_err(|_| LimitError::Dials)?;
        let tunnel = Arc::clone(&self.tunnels)
            .try_acquire_owned()
            .map_err(|_| LimitError::Tunnels)?;
        let socket = Arc::clone(&global.sockets)
            .try_acquire_owned()
            .map_err(|_| LimitError::Sockets)?;
        Ok(ConnPermits {
            dial: Some(dial),
            _tunnel: tunnel,
            _socket: socket,
        })
    }

    /// One token of the sandbox's lookup rate, taken by every DNS query and
    /// every dial to a name (both make sbxd look a name up). Never waits.
    pub fn dns_token(&self, now: Instant) -> Result<(), LimitError> {
        let token = self.dns.lock().unwrap_or_else(|p| p.into_inner()).take(now);
        if token {
            Ok(())
        } else {
            Err(LimitError::DnsRate)
        }
    }

    /// A DNS query from the guest's responder: a token, then a lookup slot. Never waits.
    pub fn dns_query(&self, now: Instant) -> Result<OwnedSemaphorePermit, LimitError> {
        self.dns_token(now)?;
        Arc::clone(&self.lookups)
            .try_acquire_owned()
            .map_err(|_| LimitError::DnsBusy)
    }

    /// A lookup slot for a dial to a name (its token already taken): waits
    /// (dials in flight are capped already).
    pub async fn dial_lookup(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.lookups).acquire_owned().await.ok()
    }

    /// Reserves room for `n` more buffered bytes; false past [`MAX_BUFFERED_BYTES`].
    pub fn reserve_buffer(&self, n: usize) -> bool {
        self.buffered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                b.checked_add(n).filter(|t| *t <= self.max_buffered)
            })
            .is_ok()
    }

    /// Gives back `n` buffered bytes.
    pub fn release_buffer(&self, n: usize) {
        let _ = self
            .buffered
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |b| {
                Some(b.saturating_sub(n))
            });
    }

    /// Bytes buffered now (tests).
    pub fn buffered(&self) -> usize {
        self.buffered.load(Ordering::Acquire)
    }
}

/// Takes the daemon-wide lookup slot (waiting at most `wait`) and bundles it
/// with the sandbox's, so both go to the blocking call.
pub async fn lookup_permits(
    sandbox: OwnedSemaphorePermit,
    global: &GlobalLimits,
    wait: Duration,
) -> Option<LookupPermits> {
    let global = tokio::time::timeout(wait, Arc::clone(&global.lookups).acquire_owned())
        .await
        .ok()?
        .ok()?;
    Some(LookupPermits {
        _sandbox: sandbox,
        _global: global,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_bucket_allows_a_burst_then_the_rate() {
        let t0 = Instant::now();
        let mut b = TokenBucket::new(50, 100, t0);
        let granted = (0..150).filter(|_| b.take(t0)).count();
        assert_eq!(granted, 100, "the burst");
        assert!(!b.take(t0));
        // 100 ms later: 5 more tokens.
        let t1 = t0 + Duration::from_millis(100);
        assert_eq!((0..20).filter(|_| b.take(t1)).count(), 5);
        // A long quiet spell refills to the burst, not beyond.
        let t2 = t1 + Duration::from_secs(3600);
        assert_eq!((0..500).filter(|_| b.take(t2)).count(), 100);
        // Time going backwards (another thread's older `now`) grants nothing extra.
        assert!(!b.take(t1));
        // One second at the sustained rate.
        let t3 = t2 + Duration::from_secs(1);
        assert_eq!((0..500).filter(|_| b.take(t3)).count(), 50);
    }

    #[test]
    fn sandbox_dns_queries_are_rate_limited_and_concurrency_capped() {
        let l = SandboxLimits::default();
        let now = Instant::now();
        let mut held = Vec::new();
        for _ in 0..MAX_LOOKUPS_PER_SANDBOX {
            held.push(l.dns_query(now).expect("within the burst"));
        }
        assert_eq!(l.dns_query(now).unwrap_err(), LimitError::DnsBusy);
        held.clear();
        let mut ok = MAX_LOOKUPS_PER_SANDBOX + 1;
        while l.dns_query(now).is_ok() {
            ok += 1;
        }
        assert_eq!(ok, DNS_BURST as usize);
        assert_eq!(l.dns_query(now).unwrap_err(), LimitError::DnsRate);
    }

    #[test]
    fn connections_are_capped_per_sandbox_and_per_daemon() {
        let global = GlobalLimits::with_caps(5, 1);
        let a = SandboxLimits::with_caps(2, 3, 1024);
        let mut p1 = a.admit(&global).unwrap();
        let _p2 = a.admit(&global).unwrap();
        assert_eq!(a.admit(&global).unwrap_err(), LimitError::Dials);
        // A finished dial frees its dial slot; the tunnel slot stays taken.
        p1.dial = None;
        let _p3 = a.admit(&global).unwrap();
        assert_eq!(a.admit(&global).unwrap_err(), LimitError::Dials);
        let b = SandboxLimits::with_caps(10, 10, 1024);
        let _b1 = b.admit(&global).unwrap();
        let _b2 = b.admit(&global).unwrap();
        assert_eq!(b.admit(&global).unwrap_err(), LimitError::Sockets);
        drop(p1);
        let c = SandboxLimits::with_caps(10, 10, 1024);
        assert!(c.admit(&global).is_ok());
        let t = SandboxLimits::with_caps(10, 1, 1024);
        let _t1 = t.admit(&GlobalLimits::default()).unwrap();
        assert_eq!(
            t.admit(&GlobalLimits::default()).unwrap_err(),
            LimitError::Tunnels
        );
    }

    #[test]
    fn buffered_bytes_are_bounded() {
        let l = SandboxLimits::with_caps(1, 1, 100);
        assert!(l.reserve_buffer(60));
        assert!(!l.reserve_buffer(41));
        assert!(l.reserve_buffer(40));
        l.release_buffer(100);
        assert_eq!(l.buffered(), 0);
        assert!(!l.reserve_buffer(usize::MAX));
    }
}
