//! The verbs an agent can call on a workspace (list, read, submit, check, results, listings,
//! diffs, profile, history), as plain functions over the core: open the workspace and the history,
//! call the service the CLI calls, and return a typed result with a short text for the model. The
//! MCP server (`rung::mcp`) wires them to the protocol; the chat agent ([`crate`]) hands the same
//! verbs to its model.
//!
//! Every call reads the workspace again, so files written by a person, an editor or
//! `submit_version` are seen at once. Builds and checks go through one [`Engine`], whose workers
//! stay alive between calls (the Python zygote keeps its imports warm).

mod args;
mod assembly;
mod history;
mod out;
mod results;
mod versions;

pub use args::*;
pub use assembly::*;
pub use history::*;
pub use out::*;
pub use results::*;
pub use versions::*;

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use schemars::JsonSchema;
use serde::Serialize;

use rung_core::check::Machine;
use rung_core::model::report::Verdict;
use rung_core::runners::Runners;
use rung_core::store::{ResultRow, Store, StoreError};
use rung_core::workspace::{self, Format, VersionFile, VersionKind, Workspace};

/// The largest source `submit_version` accepts: 1 MiB.
pub const MAX_SOURCE_BYTES: usize = 1 << 20;
/// The longest name (after lowering to `[a-z0-9-]`) a submitted version's file gets.
pub const MAX_NAME_CHARS: usize = 48;
/// Listing lines `get_asm` returns unless asked for more.
pub const DEFAULT_ASM_LINES: usize = 2000;
/// Hunk rows `diff_asm` returns unless asked for more.
pub const DEFAULT_DIFF_ROWS: usize = 800;
/// Results `history` returns unless asked for more.
pub const DEFAULT_HISTORY: usize = 20;
/// Diagnostics quoted per stage in a text summary (all of them are in the structured content).
const TEXT_DIAGNOSTICS: usize = 8;

/// A tool call that could not do what was asked: what was wrong and what to do instead. It goes
/// back to the client as a tool error (`isError: true`); the server keeps serving.
#[derive(Debug, Clone, PartialEq, Serialize, JsonSchema)]
pub struct ToolError {
    /// The argument at fault, when one is.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    pub error: String,
    pub help: String,
}

impl ToolError {
    pub fn new(field: Option<&str>, error: impl Into<String>, help: impl Into<String>) -> ToolError {
        ToolError { field: field.map(str::to_string), error: error.into(), help: help.into() }
    }
}

impl std::fmt::Display for ToolError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}\n  help: {}", self.error, self.help)
    }
}

impl From<StoreError> for ToolError {
    fn from(e: StoreError) -> ToolError {
        ToolError::new(
            None,
            format!("the history store failed: {e}"),
            "this is rung's own database (.rung/history.db), not the version's fault: retry the call; if it keeps failing, delete .rung/ (rung rebuilds it)",
        )
    }
}

/// A successful call: the text a model reads and the structured content a program reads.
#[derive(Debug, Clone)]
pub struct Reply {
    pub text: String,
    pub data: serde_json::Value,
}

impl Reply {
    fn new<T: Serialize>(text: String, data: &T) -> Result<Reply, ToolError> {
        let data = serde_json::to_value(data).map_err(|e| {
            ToolError::new(None, format!("the result could not be serialised: {e}"), "this is a bug in rung; report it")
        })?;
        Ok(Reply { text, data })
    }
}

/// The machine's tools and the workers, found and started on first need and kept between calls.
#[derive(Default)]
pub struct Engine {
    machine: Option<Machine>,
    runners: Option<Runners>,
}

/// What every tool works on: the workspace folder and the shared engine.
pub struct Context {
    pub dir: PathBuf,
    engine: Mutex<Engine>,
    /// One submission at a time, so two never take the same id.
    submitting: Mutex<()>,
}

impl Context {
    pub fn new(dir: PathBuf) -> Context {
        Context { dir, engine: Mutex::new(Engine::default()), submitting: Mutex::new(()) }
    }

