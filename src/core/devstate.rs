//! The device's state beside every bench: GPU UUID, driver, SM and memory clocks, and the active
//! clock-event (throttle) reasons, read through NVML (the driver's own library, loaded once per
//! process: a read is a few calls, not a process), else from `nvidia-smi`. A run is flagged
//! throttled when a reason that slows the GPU (not "GPU idle" or "applications clocks
//! setting") is active and the SM clock is more than [`CLOCK_SLACK`] below its maximum (or
//! either clock is unknown): a power cap that holds the clock within 1% of its maximum, as the
//! demo's benches met on an H100 at 1965 of 1980 MHz, changes no timing worth a flag.

use std::sync::LazyLock;

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

/// How far below its maximum the SM clock may be, as a fraction, while a slowing reason is
/// active, before the run is flagged throttled.
pub const CLOCK_SLACK: f64 = 0.03;

/// Whether a slowing reason (`slowing`) took the SM clock more than [`CLOCK_SLACK`] below its
/// maximum; with either clock unknown, the reason alone decides.
fn slowed(slowing: bool, sm: Option<u32>, max: Option<u32>) -> bool {
    match (sm, max) {
        (Some(sm), Some(max)) if max > 0 => slowing && f64::from(sm) < f64::from(max) * (1.0 - CLOCK_SLACK),
        _ => slowing,
    }
}

/// The reasons a clock-event mask names, and whether any of them slows the GPU down.
fn reasons_of(bits: Option<u64>) -> (Vec<String>, bool) {
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
    (reasons, throttled)
}

/// Reads one CSV line of `FIELDS`.
pub fn parse_line(line: &str) -> Option<DeviceState> {
    let f: Vec<&str> = line.split(',').map(str::trim).collect();
    if f.len() < 9 {
        return None;
    }
    let num = |s: &str| s.parse::<f64>().ok();
    let mask = f[8].trim_start_matches("0x");
    let bits = u64::from_str_radix(mask, 16).ok();
    let (reasons, slowing) = reasons_of(bits);
    let (sm, max) = (num(f[3]).map(|v| v as u32), num(f[5]).map(|v| v as u32));
    Some(DeviceState {
        uuid: f[0].to_string(),
        name: f[1].to_string(),
        driver: f[2].to_string(),
        sm_clock_mhz: sm,
        mem_clock_mhz: num(f[4]).map(|v| v as u32),
        max_sm_clock_mhz: max,
        temperature_c: num(f[6]).map(|v| v as u32),
        power_w: num(f[7]),
        throttle_mask: bits.map(|_| f[8].to_string()),
        throttle_reasons: reasons,
        throttled: slowed(slowing, sm, max),
    })
}

/// NVML, opened at the first read: `None` where the driver's library is not there (a machine
/// without a GPU) or does not start.
static NVML: LazyLock<Option<nvml_wrapper::Nvml>> = LazyLock::new(|| nvml_wrapper::Nvml::init().ok());

