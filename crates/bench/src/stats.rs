//! Samples, percentiles and the markdown table.

use std::time::Duration;

/// Why one side of a row has no numbers.
#[derive(Debug, Clone, PartialEq)]
pub enum Failure {
    /// The server does not offer the operation (501, 503 `not_implemented`
    /// or `compute_unavailable`, or a route 404).
    Unsupported(String),
    /// The operation failed.
    Error(String),
    /// Not measured (no equivalent, or a prerequisite failed).
    Skipped(String),
    /// Not measurable with this server's configuration; shown as `n/a (<why>)`.
    NotAvailable(String),
}

/// The measurements of one side (sbx or raw runsc) of one scenario.
#[derive(Debug, Clone, Default)]
pub struct Side {
    /// Durations in milliseconds, in measurement order.
    pub ms: Vec<f64>,
    /// Set when the side stopped early or never ran.
    pub failure: Option<Failure>,
    /// (answered, asked) for rows that count answers (density); shown
    /// after the p50.
    pub answered: Option<(usize, usize)>,
}

impl Side {
    /// A side that was not measured.
    pub fn skipped(why: impl Into<String>) -> Self {
        Side {
            failure: Some(Failure::Skipped(why.into())),
            ..Side::default()
        }
    }

    /// A side that failed before its first sample.
    pub fn failed(e: &anyhow::Error) -> Self {
        let mut s = Side::default();
        s.fail(e);
        s
    }

    /// Whether more iterations should run.
    pub fn active(&self) -> bool {
        self.failure.is_none()
    }

    /// Records the failure `e` (classified); later iterations are skipped.
    pub fn fail(&mut self, e: &anyhow::Error) {
        self.failure = Some(classify(e));
    }

    /// Records the outcome of iteration `i`; the first `warmup` iterations
    /// only count when they fail.
    pub fn take(&mut self, i: usize, warmup: usize, r: anyhow::Result<Duration>) {
        match r {
            Ok(d) if i >= warmup => self.ms.push(d.as_secs_f64() * 1000.0),
            Ok(_) => {}
            Err(e) => {
                eprintln!("  ! {e:#}");
                self.fail(&e);
            }
        }
    }

    /// Nearest-rank percentile `p` (0–100) in ms, if there are samples.
    pub fn pct(&self, p: f64) -> Option<f64> {
        percentile(&self.ms, p)
    }

    /// Mean of the samples, if any.
    pub fn mean(&self) -> Option<f64> {
        mean(&self.ms)
    }
}

/// Arithmetic mean.
pub fn mean(samples: &[f64]) -> Option<f64> {
    (!samples.is_empty()).then(|| samples.iter().sum::<f64>() / samples.len() as f64)
}

/// Marker error: the server does not implement an operation.
#[derive(Debug)]
pub struct Unsupported(pub String);

impl std::fmt::Display for Unsupported {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "not offered by the server: {}", self.0)
    }
}

impl std::error::Error for Unsupported {}

fn classify(e: &anyhow::Error) -> Failure {
    match e.downcast_ref::<Unsupported>() {
        Some(u) => Failure::Unsupported(u.0.clone()),
        None => Failure::Error(format!("{e:#}")),
    }
}

/// Nearest-rank percentile of unsorted samples.
pub fn percentile(samples: &[f64], p: f64) -> Option<f64> {
    if samples.is_empty() {
        return None;
    }
    let mut v = samples.to_vec();
    v.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * v.len() as f64).ceil() as usize;
    Some(v[rank.clamp(1, v.len()) - 1])
}

/// What a row measures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Kind {
    /// Time per operation; lower is better.
    Latency,
    /// Bytes moved per operation; shown as MB/s (10^6 bytes), higher is better.
    Throughput { bytes: u64 },
    /// Memory: the samples are MiB (not ms); lower is better.
    Mib,
    /// Host CPU: the samples are % of one core (not ms); lower is better.
    CorePct,
}

