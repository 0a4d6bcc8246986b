//! `rung worker`: the native worker, a child process that launches CUDA kernels through the
//! driver (cudarc, loaded at run time). It executes and never judges: buffers come from files
//! rung wrote, go to the GPU, the kernel runs, and every buffer (inputs too, so rung can see a
//! kernel that mutates them) is written back to its file. A fault (illegal address, a sticky
//! CUDA error) ends this process only; rung starts a fresh worker for the next check.
//!
//! Protocol: JSON lines, handshake first, as the Python worker:
//!   {"protocol": 1, "worker": "native", "capabilities": ["launch"], "gpu": "NVIDIA H200"}
//!   {"id": 1, "op": "launch", "cubin": "...", "kernel": "rmsnorm", "grid": [16384,1,1],
//!    "block": [256,1,1], "smem": 0,
//!    "params": [{"buffer": "/dev/shm/.../x.bin"}, {"scalar": {"ctype": "float", "value": 1e-6}}]}
//!   -> {"id": 1, "ok": true, "seconds": 0.0031}
//!   -> {"id": 1, "ok": false, "error": {"type": "CUDA_ERROR_ILLEGAL_ADDRESS", "message": "..."}}

use std::ffi::{CString, c_void};
use std::io::{BufRead, Write};

use serde::Deserialize;
use serde_json::json;

use cudarc::driver::{result, sys};

#[derive(Deserialize)]
struct Request {
    id: Option<u64>,
    op: String,
    #[serde(default)]
    cubin: String,
    #[serde(default)]
    kernel: String,
    #[serde(default)]
    grid: [u32; 3],
    #[serde(default)]
    block: [u32; 3],
    #[serde(default)]
    smem: u32,
    #[serde(default)]
    params: Vec<Param>,
}

#[derive(Deserialize)]
#[serde(rename_all = "lowercase")]
enum Param {
    Buffer(String),
    Scalar { ctype: String, value: f64 },
}

/// A kernel argument's bytes for its C type.
fn scalar_bytes(ctype: &str, v: f64) -> Result<Vec<u8>, String> {
    Ok(match ctype {
        "float" => (v as f32).to_le_bytes().to_vec(),
        "double" => v.to_le_bytes().to_vec(),
        "__half" | "half" => half::f16::from_f64(v).to_le_bytes().to_vec(),
        "__nv_bfloat16" | "nv_bfloat16" => half::bf16::from_f64(v).to_le_bytes().to_vec(),
        "int" | "int32_t" => (v as i32).to_le_bytes().to_vec(),
        "unsigned" | "unsigned int" | "uint32_t" => (v as u32).to_le_bytes().to_vec(),
        "long" | "long long" | "int64_t" => (v as i64).to_le_bytes().to_vec(),
        "unsigned long" | "unsigned long long" | "uint64_t" | "size_t" => (v as u64).to_le_bytes().to_vec(),
        "short" | "int16_t" => (v as i16).to_le_bytes().to_vec(),
        other => return Err(format!("no by-value encoding for `{other}`")),
    })
}

fn err_json(e: cudarc::driver::DriverError) -> serde_json::Value {
    let name = e.error_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|_| format!("{e:?}"));
    let msg = e.error_string().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    json!({ "type": name, "message": msg })
}

