//! What GPU this machine has, through the CUDA driver loaded at run time (cudarc's
//! `dynamic-loading`): the binary builds and starts on machines without CUDA, and says so.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuInfo {
    pub ordinal: i32,
    pub name: String,
    /// `GPU-xxxxxxxx-...`, as nvidia-smi prints it; the key for per-GPU caches and locks.
    pub uuid: String,
    /// e.g. 90 for sm_90.
    pub compute_capability: u32,
    pub sm_count: u32,
    pub memory_bytes: u64,
}

impl GpuInfo {
    /// The nvcc architecture for this GPU, e.g. `sm_90`.
    pub fn arch(&self) -> String {
        format!("sm_{}", self.compute_capability)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct GpuProbe {
    /// The driver's CUDA version, e.g. 13000 for 13.0.
    pub driver_version: Option<i32>,
    pub devices: Vec<GpuInfo>,
    /// Why there is no GPU, when there is none.
    pub absent_reason: Option<String>,
}

impl GpuProbe {
    /// No GPU, for the reason given.
    pub fn absent(why: impl Into<String>) -> GpuProbe {
        GpuProbe { driver_version: None, devices: Vec::new(), absent_reason: Some(why.into()) }
    }

    pub fn first(&self) -> Option<&GpuInfo> {
        self.devices.first()
    }
}

/// Probes the driver. Never panics: a missing libcuda or a driver error becomes `absent_reason`.
pub fn probe() -> GpuProbe {
    // SAFETY: only tries to dlopen libcuda; no symbol is called.
    if !unsafe { cudarc::driver::sys::is_culib_present() } {
        return GpuProbe::absent("no NVIDIA driver (libcuda.so not found)");
    }
    match std::panic::catch_unwind(probe_driver) {
        Ok(Ok(p)) => p,
        Ok(Err(e)) => GpuProbe::absent(format!("the CUDA driver failed: {e:?}")),
        Err(_) => GpuProbe::absent("the CUDA driver library could not be used"),
    }
}

fn probe_driver() -> Result<GpuProbe, cudarc::driver::DriverError> {
    use cudarc::driver::result;
    use cudarc::driver::sys::CUdevice_attribute as A;
    result::init()?;
    let mut driver_version = 0i32;
    // SAFETY: a valid out-pointer to an int.
    unsafe { cudarc::driver::sys::cuDriverGetVersion(&mut driver_version) }.result()?;
    let count = result::device::get_count()?;
    let mut devices = Vec::new();
    for ordinal in 0..count {
        let dev = result::device::get(ordinal)?;
        // SAFETY: `dev` is a valid device handle from cuDeviceGet.
        let attr = |a| unsafe { result::device::get_attribute(dev, a) };
        let major = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR)?;
        let minor = attr(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)?;
        let uuid = result::device::get_uuid(dev)?;
        // SAFETY: as above.
        let memory_bytes = unsafe { result::device::total_mem(dev) }? as u64;
        devices.push(GpuInfo {
            ordinal,
            name: result::device::get_name(dev)?,
            uuid: format_uuid(&uuid.bytes.map(|b| b as u8)),
            compute_capability: (major * 10 + minor) as u32,
            sm_count: attr(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT)? as u32,
            memory_bytes,
        });
    }
    let absent_reason = devices.is_empty().then(|| "the driver sees no GPU".to_string());
    Ok(GpuProbe { driver_version: Some(driver_version), devices, absent_reason })
}

fn format_uuid(b: &[u8; 16]) -> String {
    let hex: Vec<String> = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "GPU-{}-{}-{}-{}-{}",
        hex[0..4].concat(),
        hex[4..6].concat(),
        hex[6..8].concat(),
        hex[8..10].concat(),
        hex[10..16].concat()
    )
}

/// This machine's name.
pub fn host_name() -> String {
    std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_string())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".into())
}

/// `slurm job 12` inside a Slurm job (its results say so in the history).
pub fn slurm_job() -> Option<String> {
    std::env::var("SLURM_JOB_ID").ok().filter(|j| !j.is_empty()).map(|j| format!("slurm job {j}"))
}

/// Where a check runs when it runs here: this machine, and its first GPU.
pub fn ran_on_here(gpu: &GpuProbe) -> crate::model::report::RanOn {
    let first = gpu.first();
    crate::model::report::RanOn {
        host: host_name(),
        gpu: first.map(|g| g.name.clone()),
        uuid: first.map(|g| g.uuid.clone()),
        device: None,
        runner: slurm_job(),
    }
}

/// The memory this machine has free for new work (`MemAvailable` of /proc/meminfo), in bytes;
/// `u64::MAX` where that cannot be read, so nothing is refused on a guess.
pub fn available_memory() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|t| {
            let line = t.lines().find(|l| l.starts_with("MemAvailable:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(u64::MAX, |kb| kb.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    #[test]
    fn uuid_formats_like_nvidia_smi() {
        let b = [0x5a, 0x1b, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 0xff];
        assert_eq!(super::format_uuid(&b), "GPU-5a1b0001-0203-0405-0607-08090a0b0cff");
    }

    #[test]
    fn probe_never_panics() {
        let p = super::probe();
        assert_eq!(p.devices.is_empty(), p.absent_reason.is_some());
    }
}
