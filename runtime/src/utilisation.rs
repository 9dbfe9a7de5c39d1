//! Utilisation counters: timed work per device and unit, against each unit's peak.

use crate::kernel::Unit;
use crate::report::{Profile, Utilisation};
use crate::runtime::Runtime;

/// What the launches of one batch did on one unit.
#[derive(Clone, Copy, Debug)]
pub(crate) struct UnitCount {
    pub(crate) unit: Unit,
    pub(crate) launches: u64,
    pub(crate) flops: u64,
    pub(crate) bytes: u64,
}

/// Per unit, what the launches of one batch did (for the utilisation counters).
#[derive(Clone, Debug, Default)]
pub(crate) struct UnitCounts(Vec<UnitCount>);

impl UnitCounts {
    /// Counts one launch of `flops` and `bytes` on `unit`.
    pub(crate) fn add(&mut self, unit: Unit, flops: u64, bytes: u64) {
        match self.0.iter_mut().find(|c| c.unit == unit) {
            Some(c) => {
                c.launches += 1;
                c.flops += flops;
                c.bytes += bytes;
            }
            None => self.0.push(UnitCount { unit, launches: 1, flops, bytes }),
        }
    }
}

impl Runtime {
    /// Adds timed work to the utilisation counters of `device`.
    pub(crate) fn record_busy(&self, device: usize, units: &UnitCounts, busy: std::time::Duration, launches: u64) {
        if launches == 0 {
            return;
        }
        let mut prof = self.inner.profile.lock().unwrap_or_else(|p| p.into_inner());
        for c in &units.0 {
            let e = prof.units.entry((device, c.unit.label)).or_insert((c.unit, Default::default()));
            e.1.busy += busy.mul_f64(c.launches as f64 / launches as f64);
            e.1.flops += c.flops;
            e.1.bytes += c.bytes;
            e.1.launches += c.launches;
        }
    }

    /// Per-unit utilisation from the timed executions so far, against each unit's peak.
    pub fn utilisation(&self) -> Vec<Utilisation> {
        let prof = self.inner.profile.lock().unwrap_or_else(|p| p.into_inner());
        let mut out = Vec::new();
        for ((device, _label), (unit, totals)) in prof.units.iter() {
            let Some(d) = self.inner.devices.get(*device) else {
                continue;
            };
            let peak = d.info.units.iter().find(|u| u.unit.label == unit.label);
            let secs = totals.busy.as_secs_f64();
            let (compute, bandwidth, method) = match (peak, secs > 0.0) {
                (Some(p), true) => (
                    (totals.flops as f64 / secs / p.peak_flops).min(1.0),
                    (totals.bytes as f64 / secs / p.peak_bytes_per_s).min(1.0),
                    format!("op FLOP/byte counts over measured time vs nominal peak ({})", p.source),
                ),
                _ => (0.0, 0.0, "no peak known for this unit".to_string()),
            };
            out.push(Utilisation {
                device: d.label.to_string(),
                unit: *unit,
                totals: totals.clone(),
                compute,
                bandwidth,
                method,
            });
        }
        out
    }

    /// Clears the utilisation counters.
    pub fn reset_profile(&self) {
        *self.inner.profile.lock().unwrap_or_else(|p| p.into_inner()) = Profile::default();
    }
}