/// Serves requests on stdin until `exit` or end of input. Returns the process exit code.
pub fn serve() -> i32 {
    let mut out = std::io::stdout().lock();
    let gpu = crate::gpu::probe();
    let Some(info) = gpu.first().cloned() else {
        let _ = writeln!(
            out,
            "{}",
            json!({ "protocol": 1, "worker": "native", "capabilities": [], "error": gpu.absent_reason })
        );
        return 1;
    };
    // SAFETY: plain driver calls on device 0; the context lives until the process ends.
    let ctx = match cudarc::driver::CudaContext::new(info.ordinal as usize) {
        Ok(c) => c,
        Err(e) => {
            let _ = writeln!(
                out,
                "{}",
                json!({ "protocol": 1, "worker": "native", "capabilities": [], "error": err_json(e) })
            );
            return 1;
        }
    };
    let _ = writeln!(
        out,
        "{}",
        json!({ "protocol": 1, "worker": "native", "capabilities": ["launch"], "gpu": info.name, "uuid": info.uuid })
    );
    let _ = out.flush();
    for line in std::io::stdin().lock().lines().map_while(Result::ok) {
        if line.trim().is_empty() {
            continue;
        }
        let req: Request = match serde_json::from_str(&line) {
            Ok(r) => r,
            Err(e) => {
                let _ = writeln!(
                    out,
                    "{}",
                    json!({ "ok": false, "error": { "type": "BadRequest", "message": e.to_string() } })
                );
                continue;
            }
        };
        if req.op == "exit" {
            break;
        }
        let _ = ctx.bind_to_thread();
        let resp = match launch(&req) {
            Ok(seconds) => json!({ "id": req.id, "ok": true, "seconds": seconds }),
            Err(e) => json!({ "id": req.id, "ok": false, "error": e }),
        };
        let sticky = resp["ok"] == false && resp["error"]["type"].as_str().is_some_and(|t| t.starts_with("CUDA_ERROR"));
        let _ = writeln!(out, "{resp}");
        let _ = out.flush();
        if sticky {
            // The context may be unusable: let rung start a fresh worker.
            return 2;
        }
    }
    0
}

fn launch(req: &Request) -> Result<f64, serde_json::Value> {
    let io = |what: &str, e: std::io::Error| json!({ "type": "IoError", "message": format!("{what}: {e}") });
    let mut image = std::fs::read(&req.cubin).map_err(|e| io(&req.cubin, e))?;
    image.push(0);
    // Host copies of every buffer, their device pointers, and the argument bytes.
    let mut host: Vec<(String, Vec<u8>)> = Vec::new();
    for p in &req.params {
        if let Param::Buffer(path) = p {
            host.push((path.clone(), std::fs::read(path).map_err(|e| io(path, e))?));
        }
    }
    // SAFETY: every pointer below comes from the driver and is freed before returning; the
    // argument array points at locals that outlive the launch (it is synchronised).
    unsafe {
        let module = result::module::load_data(image.as_ptr() as *const c_void).map_err(err_json)?;
        let name =
            CString::new(req.kernel.clone()).map_err(|_| json!({ "type": "BadRequest", "message": "kernel name" }))?;
        let func = result::module::get_function(module, name).map_err(err_json)?;
        if req.smem > 48 * 1024 {
            result::function::set_function_attribute(
                func,
                sys::CUfunction_attribute::CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                req.smem as i32,
            )
            .map_err(err_json)?;
        }
        let mut dptrs = Vec::new();
        for (_, bytes) in &host {
            let d = result::malloc_sync(bytes.len().max(1)).map_err(err_json)?;
            result::memcpy_htod_sync(d, bytes).map_err(err_json)?;
            dptrs.push(d);
        }
        let mut arg_bytes: Vec<Vec<u8>> = Vec::new();
        let mut next_buf = 0;
        for p in &req.params {
            match p {
                Param::Buffer(_) => {
                    arg_bytes.push(dptrs[next_buf].to_le_bytes().to_vec());
                    next_buf += 1;
                }
                Param::Scalar { ctype, value } => arg_bytes
                    .push(scalar_bytes(ctype, *value).map_err(|m| json!({ "type": "BadRequest", "message": m }))?),
            }
        }
        let mut args: Vec<*mut c_void> = arg_bytes.iter_mut().map(|b| b.as_mut_ptr() as *mut c_void).collect();
        let t0 = std::time::Instant::now();
        let g = req.grid;
        let b = req.block;
        result::launch_kernel(func, (g[0], g[1], g[2]), (b[0], b[1], b[2]), req.smem, std::ptr::null_mut(), &mut args)
            .map_err(err_json)?;
        result::ctx::synchronize().map_err(err_json)?;
        let seconds = t0.elapsed().as_secs_f64();
        for ((path, bytes), d) in host.iter_mut().zip(&dptrs) {
            result::memcpy_dtoh_sync(bytes, *d).map_err(err_json)?;
            std::fs::write(&*path, &*bytes).map_err(|e| io(path, e))?;
        }
        for d in dptrs {
            let _ = result::free_sync(d);
        }
        let _ = result::module::unload(module);
        Ok(seconds)
    }
}