/// The goal a row is checked against.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Target {
    /// No goal.
    None,
    /// sbx p50 ≤ factor × raw p50 (latency rows).
    RatioAtMost(f64),
    /// sbx p50 throughput ≥ this many MB/s.
    MinMbps(f64),
    /// sbx p99 < this many ms (latency rows).
    P99Below(f64),
    /// sbx p99 ≤ factor × raw p99 (latency rows).
    P99RatioAtMost(f64),
    /// sbx p50 < this many ms (latency rows).
    P50Below(f64),
    /// Mean of the sbx samples ≤ this many MiB (memory rows).
    MeanMibAtMost(f64),
    /// Mean of the sbx samples ≤ this many % of a core (CPU rows).
    MeanPctAtMost(f64),
    /// Every one of this many sbx sandboxes answered ([`Side::answered`]).
    AllAnswer(usize),
}

/// One table row.
#[derive(Debug, Clone)]
pub struct Row {
    /// Scenario name.
    pub name: String,
    /// Latency or throughput.
    pub kind: Kind,
    /// sbxd over HTTP.
    pub sbx: Side,
    /// The same operation with raw runsc.
    pub raw: Side,
    /// Goal.
    pub target: Target,
}

impl Row {
    /// A row with empty sides.
    pub fn new(name: &str, kind: Kind, target: Target) -> Self {
        Row {
            name: name.to_string(),
            kind,
            sbx: Side::default(),
            raw: Side::default(),
            target,
        }
    }

    fn value(&self, ms: f64) -> f64 {
        match self.kind {
            Kind::Latency | Kind::Mib | Kind::CorePct => ms,
            Kind::Throughput { bytes } => mbps(bytes, ms),
        }
    }

    fn cell(&self, side: &Side, p: f64) -> String {
        if let Some(ms) = side.pct(p) {
            let v = self.value(ms);
            let mut s = match self.kind {
                Kind::Latency => fmt_ms(v),
                Kind::Throughput { .. } => format!("{v:.0} MB/s ({})", fmt_ms(ms)),
                Kind::Mib => format!("{v:.1} MiB"),
                Kind::CorePct => format!("{v:.2} %"),
            };
            if p == 50.0 {
                if let Some((a, n)) = side.answered {
                    s.push_str(&format!(" ({a}/{n} answered)"));
                }
            }
            return if side.failure.is_some() {
                format!("{s} (partial)")
            } else {
                s
            };
        }
        if let (50.0, Some((a, n))) = (p, side.answered) {
            return format!("— ({a}/{n} answered)");
        }
        // Why there is no number is told once, in the p50 cell.
        if p != 50.0 {
            return "—".into();
        }
        match &side.failure {
            Some(Failure::Unsupported(code)) => format!("n/a (server: {code})"),
            Some(Failure::Error(_)) => "error (see notes)".into(),
            Some(Failure::Skipped(why)) => format!("— ({why})"),
            Some(Failure::NotAvailable(why)) => format!("n/a ({why})"),
            None => "—".into(),
        }
    }

    /// sbx/raw of the displayed p50 quantity (time for latency rows,
    /// MB/s for throughput rows).
    pub fn ratio(&self) -> Option<f64> {
        let s = self.value(self.sbx.pct(50.0)?);
        let r = self.value(self.raw.pct(50.0)?);
        (r > 0.0).then(|| s / r)
    }

    fn target_text(&self) -> String {
        match self.target {
            Target::None => "—".into(),
            Target::RatioAtMost(f) => format!("sbx p50 ≤ {f}× raw"),
            Target::MinMbps(m) => format!("≥ {m:.0} MB/s"),
            Target::P99Below(ms) => format!("sbx p99 < {ms} ms"),
            Target::P99RatioAtMost(f) => match (self.sbx.pct(99.0), self.raw.pct(99.0)) {
                (Some(s), Some(r)) => format!("sbx p99 ≤ {f}× raw p99 (here {:.2}×)", s / r),
                _ => format!("sbx p99 ≤ {f}× raw p99"),
            },
            Target::P50Below(ms) => format!("sbx p50 < {ms} ms"),
            Target::MeanMibAtMost(m) => format!("sbx mean ≤ {m} MiB"),
            Target::MeanPctAtMost(m) => format!("sbx mean ≤ {m} % of a core"),
            Target::AllAnswer(n) => format!("{n}/{n} answer"),
        }
    }

