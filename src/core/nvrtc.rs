//! NVRTC, the CUDA compiler as a library, for machines with libnvrtc but no nvcc.
//!
//! NVRTC finds its builtins library through the dynamic loader, so it must run in a process
//! whose LD_LIBRARY_PATH names NVRTC's folder: the build rung re-runs this binary as
//! `rung internal-nvrtc` with that set, and this module is what that child calls.

use std::ffi::CString;

pub struct NvrtcOutcome {
    pub log: String,
    /// The PTX, when compilation succeeded.
    pub ptx: Option<Vec<u8>>,
}

fn c_text(v: Vec<std::ffi::c_char>) -> String {
    let bytes: Vec<u8> = v.into_iter().map(|c| c as u8).take_while(|b| *b != 0).collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

/// Why NVRTC could not be used at all (a program that does not compile is an outcome, not this).
#[derive(Debug, thiserror::Error)]
pub enum NvrtcError {
    #[error("libnvrtc.so.13 not found on the library path")]
    NotFound,
    #[error("{0} contains a NUL byte")]
    Nul(String),
    #[error("{0}: {1}")]
    Call(&'static str, String),
}

/// Compiles `source` (named `name` in diagnostics) with NVRTC options such as
/// `--gpu-architecture=compute_90`. Errors loading NVRTC itself are `Err`.
pub fn compile(source: &str, name: &str, options: &[String]) -> Result<NvrtcOutcome, NvrtcError> {
    use cudarc::nvrtc::result;
    // SAFETY: only tries to dlopen libnvrtc; no symbol is called.
    if !unsafe { cudarc::nvrtc::sys::is_culib_present() } {
        return Err(NvrtcError::NotFound);
    }
    let src = CString::new(source).map_err(|_| NvrtcError::Nul(format!("{name}: the source")))?;
    let cname = CString::new(name).map_err(|_| NvrtcError::Nul("the program name".into()))?;
    let prog = result::create_program(&src, Some(&cname))
        .map_err(|e| NvrtcError::Call("nvrtcCreateProgram", format!("{e:?}")))?;
    // SAFETY: `prog` was just created and is destroyed below, after its last use.
    let compiled = unsafe { result::compile_program(prog, options) };
    // SAFETY: as above.
    let log = unsafe { result::get_program_log(prog) }.map(c_text).unwrap_or_default();
    let ptx = match compiled {
        // SAFETY: as above.
        Ok(()) => {
            Some(unsafe { result::get_ptx(prog) }.map_err(|e| NvrtcError::Call("nvrtcGetPTX", format!("{e:?}")))?)
        }
        Err(_) => None,
    };
    // SAFETY: as above; not used afterwards.
    let _ = unsafe { result::destroy_program(prog) };
    Ok(NvrtcOutcome { log, ptx: ptx.map(|p| c_text(p).into_bytes()) })
}
