//! Utilisation counters: timed work per device and unit, against each unit's peak.

use crate::report::{Profile, Utilisation};
use crate::runtime::Runtime;

impl Runtime {
    /// Adds timed work to the utilisation counters of `device`.
    pub(crate) fn record_busy(
        &self,
        device: usize,
        units: &[(crate::kernel::Unit, u64, u64, u64)],
        busy: std::time::Duration,
        launches: u64,
    ) {
        if launches == 0 {
            return;
        }
        let mut prof = self.inner.profile.lock().unwrap_or_else(|p| p.into_inner());
        for &(unit, n, flops, bytes) in units {
            let e = prof.units.entry((device, unit.label)).or_insert((unit, Default::default()));
            e.1.busy += busy.mul_f64(n as f64 / launches as f64);
            e.1.flops += flops;
            e.1.bytes += bytes;
            e.1.launches += n;
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
