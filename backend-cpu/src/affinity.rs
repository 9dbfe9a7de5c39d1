//! Pinning the device pools' worker threads to CPUs.
//!
//! A parallel kernel wakes the pool's workers; after an idle spell the scheduler tends to
//! wake them on the CPU of the thread that woke them, where they share one core until the
//! load balancer moves them, several milliseconds later. On a small machine that doubles
//! the latency of the first runs after a pause (MiniLM s32 on 2 vCPUs: 13 ms instead of
//! 8; docs/PERF.md). Pinning each worker to a CPU of its own avoids it. By default the
//! workers are pinned when there are as many as the CPUs the process may run on (each CPU
//! then has one worker either way; pinning only keeps them from piling up on one);
//! `NPURT_CPU_PIN` or [`crate::CpuConfig::pin`] turns it on or off.

/// The environment variable that turns pinning on (`1`, `on`), off (`0`, `off`) or to the
/// default (`auto`, empty).
pub const PIN_ENV: &str = "NPURT_CPU_PIN";

/// `NPURT_CPU_PIN`: `Some(true/false)`, or `None` for the default (unset or `auto`); a
/// value that is not UTF-8, is empty or is unknown is an error naming the variable.
pub fn pin_from_env() -> Result<Option<bool>, runtime::env::EnvError> {
    pin_from(runtime::env::var(PIN_ENV)?.as_deref())
}

/// [`pin_from_env`] on a value already read by [`runtime::env`]'s rule.
fn pin_from(v: Option<&str>) -> Result<Option<bool>, runtime::env::EnvError> {
    match v {
        None => Ok(None),
        Some(v) if v.eq_ignore_ascii_case("auto") => Ok(None),
        Some(v) => {
            runtime::env::parse(PIN_ENV, v, "on, off or auto", |v| runtime::env::switch(PIN_ENV, v).ok().map(Some))
        }
    }
}

/// The CPUs this process may run on, in order (`None` where that cannot be asked).
#[cfg(target_os = "linux")]
pub fn allowed_cpus() -> Option<Vec<usize>> {
    // SAFETY: `set` is a plain bit set that sched_getaffinity fills; its size is passed.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: pid 0 is the calling thread; `set` is writable for its whole size.
    let r = unsafe { libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) };
    if r != 0 {
        return None;
    }
    // SAFETY: CPU_ISSET reads the bit set filled above, for indices below its capacity.
    Some((0..libc::CPU_SETSIZE as usize).filter(|&c| unsafe { libc::CPU_ISSET(c, &set) }).collect())
}

#[cfg(not(target_os = "linux"))]
pub fn allowed_cpus() -> Option<Vec<usize>> {
    None
}

/// Pins the calling thread to `cpu`.
#[cfg(target_os = "linux")]
pub fn pin_current(cpu: usize) -> std::io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("CPU {cpu} out of range")));
    }
    // SAFETY: as in `allowed_cpus`; `cpu` is below the set's capacity (checked).
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    unsafe { libc::CPU_SET(cpu, &mut set) };
    // SAFETY: pid 0 is the calling thread; `set` is a valid bit set of the size passed.
    let r = unsafe { libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) };
    if r == 0 { Ok(()) } else { Err(std::io::Error::last_os_error()) }
}

#[cfg(not(target_os = "linux"))]
pub fn pin_current(_cpu: usize) -> std::io::Result<()> {
    Err(std::io::Error::new(std::io::ErrorKind::Unsupported, "thread pinning is only implemented on Linux"))
}

/// The CPU of each worker of each device (`devices` pools of `threads` workers), or `None`
/// when they are not pinned: `pin` `Some(false)`, or the default with the workers not
/// using every allowed CPU, or the allowed CPUs unknown. Forced on with more workers than
/// CPUs, workers share CPUs round-robin.
pub fn plan(pin: Option<bool>, devices: usize, threads: usize) -> Option<Vec<Vec<usize>>> {
    if pin == Some(false) {
        return None;
    }
    let cpus = allowed_cpus().filter(|c| !c.is_empty())?;
    let workers = devices.checked_mul(threads)?;
    if pin.is_none() && workers != cpus.len() {
        return None;
    }
    Some((0..devices).map(|d| (0..threads).map(|i| cpus[(d * threads + i) % cpus.len()]).collect()).collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pin_values_are_on_off_or_auto_and_others_are_refused_naming_the_variable() {
        assert_eq!(pin_from(None), Ok(None));
        assert_eq!(pin_from(Some("AUTO")), Ok(None));
        assert_eq!(pin_from(Some("on")), Ok(Some(true)));
        assert_eq!(pin_from(Some("0")), Ok(Some(false)));
        let e = runtime::Error::from(pin_from(Some("zzz")).unwrap_err()).to_string();
        assert_eq!(e, "invalid configuration: NPURT_CPU_PIN=\"zzz\": expected on, off or auto");
    }

    #[test]
    fn the_plan_pins_only_when_every_cpu_is_used_or_when_asked() {
        let Some(cpus) = allowed_cpus() else {
            println!("skipped: the allowed CPUs cannot be asked on this system");
            return;
        };
        assert!(!cpus.is_empty());
        let n = cpus.len();
        assert_eq!(plan(Some(false), 1, n), None);
        assert_eq!(plan(None, 1, n), Some(vec![cpus.clone()]));
        if n > 1 {
            assert_eq!(plan(None, 1, n - 1), None, "fewer workers than CPUs: left to the scheduler");
        }
        let forced = plan(Some(true), 2, n).unwrap();
        assert_eq!(forced.len(), 2);
        assert!(forced.iter().flatten().all(|c| cpus.contains(c)));
        assert_eq!(forced[0], cpus, "round-robin from the first allowed CPU");
    }

    #[test]
    fn a_pinned_thread_runs_on_its_cpu_only() {
        let Some(cpus) = allowed_cpus() else {
            println!("skipped: the allowed CPUs cannot be asked on this system");
            return;
        };
        let last = *cpus.last().unwrap();
        let seen = std::thread::spawn(move || {
            pin_current(last).unwrap();
            allowed_cpus()
        })
        .join()
        .unwrap();
        assert_eq!(seen, Some(vec![last]));
        assert!(pin_current(usize::MAX).is_err());
    }
}
