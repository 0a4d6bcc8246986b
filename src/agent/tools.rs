//! The tools a model may call in a workspace: `search_context`, `read_file` (the workspace and
//! its `context/` only), and the MCP server's own `get_results`, `get_asm`, `diff_asm` and
//! `get_profile` and `get_trace` (the same functions, the same argument types and schemas, so the chat agent
//! and an external agent on `rung mcp` see one interface).

use std::path::{Component, Path, PathBuf};

use schemars::JsonSchema;
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::{ToolBox, ToolOutput, ToolSpec};
use crate::verbs::{self as mcp, AsmArgs, Context, DiffAsmArgs, ToolError, VersionArgs};

/// Lines `read_file` returns unless asked for fewer or more.
pub const DEFAULT_READ_LINES: usize = 400;
/// The largest file `read_file` and `search_context` read.
pub const MAX_FILE_BYTES: u64 = 4 << 20;

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadFileArgs {
    /// A path relative to the workspace (`versions/v002-float4.cu`, `context/cutlass/README.md`).
    pub path: String,
    /// The first line to return, from 1 (default 1).
    #[serde(default)]
    pub start_line: Option<usize>,
    /// At most this many lines (default 400).
    #[serde(default)]
    pub max_lines: Option<usize>,
}

#[derive(Debug, Clone, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Words to look for in the workspace's `context/` documents and code.
    pub query: String,
    /// At most this many passages (default 8).
    #[serde(default)]
    pub max_results: Option<usize>,
}

pub use rung_core::context::Passage;

fn schema_of<T: JsonSchema>() -> Value {
    let mut settings = schemars::generate::SchemaSettings::draft2020_12();
    settings.inline_subschemas = true;
    let schema = settings.into_generator().into_root_schema_for::<T>();
    let mut v = serde_json::to_value(schema).expect("schemas serialise");
    if let Some(o) = v.as_object_mut() {
        o.remove("$schema");
        o.remove("title");
    }
    v
}

/// The paths a model may read: inside the workspace, or inside what `context/` points to (it
/// may be a link to a checkout elsewhere) and the folders rung.toml's context sources link in. Both sides are canonicalised, so `..` and symbolic
/// links are judged by where they really lead; `.rung/` (history, chat files) is refused.
pub fn resolve_readable(root: &Path, rel: &str) -> Result<PathBuf, ToolError> {
    let refuse = |why: &str| {
        ToolError::new(
            Some("path"),
            format!("`{rel}` cannot be read: {why}"),
            "give a path relative to the workspace, inside it or inside context/",
        )
    };
    let root = root.canonicalize().map_err(|e| refuse(&format!("the workspace cannot be opened ({e})")))?;
    let asked = Path::new(rel);
    let full = if asked.is_absolute() { asked.to_path_buf() } else { root.join(asked) };
    let real = full.canonicalize().map_err(|e| refuse(&e.to_string()))?;
    let context = rung_core::context::context_roots(&root);
    let inside = real.starts_with(&root) || context.iter().any(|c| real.starts_with(c));
    if !inside {
        return Err(refuse("it is outside the workspace and its context/"));
    }
    if real.strip_prefix(&root).is_ok_and(|r| r.components().next() == Some(Component::Normal(".rung".as_ref()))) {
        return Err(refuse("rung's own files (.rung/) are not for reading; use get_results"));
    }
    if !real.is_file() {
        return Err(refuse("it is not a file"));
    }
    Ok(real)
}

