//! Execution reports and per-unit utilisation.

use crate::kernel::{Tier, Unit};
use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

/// What one `execute` did.
#[derive(Clone, Debug)]
pub struct ExecReport {
    pub op: &'static str,
    /// Name of the implementation that ran.
    pub implementation: std::borrow::Cow<'static, str>,
    pub tier: Tier,
    /// `backend:index`, e.g. `cpu:0`.
    pub device: Arc<str>,
    pub unit: Unit,
    /// Stream the work went to, e.g. `cpu:0/default`.
    pub stream: Arc<str>,
    /// Submission sequence number.
    pub seq: u64,
    /// Wall time of the call when it ran synchronously; `None` when it was queued on an
    /// asynchronous stream (time it with events).
    pub elapsed: Option<Duration>,
    pub flops: u64,
    pub bytes: u64,
}

impl ExecReport {
    /// Achieved GFLOP/s, when timed.
    pub fn gflops(&self) -> Option<f64> {
        self.elapsed.filter(|d| !d.is_zero()).map(|d| self.flops as f64 / d.as_secs_f64() / 1e9)
    }
}

impl fmt::Display for ExecReport {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} via {} [{}] on {} ({}, {})",
            self.op, self.implementation, self.tier, self.device, self.unit, self.stream
        )?;
        match self.elapsed {
            Some(d) => write!(f, ": {:.3} ms", d.as_secs_f64() * 1e3)?,
            None => write!(f, ": queued as #{}", self.seq)?,
        }
        if let Some(g) = self.gflops()
            && self.flops > 0
        {
            write!(f, ", {g:.1} GFLOP/s")?;
        }
        Ok(())
    }
}

/// Accumulated time, FLOPs and bytes of one unit on one device.
#[derive(Clone, Debug, Default)]
pub struct UnitTotals {
    pub busy: Duration,
    pub flops: u64,
    pub bytes: u64,
    pub launches: u64,
}

/// Utilisation of one unit: achieved rates over its nominal peaks.
#[derive(Clone, Debug)]
pub struct Utilisation {
    pub device: String,
    pub unit: Unit,
    pub totals: UnitTotals,
    /// Achieved FLOP/s over the unit's peak (0..1).
    pub compute: f64,
    /// Achieved bytes/s over the unit's peak bandwidth (0..1).
    pub bandwidth: f64,
    /// How the figure was obtained.
    pub method: String,
}

impl fmt::Display for Utilisation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} {}: {} launches, busy {:.3} ms, compute {:.1}% of peak, bandwidth {:.1}% of peak ({})",
            self.device,
            self.unit.label,
            self.totals.launches,
            self.totals.busy.as_secs_f64() * 1e3,
            self.compute * 100.0,
            self.bandwidth * 100.0,
            self.method
        )
    }
}

/// Totals per (device, unit label), filled from timed reports.
#[derive(Debug, Default)]
pub struct Profile {
    pub units: BTreeMap<(usize, &'static str), (Unit, UnitTotals)>,
}

impl Profile {
    pub fn record(&mut self, device: usize, r: &ExecReport) {
        let Some(d) = r.elapsed else { return };
        let e = self.units.entry((device, r.unit.label)).or_insert((r.unit, UnitTotals::default()));
        e.1.busy += d;
        e.1.flops += r.flops;
        e.1.bytes += r.bytes;
        e.1.launches += 1;
    }
}