    fn met(&self) -> &'static str {
        match self.target {
            Target::None => "—",
            Target::RatioAtMost(f) => match self.ratio() {
                Some(r) if r <= f => "yes",
                Some(_) => "**no**",
                None => "—",
            },
            Target::MinMbps(m) => match self.sbx.pct(50.0) {
                Some(ms) if self.value(ms) >= m => "yes",
                Some(_) => "**no**",
                None => "—",
            },
            Target::P99Below(max) => match self.sbx.pct(99.0) {
                Some(ms) if ms < max && self.sbx.failure.is_none() => "yes",
                Some(_) => "**no**",
                None => "—",
            },
            Target::P99RatioAtMost(f) => match (self.sbx.pct(99.0), self.raw.pct(99.0)) {
                (Some(s), Some(r)) if s <= f * r && self.sbx.failure.is_none() => "yes",
                (Some(_), Some(_)) => "**no**",
                _ => "—",
            },
            Target::P50Below(max) => match self.sbx.pct(50.0) {
                Some(ms) if ms < max && self.sbx.failure.is_none() => "yes",
                Some(_) => "**no**",
                None => "—",
            },
            Target::MeanMibAtMost(max) | Target::MeanPctAtMost(max) => match self.sbx.mean() {
                Some(m) if m <= max => "yes",
                Some(_) => "**no**",
                None => "—",
            },
            Target::AllAnswer(n) => match self.sbx.answered {
                Some((a, _)) if a >= n => "yes",
                Some(_) => "**no**",
                None => "—",
            },
        }
    }

    /// The markdown line of this row.
    pub fn markdown(&self) -> String {
        let ratio = match (self.ratio(), self.kind) {
            (Some(r), Kind::Latency | Kind::Mib | Kind::CorePct) => format!("{r:.2}"),
            (Some(r), Kind::Throughput { .. }) => format!("{r:.2} (MB/s)"),
            (None, _) => "—".into(),
        };
        format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            self.name,
            self.cell(&self.sbx, 50.0),
            self.cell(&self.sbx, 95.0),
            self.cell(&self.sbx, 99.0),
            self.cell(&self.raw, 50.0),
            self.cell(&self.raw, 95.0),
            ratio,
            self.target_text(),
            self.met(),
        )
    }
}

/// The table header (two lines).
pub const TABLE_HEADER: &str = "| scenario | sbx p50 | sbx p95 | sbx p99 | raw runsc p50 | raw p95 | ratio p50 (sbx/raw) | target | met? |\n|---|---|---|---|---|---|---|---|---|";

/// MB/s (10^6 bytes per second) for `bytes` moved in `ms` milliseconds.
pub fn mbps(bytes: u64, ms: f64) -> f64 {
    if ms <= 0.0 {
        return f64::INFINITY;
    }
    bytes as f64 / 1e6 / (ms / 1000.0)
}

