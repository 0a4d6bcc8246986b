//! The device's state beside every bench: GPU UUID, driver, SM and memory clocks, and the active
//! clock-event (throttle) reasons, from `nvidia-smi`. A run is flagged throttled when any reason
//! other than "GPU idle" or "applications clocks setting" is active.

pub use crate::model::bench::DeviceState;

const FIELDS: &str = "uuid,name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw,clocks_event_reasons.active";

/// Bits of nvidia-smi's clock-event reasons (nvmlClocksEventReason*).
const REASONS: &[(u64, &str, bool)] = &[
    (0x1, "gpu idle", false),
    (0x2, "applications clocks setting", false),
    (0x4, "software power cap", true),
    (0x8, "hardware slowdown", true),
    (0x10, "sync boost", true),
    (0x20, "software thermal slowdown", true),
    (0x40, "hardware thermal slowdown", true),
    (0x80, "hardware power brake slowdown", true),
    (0x100, "display clocks setting", false),
];

/// Reads one CSV line of `FIELDS`.
pub fn parse_line(line: &str) -> Option<DeviceState> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < 9 {
        return None;
    }
    let num = |s: &str| s.parse::<f64>().ok();
    let mask = f[8].trim_start_matches("0x");
    let bits = u64::from_str_radix(mask, 16).ok();
    let mut reasons = Vec::new();
    let mut throttled = false;
    if let Some(b) = bits {
        for (bit, name, bad) in REASONS {
            if b & bit != 0 {
                reasons.push(name.to_string());
                throttled |= bad;
            }
        }
    }
    Some(DeviceState {
        uuid: f[0].to_string(),
        name: f[1].to_string(),
        driver: f[2].to_string(),
        sm_clock_mhz: num(f[3]).map(|v| v as u32),
        mem_clock_mhz: num(f[4]).map(|v| v as u32),
        max_sm_clock_mhz: num(f[5]).map(|v| v as u32),
        temperature_c: num(f[6]).map(|v| v as u32),
        power_w: num(f[7]),
        throttle_mask: bits.map(|_| f[8].to_string()),
        throttle_reasons: reasons,
        throttled,
    })
}

/// Why the device's state could not be read.
#[derive(Debug, thiserror::Error)]
pub enum DevStateError {
    #[error("nvidia-smi: {0}")]
    Spawn(#[from] std::io::Error),
    #[error("nvidia-smi: {0}")]
    Failed(String),
    #[error("nvidia-smi printed nothing readable: {0}")]
    Unreadable(String),
}

/// The state of the GPU with `uuid` now, or why it cannot be read.
pub fn query(uuid: &str) -> Result<DeviceState, DevStateError> {
    let out = std::process::Command::new("nvidia-smi")
        .args(["-i", uuid, &format!("--query-gpu={FIELDS}"), "--format=csv,noheader,nounits"])
        .output()?;
    if !out.status.success() {
        return Err(DevStateError::Failed(String::from_utf8_lossy(&out.stderr).trim().to_string()));
    }
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines().find_map(parse_line).ok_or_else(|| DevStateError::Unreadable(text.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_power_capped_gpu_is_throttled_and_an_idle_one_is_not() {
        let line = "GPU-2da2e4a2-ec49, NVIDIA H200, 580.95.05, 1980, 3201, 1980, 41, 512.31, 0x0000000000000004";
        let s = parse_line(line).unwrap();
        assert_eq!(s.sm_clock_mhz, Some(1980));
        assert_eq!(s.mem_clock_mhz, Some(3201));
        assert_eq!(s.throttle_reasons, vec!["software power cap"]);
        assert!(s.throttled);
        let idle = parse_line("GPU-x, NVIDIA H200, 580.95.05, 345, 3201, 1980, 30, 75.0, 0x0000000000000001").unwrap();
        assert!(!idle.throttled);
        assert_eq!(idle.throttle_reasons, vec!["gpu idle"]);
        assert!(parse_line("not, enough").is_none());
        let na = parse_line("GPU-x, NVIDIA H200, 580, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]").unwrap();
        assert_eq!((na.sm_clock_mhz, na.throttled), (None, false));
    }
}
