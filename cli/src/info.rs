//! `npurt info`.

use crate::build_info;
use npurt::{Result, Runtime};

fn gib(b: u64) -> f64 {
    b as f64 / (1u64 << 30) as f64
}

pub fn run(rt: &Runtime) -> Result<()> {
    println!(
        "npurt {} (commit {}, {} build, target {})",
        build_info::VERSION,
        build_info::GIT_COMMIT,
        build_info::PROFILE,
        build_info::TARGET
    );
    println!("features enabled: {}", if build_info::FEATURES.is_empty() { "(none)" } else { build_info::FEATURES });
    println!("backends compiled in: {}", npurt::compiled_backends().join(", "));
    println!("backend in use: {} ({} device(s))", rt.backend_name(), rt.device_count());
    let p = rt.config().precision;
    println!("precision of compiled graphs: {} (runs as {} here)", p.name(), p.resolve(rt.auto_precision(0)?).name());
    for d in 0..rt.device_count() {
        let info = rt.device_info(d)?;
        let mem = rt.memory_info(d)?;
        println!("  device {d}: {}", info.name);
        println!(
            "    memory: {:.1} GiB total{}, zero-copy host access: {}",
            gib(info.memory_bytes),
            mem.system_free_bytes.map(|f| format!(", {:.1} GiB free", gib(f))).unwrap_or_default(),
            if info.host_shared { "yes" } else { "no" }
        );
        for u in &info.units {
            println!(
                "    unit {:<12} {:<7} peak {:>8.1} GFLOP/s, {:>6.1} GB/s",
                u.unit.label,
                u.unit.class.name(),
                u.peak_flops / 1e9,
                u.peak_bytes_per_s / 1e9
            );
        }
    }
    println!("target CPU features assumed at build: {}", build_info::TARGET_FEATURES.replace(',', " "));
    let f = backend_cpu::features::select(None).map_err(backend_cpu::CpuError::from)?;
    println!("host CPU: {} ({} logical cores, {:.0} MHz)", f.model, f.cores, f.mhz);
    println!("CPU features detected at run time: {}", f.detected.join(" "));
    let how = if f.forced {
        format!("forced by {}; the CPU runs up to {}", backend_cpu::features::ISA_ENV, f.widest)
    } else {
        "the widest this CPU runs; not forced".to_string()
    };
    println!("CPU ISA in use: {} ({how}; GEMM unit {})", f.isa, f.matrix_unit().label);
    println!("CPU precisions (native: on this CPU's own support for them):");
    for p in f.precisions() {
        match &p.native {
            Ok(how) => println!("  {:<5} native ({how})", p.dtype.name()),
            Err(why) => println!("  {:<5} not native: {why}", p.dtype.name()),
        }
    }
    let mut per_tier = std::collections::BTreeMap::new();
    for k in rt.kernels() {
        *per_tier.entry(k.tier).or_insert(0) += 1;
    }
    println!("kernels: {}", per_tier.iter().map(|(t, n)| format!("{n} {t}")).collect::<Vec<_>>().join(", "));
    Ok(())
}