/// Milliseconds with precision that suits the magnitude.
pub fn fmt_ms(ms: f64) -> String {
    if ms < 10.0 {
        format!("{ms:.2} ms")
    } else if ms < 100.0 {
        format!("{ms:.1} ms")
    } else {
        format!("{ms:.0} ms")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank() {
        let v: Vec<f64> = (1..=20).map(f64::from).collect();
        assert_eq!(percentile(&v, 50.0), Some(10.0));
        assert_eq!(percentile(&v, 95.0), Some(19.0));
        assert_eq!(percentile(&v, 99.0), Some(20.0));
        assert_eq!(percentile(&[3.0], 99.0), Some(3.0));
        assert_eq!(percentile(&[], 50.0), None);
        assert_eq!(percentile(&[5.0, 1.0, 3.0], 50.0), Some(3.0));
    }

    #[test]
    fn row_ratio_and_target() {
        let mut r = Row::new("create", Kind::Latency, Target::RatioAtMost(1.3));
        r.sbx.ms = vec![120.0, 130.0, 140.0];
        r.raw.ms = vec![100.0, 100.0, 100.0];
        assert!((r.ratio().unwrap() - 1.3).abs() < 1e-9);
        assert_eq!(r.met(), "yes");
        r.sbx.ms = vec![200.0];
        assert_eq!(r.met(), "**no**");
        let mut u = Row::new("pause", Kind::Latency, Target::RatioAtMost(1.5));
        u.sbx.failure = Some(Failure::Unsupported("501 not_implemented".into()));
        u.raw.ms = vec![17.0];
        assert!(u.markdown().contains("n/a (server: 501 not_implemented)"));
        assert_eq!(u.met(), "—");
    }

    #[test]
    fn p99_ratio_target() {
        let mut r = Row::new("exec-load", Kind::Latency, Target::P99RatioAtMost(0.5));
        r.sbx.ms = (1..=100).map(f64::from).collect();
        r.raw.ms = (1..=100).map(|v| f64::from(v) * 2.0).collect();
        assert_eq!(r.met(), "yes");
        assert!(r.markdown().contains("sbx p99 ≤ 0.5× raw p99 (here 0.50×)"));
        r.sbx.ms.push(150.0);
        r.sbx.ms.push(160.0);
        assert_eq!(r.met(), "**no**");
        r.raw.ms.clear();
        assert_eq!(r.met(), "—");
    }

    #[test]
    fn load_and_density_targets() {
        let mut r = Row::new("exec-load", Kind::Latency, Target::P99Below(20.0));
        r.sbx.ms = (1..=100).map(f64::from).map(|v| v / 10.0).collect();
        assert_eq!(r.sbx.pct(99.0), Some(9.9));
        assert_eq!(r.met(), "yes");
        r.sbx.ms.push(25.0);
        r.sbx.ms.push(26.0);
        assert_eq!(r.met(), "**no**");
        assert!(r.markdown().contains("sbx p99 < 20 ms"));

        let mut m = Row::new("density-mem", Kind::Mib, Target::MeanMibAtMost(40.0));
        m.sbx.ms = vec![30.0, 40.0, 47.0];
        m.raw.ms = vec![20.0, 20.0, 20.0];
        assert!((m.sbx.mean().unwrap() - 39.0).abs() < 1e-9);
        assert_eq!(m.met(), "yes");
        let line = m.markdown();
        assert!(line.contains("| 40.0 MiB |"), "{line}");
        assert!(line.contains("| 2.00 |"), "{line}");
        m.sbx.ms = vec![50.0];
        assert_eq!(m.met(), "**no**");

        let mut c = Row::new("density-cpu", Kind::CorePct, Target::MeanPctAtMost(0.5));
        c.sbx.ms = vec![1.0, 2.0];
        c.raw.ms = vec![1.0, 1.0];
        let line = c.markdown();
        assert!(
            line.contains("| 1.50 % |") || line.contains("| 2.00 % |"),
            "{line}"
        );
        assert!(line.contains("sbx mean ≤ 0.5 % of a core"), "{line}");
        assert_eq!(c.met(), "**no**");
        c.sbx.ms = vec![0.2, 0.4];
        assert_eq!(c.met(), "yes");

        let mut d = Row::new("density-exec", Kind::Latency, Target::AllAnswer(100));
        d.sbx.ms = vec![5.0; 22];
        d.sbx.answered = Some((22, 100));
        assert!(d.markdown().contains("5.00 ms (22/100 answered)"));
        assert_eq!(d.met(), "**no**");
        d.sbx.answered = Some((100, 100));
        assert_eq!(d.met(), "yes");
        let mut none = Side::skipped("x");
        none.answered = Some((0, 100));
        d.sbx = none;
        assert!(d.markdown().contains("— (0/100 answered)"));
        assert_eq!(d.met(), "**no**");
        assert_eq!(mean(&[]), None);
    }

    #[test]
    fn throughput_cells() {
        let mib = 1024 * 1024;
        let mut r = Row::new(
            "upload-100MiB",
            Kind::Throughput { bytes: 100 * mib },
            Target::MinMbps(300.0),
        );
        r.sbx.ms = vec![349.5];
        r.raw.ms = vec![200.0];
        let line = r.markdown();
        assert!(line.contains("300 MB/s"), "{line}");
        assert_eq!(r.met(), "yes");
        assert!((r.ratio().unwrap() - 200.0 / 349.5).abs() < 1e-9);
    }
}