/// The state of the GPU with `uuid` through NVML.
fn query_nvml(nvml: &nvml_wrapper::Nvml, uuid: &str) -> Result<DeviceState, nvml_wrapper::error::NvmlError> {
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    let d = nvml.device_by_uuid(uuid)?;
    let bits = d.current_throttle_reasons().ok().map(|r| r.bits());
    let (throttle_reasons, slowing) = reasons_of(bits);
    let (sm, max) = (d.clock_info(Clock::SM).ok(), d.max_clock_info(Clock::SM).ok());
    Ok(DeviceState {
        uuid: uuid.to_string(),
        name: d.name()?,
        driver: nvml.sys_driver_version()?,
        sm_clock_mhz: sm,
        mem_clock_mhz: d.clock_info(Clock::Memory).ok(),
        max_sm_clock_mhz: max,
        temperature_c: d.temperature(TemperatureSensor::Gpu).ok(),
        power_w: d.power_usage().ok().map(|mw| f64::from(mw) / 1000.0),
        // As nvidia-smi prints it.
        throttle_mask: bits.map(|b| format!("0x{b:016x}")),
        throttle_reasons,
        throttled: slowed(slowing, sm, max),
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

/// The state of the GPU with `uuid` now, or why it cannot be read: through NVML, else (no NVML,
/// or it does not know the device) from `nvidia-smi`.
pub fn query(uuid: &str) -> Result<DeviceState, DevStateError> {
    if let Some(state) = NVML.as_ref().and_then(|n| query_nvml(n, uuid).ok()) {
        return Ok(state);
    }
    query_smi(uuid)
}

fn query_smi(uuid: &str) -> Result<DeviceState, DevStateError> {
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

    /// The table that names the bits is NVML's own: a bit read through NVML and one printed by
    /// nvidia-smi mean the same.
    #[test]
    fn the_reason_bits_are_nvml_s() {
        use nvml_wrapper::bitmasks::device::ThrottleReasons as R;
        let nvml = [
            (R::GPU_IDLE, "gpu idle"),
            (R::APPLICATIONS_CLOCKS_SETTING, "applications clocks setting"),
            (R::SW_POWER_CAP, "software power cap"),
            (R::HW_SLOWDOWN, "hardware slowdown"),
            (R::SYNC_BOOST, "sync boost"),
            (R::SW_THERMAL_SLOWDOWN, "software thermal slowdown"),
            (R::HW_THERMAL_SLOWDOWN, "hardware thermal slowdown"),
            (R::HW_POWER_BRAKE_SLOWDOWN, "hardware power brake slowdown"),
            (R::DISPLAY_CLOCK_SETTING, "display clocks setting"),
        ];
        for (bits, name) in nvml {
            assert_eq!(reasons_of(Some(bits.bits())).0, vec![name.to_string()], "{bits:?}");
        }
        let (reasons, throttled) = reasons_of(Some((R::GPU_IDLE | R::HW_SLOWDOWN).bits()));
        assert_eq!((reasons.len(), throttled), (2, true));
    }

    /// A power cap that slows the SM clock is throttling; one that holds it within 3% of its
    /// maximum is named but not flagged; an idle GPU is neither.
    #[test]
    fn a_power_capped_gpu_is_throttled_when_its_clock_fell_and_an_idle_one_is_not() {
        let line = "GPU-2da2e4a2-ec49, NVIDIA H200, 580.95.05, 1755, 3201, 1980, 41, 512.31, 0x0000000000000004";
        let s = parse_line(line).unwrap();
        assert_eq!(s.sm_clock_mhz, Some(1755));
        assert_eq!(s.mem_clock_mhz, Some(3201));
        assert_eq!(s.throttle_reasons, vec!["software power cap"]);
        assert!(s.throttled);
        let held =
            parse_line("GPU-x, NVIDIA H100 80GB HBM3, 580, 1965, 2619, 1980, 44, 260.9, 0x0000000000000004").unwrap();
        assert_eq!((held.throttle_reasons.len(), held.throttled), (1, false), "1965 of 1980 MHz");
        let blind = parse_line("GPU-x, NVIDIA H200, 580, [N/A], 3201, 1980, 41, 512.31, 0x0000000000000004").unwrap();
        assert!(blind.throttled, "without the clock, the reason decides");
        let idle = parse_line("GPU-x, NVIDIA H200, 580.95.05, 345, 3201, 1980, 30, 75.0, 0x0000000000000001").unwrap();
        assert!(!idle.throttled);
        assert_eq!(idle.throttle_reasons, vec!["gpu idle"]);
        assert!(parse_line("not, enough").is_none());
        let na = parse_line("GPU-x, NVIDIA H200, 580, [N/A], [N/A], [N/A], [N/A], [N/A], [N/A]").unwrap();
        assert_eq!((na.sm_clock_mhz, na.throttled), (None, false));
    }
}
