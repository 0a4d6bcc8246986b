//! A version's PTX or SASS from its current source, and the diff of two: built on demand, once,
//! for the CLI's `rung diff`, the MCP server's `get_asm`/`diff_asm` and the agent alike.

use std::path::PathBuf;

use crate::asm::diff::AsmDiff;
use crate::asm::{self, AsmKind, KernelListing, Normalize};
use crate::check::{self, CheckOptions, Machine};
use crate::model::diag::Diagnostic;
use crate::model::report::{Stage, Verdict};
use crate::runners::Runners;
use crate::store::{Store, StoreError, sha256_hex};
use crate::workspace::{VersionFile, Workspace};

/// One version's parsed listing of one kind.
#[derive(Debug, Clone)]
pub struct Listing {
    pub version: String,
    pub kind: AsmKind,
    pub kernels: Vec<KernelListing>,
    /// The dump files it was read from, relative to the workspace root.
    pub files: Vec<PathBuf>,
    /// Whether this call built the version (its last build was missing or of another source).
    pub built_now: bool,
}

/// Why a listing could not be had.
#[derive(Debug, thiserror::Error)]
pub enum ListingError {
    #[error("cannot read {}: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    /// The version does not build; the failing rung's summary and diagnostics say why.
    #[error("{id} does not build, so it has no {kind}: {stage}: {summary}", kind = kind.label())]
    Build {
        id: String,
        kind: AsmKind,
        stage: Stage,
        /// `Fail`: the version's fault; `Error`: the machine's (no compiler, say).
        verdict: Verdict,
        summary: String,
        diagnostics: Vec<Diagnostic>,
    },
    /// The version built, and its cubin's disassembler failed.
    #[error("{id} builds, and its SASS listing was not made: {message}")]
    Disassembly { id: String, message: String },
    #[error("the build of {id} was cancelled")]
    Cancelled { id: String },
    /// It builds but left no listing of this kind: a Triton version's SASS, say, exists only once
    /// it has run on a GPU.
    #[error("{id} has no {kind} in {} although it builds", dir.display(), kind = kind.label())]
    Missing { id: String, kind: AsmKind, dir: PathBuf, gpu: bool },
    /// `kernel` named none of the version's kernels.
    #[error("{} kernel `{kernel}` in its {}", who(ids), kind.label())]
    NoKernel { ids: Vec<String>, kind: AsmKind, kernel: String, known: Vec<String> },
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// "v001 has" or "neither v001 nor v002 has".
fn who(ids: &[String]) -> String {
    match ids {
        [a, b] => format!("neither {a} nor {b} has a"),
        _ => format!("{} has no", ids.join(", ")),
    }
}

impl ListingError {
    /// What to do about it, in one line.
    pub fn help(&self) -> String {
        match self {
            ListingError::Read { .. } => "the file may have been deleted or renamed meanwhile".into(),
            ListingError::Build { verdict: Verdict::Error, .. } => {
                "the version is not at fault: see to what the message names, then ask again".into()
            }
            ListingError::Build { .. } => "fix the source; `rung check` shows every diagnostic".into(),
            ListingError::Cancelled { .. } => "ask again".into(),
            ListingError::Disassembly { .. } => {
                "ask for the PTX, or see to the disassembler the message names (`rung doctor`)".into()
            }
            ListingError::Missing { gpu: true, kind, .. } => {
                format!("the version ran and still left no {}: ask for the other kind", kind.label())
            }
            ListingError::Missing { kind, .. } => format!(
                "some versions get their {} only when they run (Triton on a GPU): check it on a machine with a GPU, or ask for the other kind",
                kind.label()
            ),
            ListingError::NoKernel { known, .. } => {
                format!("name one of: {} (or leave the kernel out for all)", known.join(", "))
            }
            ListingError::Store(_) => "the history database could not be read; `rung doctor` says more".into(),
        }
    }
}

/// `v`'s listing of `kind` from its current source, built first when the listing is missing or
/// the last build was of another source: prepare and build, recorded as any check's are, and
/// when that leaves no listing and a GPU is here, a check without the bench (a Triton version's
/// SASS comes from its run). `runners` keeps the workers warm across calls.
pub fn listing(
    ws: &Workspace,
    store: &mut Store,
    v: &VersionFile,
    kind: AsmKind,
    machine: &Machine,
    runners: &mut Option<Runners>,
) -> Result<Listing, ListingError> {
    let source = ws.read_source(v).map_err(|source| ListingError::Read { path: v.path.clone(), source })?;
    let hash = sha256_hex(source.as_bytes());
    let built_fresh = store
        .latest_results(&v.id)?
        .iter()
        .any(|r| r.stage == Stage::Build.name() && r.verdict == Verdict::Pass.name() && r.source_hash == hash);
    let mut built_now = false;
    // A SASS listing follows its build: waited for when this process is making it, made here
    // when it is missing beside its cubin. Its error stands when no listing is had at all.
    let limit = ws.build_limit();
    let sass_now = || match kind {
        AsmKind::Sass => {
            crate::stages::build::sass::ensure(&ws.root, &ws.state_dir(), &v.id, &machine.toolchain, limit)
        }
        AsmKind::Ptx => Ok(()),
    };
    let mut made = sass_now();
    // Whether a listing is there, without reading it (a SASS listing runs to megabytes).
    let listed = || !crate::workspace::dump_files(&ws.state_dir(), &v.id, kind.ext()).is_empty();
    if !built_fresh || !listed() {
        let seed = store.next_seed(check::draw_seed)?;
        let Some(built) = check::build_phase(ws, store, v, seed, machine, None)? else {
            return Err(ListingError::Cancelled { id: v.id.clone() });
        };
        if !built.runnable {
            let failed = built.stages.iter().find(|s| s.verdict != Verdict::Pass);
            return Err(ListingError::Build {
                id: v.id.clone(),
                kind,
                stage: failed.map_or(Stage::Build, |s| s.stage),
                verdict: failed.map_or(Verdict::Fail, |s| s.verdict),
                summary: failed.map(|s| s.summary.clone()).unwrap_or_default(),
                diagnostics: failed.map(|s| s.diagnostics.clone()).unwrap_or_default(),
            });
        }
        built_now = true;
        made = sass_now();
        let gpu = !machine.gpu.devices.is_empty();
        if gpu && !listed() {
            let opts = CheckOptions { versions: vec![v.id.clone()], seed: None, no_bench: true };
            check::check_with(ws, store, &opts, machine, runners)?;
        }
    }
    let Some((files, text)) = ws.dumps(&v.id, kind.ext()) else {
        made.map_err(|e| ListingError::Disassembly { id: v.id.clone(), message: e.to_string() })?;
        return Err(ListingError::Missing {
            id: v.id.clone(),
            kind,
            dir: ws.state_dir().join(crate::store::DUMPS_DIR).join(&v.id),
            gpu: !machine.gpu.devices.is_empty(),
        });
    };
    Ok(Listing { version: v.id.clone(), kind, kernels: asm::parse(kind, &text), files, built_now })
}

impl Listing {
    /// Keeps only the kernel named `name`; an error names the kernels there are.
    pub fn only(mut self, name: &str) -> Result<Listing, ListingError> {
        let known: Vec<String> = self.kernels.iter().map(|k| k.name.clone()).collect();
        self.kernels.retain(|k| k.name == name);
        if self.kernels.is_empty() {
            return Err(ListingError::NoKernel {
                ids: vec![self.version],
                kind: self.kind,
                kernel: name.to_string(),
                known,
            });
        }
        Ok(self)
    }
}

/// Two versions' listings side by side, kernel by kernel; `kernel` keeps one kernel (an error
/// only when neither version has it).
pub struct AsmComparison {
    pub a: Listing,
    pub b: Listing,
    pub diff: AsmDiff,
}

/// What to compare: two versions' listings of one kind, perhaps of one kernel.
pub struct DiffQuery<'a> {
    pub a: &'a VersionFile,
    pub b: &'a VersionFile,
    pub kind: AsmKind,
    pub kernel: Option<&'a str>,
    pub norm: Normalize,
}

/// The diff of two versions' listings, each built first when needed.
pub fn diff(
    ws: &Workspace,
    store: &mut Store,
    q: &DiffQuery<'_>,
    machine: &Machine,
    runners: &mut Option<Runners>,
) -> Result<AsmComparison, ListingError> {
    let mut la = listing(ws, store, q.a, q.kind, machine, runners)?;
    let mut lb = listing(ws, store, q.b, q.kind, machine, runners)?;
    if let Some(k) = q.kernel {
        let mut known: Vec<String> = la.kernels.iter().chain(&lb.kernels).map(|l| l.name.clone()).collect();
        la.kernels.retain(|l| l.name == k);
        lb.kernels.retain(|l| l.name == k);
        if la.kernels.is_empty() && lb.kernels.is_empty() {
            known.sort();
            known.dedup();
            return Err(ListingError::NoKernel {
                ids: vec![q.a.id.clone(), q.b.id.clone()],
                kind: q.kind,
                kernel: k.to_string(),
                known,
            });
        }
    }
    let diff = asm::diff::diff(q.kind, &la.kernels, &lb.kernels, q.norm);
    Ok(AsmComparison { a: la, b: lb, diff })
}
