//! The emulator's configuration: device count, memory per device, SoC, workspace size
//! and fault-injection rules, read from `ACL_EMU_*` variables or `aclEmuConfigure`.

/// `ACL_EMU_FAIL=name:nth:code[,name:nth:code...]`: the nth call (1-based, counted
/// from the last reset) of `name` fails with `code`.
#[derive(Clone, Debug, PartialEq)]
pub struct FaultRule {
    pub symbol: String,
    pub nth: u64,
    pub code: i32,
}

#[derive(Clone, Debug)]
pub struct Config {
    pub devices: usize,
    pub capacity: u64,
    pub soc: String,
    pub faults: Vec<FaultRule>,
    /// Workspace bytes the matmul-family, reduction and norm ops ask for.
    pub workspace: u64,
    /// Whether launched kernels compute (`ACL_EMU_COMPUTE`, key `compute`; default on). Off,
    /// the emulator only models: every check, call counter and modelled time is the same,
    /// but a kernel writes nothing (its outputs keep what they held), so that whole models
    /// can be costed on a small host. Copies and fills still move their bytes.
    pub compute: bool,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            devices: 1,
            capacity: 1 << 30,
            soc: "Ascend910A".into(),
            faults: Vec::new(),
            workspace: 4096,
            compute: true,
        }
    }
}

pub fn parse_size(s: &str) -> Option<u64> {
    let s = s.trim();
    let (num, mul) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 1u64 << 10),
        'm' | 'M' => (&s[..s.len() - 1], 1 << 20),
        'g' | 'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.trim().parse::<u64>().ok()?.checked_mul(mul)
}

/// `0`/`off`/`false` or `1`/`on`/`true`.
pub fn parse_switch(s: &str) -> Option<bool> {
    match s.trim().to_ascii_lowercase().as_str() {
        "0" | "off" | "false" => Some(false),
        "1" | "on" | "true" => Some(true),
        _ => None,
    }
}

pub fn parse_faults(s: &str) -> Result<Vec<FaultRule>, String> {
    s.split(',')
        .map(str::trim)
        .filter(|r| !r.is_empty())
        .map(|r| {
            let p: Vec<&str> = r.split(':').collect();
            if p.len() != 3 {
                return Err(format!("fault rule {r:?} is not name:nth:code"));
            }
            let nth = p[1].parse::<u64>().map_err(|_| format!("fault rule {r:?}: bad call number"))?;
            let code = p[2].parse::<i32>().map_err(|_| format!("fault rule {r:?}: bad code"))?;
            if nth == 0 {
                return Err(format!("fault rule {r:?}: calls are counted from 1"));
            }
            Ok(FaultRule { symbol: p[0].to_string(), nth, code })
        })
        .collect()
}

impl Config {
    /// Defaults overridden by `ACL_EMU_DEVICES`, `ACL_EMU_MEMORY`, `ACL_EMU_SOC`,
    /// `ACL_EMU_FAIL`, `ACL_EMU_WORKSPACE` (malformed values are logged and ignored).
    pub fn from_env() -> Config {
        let mut c = Config::default();
        let get = |k: &str| std::env::var(k).ok().filter(|v| !v.trim().is_empty());
        if let Some(v) = get("ACL_EMU_DEVICES") {
            match v.trim().parse() {
                Ok(n) => c.devices = n,
                Err(_) => log::warn!("acl-emu: ignoring ACL_EMU_DEVICES={v:?}"),
            }
        }
        if let Some(v) = get("ACL_EMU_MEMORY") {
            match parse_size(&v) {
                Some(n) => c.capacity = n,
                None => log::warn!("acl-emu: ignoring ACL_EMU_MEMORY={v:?}"),
            }
        }
        if let Some(v) = get("ACL_EMU_SOC") {
            c.soc = v.trim().to_string();
        }
        if let Some(v) = get("ACL_EMU_WORKSPACE") {
            match parse_size(&v) {
                Some(n) => c.workspace = n,
                None => log::warn!("acl-emu: ignoring ACL_EMU_WORKSPACE={v:?}"),
            }
        }
        if let Some(v) = get("ACL_EMU_COMPUTE") {
            match parse_switch(&v) {
                Some(b) => c.compute = b,
                None => log::warn!("acl-emu: ignoring ACL_EMU_COMPUTE={v:?} (0 or 1)"),
            }
        }
        if let Some(v) = get("ACL_EMU_FAIL") {
            match parse_faults(&v) {
                Ok(f) => c.faults = f,
                Err(e) => log::warn!("acl-emu: ignoring ACL_EMU_FAIL: {e}"),
            }
        }
        c
    }

    /// Applies `key=value;key=value` (keys: devices, memory, soc, fail, workspace).
    pub fn apply(&mut self, spec: &str) -> Result<(), String> {
        for kv in spec.split(';').map(str::trim).filter(|s| !s.is_empty()) {
            let (k, v) = kv.split_once('=').ok_or_else(|| format!("{kv:?} is not key=value"))?;
            match k.trim() {
                "devices" => self.devices = v.trim().parse().map_err(|_| format!("devices={v:?}"))?,
                "memory" => self.capacity = parse_size(v).ok_or_else(|| format!("memory={v:?}"))?,
                "soc" => self.soc = v.trim().to_string(),
                "fail" => self.faults = parse_faults(v)?,
                "workspace" => self.workspace = parse_size(v).ok_or_else(|| format!("workspace={v:?}"))?,
                "compute" => self.compute = parse_switch(v).ok_or_else(|| format!("compute={v:?}"))?,
                other => return Err(format!("unknown key {other:?}")),
            }
        }
        if self.devices > 64 {
            return Err("at most 64 emulated devices".into());
        }
        Ok(())
    }

    /// Atlas training (910 family): no BF16, no aclnnExp, FP32 matmul only as FP16.
    pub fn is_910(&self) -> bool {
        matches!(
            self.soc.as_str(),
            "Ascend910A" | "Ascend910B" | "Ascend910ProA" | "Ascend910ProB" | "Ascend910PremiumA"
        )
    }

    /// Atlas A2 (910B1..B4) or A3 (`Ascend910_93xx`) training SoCs: the products
    /// aclnnFlashAttentionScore has kernels for (its operator definition registers
    /// `ascend910b` and `ascend910_93` only). Whole names, never the prefix "Ascend910B",
    /// which is also an old 910 part (`Ascend910B.ini` among CANN's platform files).
    pub fn is_a2_or_a3(&self) -> bool {
        let s = self.soc.as_str();
        matches!(s, "Ascend910B1" | "Ascend910B2" | "Ascend910B2C" | "Ascend910B3" | "Ascend910B4" | "Ascend910B4-1")
            || s.starts_with("Ascend910_93")
    }
}