    /// The engine, one build or check at a time. A call that panicked does not poison it for the
    /// next one.
    fn engine(&self) -> MutexGuard<'_, Engine> {
        self.engine.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Stops the workers (the zygote and the native worker), unless a build or check still
    /// holds them: exiting does not wait for it, and the workers end with their closed pipes.
    pub fn shutdown(&self) {
        let runners = match self.engine.try_lock() {
            Ok(mut e) => e.runners.take(),
            Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner().runners.take(),
            Err(std::sync::TryLockError::WouldBlock) => None,
        };
        drop(runners);
    }

    fn workspace(&self) -> Result<Workspace, ToolError> {
        Workspace::open(&self.dir).map_err(|e| {
            ToolError::new(
                None,
                format!("the workspace {} cannot be opened: {e}", self.dir.display()),
                "fix the file named above (rung reads the workspace again on every call), or start `rung mcp -C DIR` in a kernel workspace",
            )
        })
    }
}

fn open_store(ws: &Workspace) -> Result<Store, ToolError> {
    Store::open(&ws.state_dir()).map_err(ToolError::from)
}

/// The version named by `want` (an id, a file stem or a path), or an error listing the others.
fn find_version<'w>(ws: &'w Workspace, field: &str, want: &str) -> Result<&'w VersionFile, ToolError> {
    ws.version(want).ok_or_else(|| no_version(ws, field, want))
}

/// `field` names no version of the workspace: the error names the ones there are.
fn no_version(ws: &Workspace, field: &str, want: &str) -> ToolError {
    let ids: Vec<&str> = ws.versions.iter().map(|v| v.id.as_str()).collect();
    ToolError::new(
        Some(field),
        format!("{field}: no version `{want}` in {}", ws.root.join(workspace::VERSIONS_DIR).display()),
        if ids.is_empty() {
            "there are no versions yet: write one with submit_version".to_string()
        } else {
            format!("name one of: {} (list_versions describes them)", ids.join(", "))
        },
    )
}

fn read_source(ws: &Workspace, v: &VersionFile) -> Result<String, ToolError> {
    ws.read_source(v).map_err(|e| {
        ToolError::new(
            None,
            format!("cannot read {}: {e}", v.path.display()),
            "the file may have been deleted or renamed meanwhile: call list_versions",
        )
    })
}

fn summary_of(row: &ResultRow) -> String {
    row.payload.get("summary").and_then(|s| s.as_str()).unwrap_or("").to_string()
}

fn worst(verdicts: impl Iterator<Item = Verdict>) -> Option<Verdict> {
    verdicts.max()
}

fn symbol(verdict: &str) -> &'static str {
    Verdict::parse(verdict).map_or("?", Verdict::symbol)
}

/// `rung`, `gpu-mode`, `kernel-bench`: the format as the JSON output spells it.
fn format_name(format: Format) -> String {
    serde_json::to_value(format).ok().and_then(|f| f.as_str().map(str::to_string)).unwrap_or_default()
}

/// The language tag of a fenced block of this kind's source.
fn fence(kind: VersionKind) -> &'static str {
    match kind {
        VersionKind::Cuda | VersionKind::CudaHost => "cuda",
        VersionKind::Ptx => "ptx",
        _ => "python",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_lowered_and_traversal_is_refused() {
        assert_eq!(sanitise_name("Float4 FMA").unwrap(), "float4-fma");
        assert_eq!(sanitise_name("  unroll_x4!! ").unwrap(), "unroll-x4");
        assert_eq!(sanitise_name("a.b").unwrap(), "a-b");
        for bad in ["../../x", "a/b", "a\\b", "..", ".hidden", "x..y"] {
            let e = sanitise_name(bad).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("name"), "{bad}");
            assert!(e.error.contains("may not contain"), "{bad}: {e}");
        }
        assert!(sanitise_name("!!!").unwrap_err().error.contains("no letters or digits"));
        assert_eq!(sanitise_name(&"x".repeat(200)).unwrap().len(), MAX_NAME_CHARS);
    }
}