/// Lines of a readable file, numbered, with a note when more remain.
pub fn read_file(root: &Path, args: &ReadFileArgs) -> Result<String, ToolError> {
    let path = resolve_readable(root, &args.path)?;
    let meta = std::fs::metadata(&path).map_err(|e| ToolError::new(Some("path"), e.to_string(), "check the path"))?;
    if meta.len() > MAX_FILE_BYTES {
        return Err(ToolError::new(
            Some("path"),
            format!("`{}` is {} bytes, more than the {} read_file reads", args.path, meta.len(), MAX_FILE_BYTES),
            "use search_context to find the passage you need",
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| ToolError::new(Some("path"), e.to_string(), "check the path"))?;
    let Ok(text) = String::from_utf8(bytes) else {
        return Err(ToolError::new(Some("path"), format!("`{}` is not UTF-8 text", args.path), "read a text file"));
    };
    let start = args.start_line.unwrap_or(1).max(1);
    let max = args.max_lines.unwrap_or(DEFAULT_READ_LINES).max(1);
    let lines: Vec<&str> = text.lines().collect();
    let mut out = String::new();
    for (i, l) in lines.iter().enumerate().skip(start - 1).take(max) {
        out.push_str(&format!("{:>5}  {l}\n", i + 1));
    }
    let end = (start - 1 + max).min(lines.len());
    if end < lines.len() {
        out.push_str(&format!("… {} more lines (start_line = {})\n", lines.len() - end, end + 1));
    }
    if out.is_empty() {
        out = format!("`{}` has {} lines; nothing from line {start}\n", args.path, lines.len());
    }
    Ok(out)
}

/// How much passage text one search returns at the most, in tokens (about four characters each).
pub const SEARCH_BUDGET_TOKENS: usize = 2000;

/// Passages of `context/` (and rung's own notes) for the query, best first by BM25 over an index
/// kept in `.rung/` and brought up to date first ([`rung_core::context`]).
pub fn search_context(root: &Path, query: &str, limit: usize) -> Result<Vec<Passage>, ToolError> {
    if rung_core::context::terms(query).is_empty() {
        return Err(ToolError::new(
            Some("query"),
            "the query has no words",
            "give words such as `wgmma shared memory`",
        ));
    }
    let state = root.join(rung_core::workspace::STATE_DIR);
    rung_core::context::search(root, &state, query, limit, SEARCH_BUDGET_TOKENS)
        .map_err(|e| ToolError::new(None, e.to_string(), "the index is rebuilt when `.rung/context.sqlite` is removed"))
}

/// The tools of one workspace.
pub struct WorkspaceTools {
    ctx: Context,
}

impl WorkspaceTools {
    pub fn new(root: PathBuf) -> WorkspaceTools {
        WorkspaceTools { ctx: Context::new(root) }
    }

    fn parse<T: DeserializeOwned>(arguments: &str) -> Result<T, ToolError> {
        let text = if arguments.trim().is_empty() { "{}" } else { arguments };
        let de = &mut serde_json::Deserializer::from_str(text);
        serde_path_to_error::deserialize(de).map_err(|e| {
            let field = e.path().to_string();
            let at = if field == "." { String::new() } else { format!(" at `{field}`") };
            ToolError::new(
                Some(field.as_str()).filter(|f| *f != "."),
                format!("the arguments do not fit{at}: {}", e.inner()),
                "call the tool again with arguments matching its schema",
            )
        })
    }

    fn run(&self, name: &str, arguments: &str) -> Result<String, ToolError> {
        let root = &self.ctx.dir;
        Ok(match name {
            "search_context" => {
                let a: SearchArgs = Self::parse(arguments)?;
                let found = search_context(root, &a.query, a.max_results.unwrap_or(8))?;
                if found.is_empty() {
                    format!("nothing in context/ or rung's notes matches `{}`", a.query)
                } else {
                    found.iter().map(|p| format!("{}\n{}\n", p.place(), p.text)).collect::<Vec<_>>().join("\n")
                }
            }
            "read_file" => read_file(root, &Self::parse(arguments)?)?,
            "get_results" => mcp::get_results(&self.ctx, &Self::parse::<VersionArgs>(arguments)?)?.text,
            "get_asm" => mcp::get_asm(&self.ctx, &Self::parse::<AsmArgs>(arguments)?)?.text,
            "diff_asm" => mcp::diff_asm(&self.ctx, &Self::parse::<DiffAsmArgs>(arguments)?)?.text,
            "get_profile" => mcp::get_profile(&self.ctx, &Self::parse::<VersionArgs>(arguments)?)?.text,
            "get_trace" => mcp::get_trace(&self.ctx, &Self::parse::<VersionArgs>(arguments)?)?.text,
            other => {
                return Err(ToolError::new(
                    None,
                    format!("there is no tool `{other}`"),
                    "call one of search_context, read_file, get_results, get_asm, diff_asm, get_profile, get_trace",
                ));
            }
        })
    }
}

impl ToolBox for WorkspaceTools {
    fn specs(&self) -> Vec<ToolSpec> {
        let spec = |name: &str, description: &str, parameters: Value| ToolSpec {
            name: name.into(),
            description: description.into(),
            parameters,
        };
        vec![
            spec(
                "search_context",
                "Search the workspace's context/ folder (documentation, reference code) for passages holding the query's words.",
                schema_of::<SearchArgs>(),
            ),
            spec(
                "read_file",
                "Read a text file of the workspace or its context/ (numbered lines).",
                schema_of::<ReadFileArgs>(),
            ),
            spec(
                "get_results",
                "The latest results of a version: each rung's verdict and summary (build diagnostics, check metrics, bench timings, roofline).",
                schema_of::<VersionArgs>(),
            ),
            spec("get_asm", "A version's SASS or PTX per kernel, with the instruction mix.", schema_of::<AsmArgs>()),
            spec(
                "diff_asm",
                "The SASS or PTX diff of two versions (e.g. parent and child), kernels paired by name, with both instruction mixes.",
                schema_of::<DiffAsmArgs>(),
            ),
            spec("get_profile", "A version's latest profile (Nsight Compute summary).", schema_of::<VersionArgs>()),
            spec(
                "get_trace",
                "A version's latest trace: its rung_trace.cuh (CUDA), `// rung_trace` (PTX), rung_trace.py (Triton), rung_trace_cute.py (CuTe DSL) or rung_trace_tilelang.py (TileLang) sections timed inside the kernel (median, p99, share, per-SM spread).",
                schema_of::<VersionArgs>(),
            ),
        ]
    }

    fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        match self.run(name, arguments) {
            Ok(text) => ToolOutput { text, is_error: false },
            Err(e) => ToolOutput { text: format!("error: {e}"), is_error: true },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workspace() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let ws = tmp.path().join("ws");
        let outside = tmp.path().join("outside");
        std::fs::create_dir_all(ws.join("context/docs")).unwrap();
        std::fs::create_dir_all(ws.join("versions")).unwrap();
        std::fs::create_dir_all(ws.join(".rung/chat")).unwrap();
        std::fs::create_dir_all(&outside).unwrap();
        std::fs::write(outside.join("secret.txt"), "outside\n").unwrap();
        std::fs::write(ws.join(".rung/chat/c.jsonl"), "{}\n").unwrap();
        std::fs::write(ws.join("versions/v001.cu"), "line one\nline two\nline three\n").unwrap();
        std::fs::write(
            ws.join("context/docs/wgmma.md"),
            "# Notes\nwgmma needs shared memory descriptors\nunrelated\nshared memory banks: 32\n",
        )
        .unwrap();
        (tmp, ws, outside)
    }

    #[test]
    fn read_file_stays_inside_workspace_and_context() {
        let (_tmp, ws, outside) = workspace();
        let ok =
            read_file(&ws, &ReadFileArgs { path: "versions/v001.cu".into(), start_line: Some(2), max_lines: Some(1) })
                .unwrap();
        assert_eq!(ok, "    2  line two\n… 1 more lines (start_line = 3)\n");
        for bad in ["../outside/secret.txt", "versions/../../outside/secret.txt", "/etc/passwd", ".rung/chat/c.jsonl"] {
            let e = resolve_readable(&ws, bad).unwrap_err().to_string();
            assert!(e.contains("cannot be read"), "{bad}: {e}");
        }
        // A link inside the workspace to a file outside: judged by its target.
        std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("versions/link.txt")).unwrap();
        let e = resolve_readable(&ws, "versions/link.txt").unwrap_err().to_string();
        assert!(e.contains("outside the workspace"), "{e}");
        // context/ itself may be a link to a checkout elsewhere: its files are readable.
        let ws2 = ws.parent().unwrap().join("ws2");
        std::fs::create_dir_all(&ws2).unwrap();
        std::os::unix::fs::symlink(&outside, ws2.join("context")).unwrap();
        assert!(resolve_readable(&ws2, "context/secret.txt").is_ok());
        assert!(resolve_readable(&ws2, "context/../../ws/versions/v001.cu").is_err());
    }

    /// `context -> /` (or the home folder, or a folder above the workspace) is no context: it
    /// would open every file to the agent and index the disk. A link inside context/ that leaves
    /// it reads nothing and is not indexed.
    #[test]
    fn a_context_link_to_the_disk_or_out_of_context_opens_nothing() {
        let (_tmp, ws, outside) = workspace();
        std::os::unix::fs::symlink(outside.join("secret.txt"), ws.join("context/docs/leak.md")).unwrap();
        assert!(resolve_readable(&ws, "context/docs/leak.md").is_err());
        std::fs::write(outside.join("secret.txt"), "wgmma secret descriptors\n".repeat(5)).unwrap();
        let found = search_context(&ws, "secret", 5).unwrap();
        assert!(found.iter().all(|p| p.path != Path::new("context/docs/leak.md")), "{found:?}");
        let root = ws.parent().unwrap().join("rooted");
        std::fs::create_dir_all(&root).unwrap();
        std::os::unix::fs::symlink("/", root.join("context")).unwrap();
        let e = resolve_readable(&root, "context/etc/passwd").unwrap_err().to_string();
        assert!(e.contains("outside the workspace"), "{e}");
        let t = std::time::Instant::now();
        let found = search_context(&root, "root password", 5).unwrap();
        assert!(t.elapsed() < std::time::Duration::from_secs(5), "no walk of the disk: {:?}", t.elapsed());
        assert!(found.iter().all(|p| !p.path.starts_with("context")), "{found:?}");
        assert!(rung_core::context::context_root(&ws).is_some(), "a plain context/ stays");
    }

    #[test]
    fn search_context_finds_the_workspace_s_passage_and_refuses_an_empty_query() {
        let (_tmp, ws, _) = workspace();
        let found = search_context(&ws, "wgmma descriptors", 5).unwrap();
        assert_eq!(found[0].path, PathBuf::from("context/docs/wgmma.md"));
        assert_eq!(found[0].line, 1);
        assert!(found[0].text.contains("wgmma needs shared memory descriptors"), "{}", found[0].text);
        // The index it kept, in .rung/.
        assert!(ws.join(".rung").join(rung_core::context::INDEX_FILE).is_file());
        assert!(search_context(&ws, "?!", 5).is_err());
    }

    #[test]
    fn tools_report_bad_arguments_and_unknown_tools_as_errors() {
        let (_tmp, ws, _) = workspace();
        let t = WorkspaceTools::new(ws);
        let out = t.call("read_file", r#"{"path": 3}"#);
        assert!(out.is_error && out.text.contains("at `path`"), "{}", out.text);
        assert!(t.call("rm_rf", "{}").is_error);
        let names: Vec<String> = t.specs().into_iter().map(|s| s.name).collect();
        assert_eq!(
            names,
            ["search_context", "read_file", "get_results", "get_asm", "diff_asm", "get_profile", "get_trace"]
        );
        let asm = t.specs().into_iter().find(|s| s.name == "get_asm").unwrap();
        assert_eq!(asm.parameters["required"], serde_json::json!(["version"]));
    }
}
