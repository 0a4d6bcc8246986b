//! `rung mcp`: the workspace's loop as a Model Context Protocol server on standard input and
//! output (the official `rmcp` SDK). A thin shell like the CLI: each tool is a function of
//! [`crate::verbs`] over the core, run on a blocking thread; this module declares the tools, their
//! descriptions and schemas (generated from the argument and result types), and turns results
//! into a short text for the model plus structured content for programs.
//!
//! Standard output carries the protocol only. The transport gets its own copies of the standard
//! streams; file descriptors 0 and 1 then point at /dev/null and standard error, so a tool or a
//! child process that reads standard input or prints can never corrupt the stream.

use crate::verbs;

use std::path::Path;
use std::sync::Arc;

use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::tool::{ToolCallContext, schema_for_output};
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Implementation, ServerCapabilities,
    ServerConfig,
};
use rmcp::service::RequestContext;
use rmcp::{ErrorData, RoleServer, ServerHandler, ServiceExt, tool, tool_handler, tool_router};

use crate::model::report::CheckReport;
use crate::verbs::{
    AsmArgs, AsmOut, CheckArgs, Context, DiffAsmArgs, DiffAsmOut, HistoryArgs, HistoryOut, ProfileOut, Reply,
    ResultsOut, SourceOut, SubmitArgs, SubmitOut, ToolError, TraceOut, VersionArgs, VersionsOut,
};

/// What a client is told about this server when it connects.
const INSTRUCTIONS: &str = "rung: a workbench for GPU kernels. The workspace holds one problem (rung.toml, a trusted \
reference) and its versions (versions/vNNN-name.cu|.py|.ptx). Every version climbs the same rungs: prepare, build, run, \
check against the reference, bench, roofline. A fast version that is wrong is a failure; a rung that cannot run on this \
machine says `skipped` and why, and no number is invented. The loop: list_versions, read_version, submit_version (a new \
proposed version, with its parent), check (waits for the results), get_results, get_asm and diff_asm (SASS or PTX with the \
instruction mix), history.";

#[derive(Clone)]
pub struct RungServer {
    ctx: Arc<Context>,
    tool_router: ToolRouter<RungServer>,
}

impl RungServer {
    pub fn new(ctx: Arc<Context>) -> RungServer {
        RungServer { ctx, tool_router: Self::tool_router() }
    }

    /// Runs a tool on a blocking thread (they read files, run compilers and wait for workers)
    /// and turns its outcome into a tool result.
    async fn run<F>(&self, f: F) -> CallToolResult
    where
        F: FnOnce(&Context) -> Result<Reply, ToolError> + Send + 'static,
    {
        let ctx = self.ctx.clone();
        match tokio::task::spawn_blocking(move || f(&ctx)).await {
            Ok(Ok(reply)) => success(reply),
            Ok(Err(e)) => failure(&e),
            Err(join) => failure(&ToolError::new(
                None,
                format!("the tool stopped unexpectedly: {join}"),
                "this is a bug in rung, not in the version; the server keeps serving, so other calls still work",
            )),
        }
    }
}

fn success(reply: Reply) -> CallToolResult {
    let mut r = CallToolResult::success(vec![ContentBlock::text(reply.text)]);
    r.structured_content = Some(reply.data);
    r
}

fn failure(e: &ToolError) -> CallToolResult {
    let mut r = CallToolResult::error(vec![ContentBlock::text(format!("error: {e}"))]);
    r.structured_content = serde_json::to_value(e).ok();
    r
}

#[tool_router]
impl RungServer {
    #[tool(
        description = "The workspace's versions: id, file, kind, review status (draft, proposed, approved, rejected), parent, and the latest verdict of every rung.",
        output_schema = schema_for_output::<VersionsOut>(),
        annotations(read_only_hint = true)
    )]
    async fn list_versions(&self) -> CallToolResult {
        self.run(verbs::list_versions).await
    }

    #[tool(
        description = "A version's source file, with its status and parent.",
        output_schema = schema_for_output::<SourceOut>(),
        annotations(read_only_hint = true)
    )]
    async fn read_version(&self, Parameters(args): Parameters<VersionArgs>) -> CallToolResult {
        self.run(move |c| verbs::read_version(c, &args)).await
    }

    #[tool(
        description = "Write a new version, status proposed: versions/vNNN-<name>.<extension> with the next free id; never overwrites a file. `name` is lowered to [a-z0-9-] and may not contain `/`, `\\`, `..` or start with `.`; `source` is at most 1 MiB (1,048,576 bytes). Name the version it derives from as `parent`. Then call check on the new id.",
        output_schema = schema_for_output::<SubmitOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = false)
    )]
    async fn submit_version(&self, Parameters(args): Parameters<SubmitArgs>) -> CallToolResult {
        self.run(move |c| verbs::submit_version(c, &args)).await
    }

    #[tool(
        description = "Climb the rungs (prepare, build, run, check against the reference, bench, roofline) for some versions, default all, and wait for the results; every result is recorded in the history. The structured result is `rung check --json`'s document.",
        output_schema = schema_for_output::<CheckReport>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true)
    )]
    async fn check(&self, Parameters(args): Parameters<CheckArgs>) -> CallToolResult {
        self.run(move |c| verbs::check(c, &args)).await
    }

    #[tool(
        description = "A version's latest result of every rung (summary, reason, diagnostics with file, line and help, metrics, timings), and whether each is for its current source.",
        output_schema = schema_for_output::<ResultsOut>(),
        annotations(read_only_hint = true)
    )]
    async fn get_results(&self, Parameters(args): Parameters<VersionArgs>) -> CallToolResult {
        self.run(move |c| verbs::get_results(c, &args)).await
    }

    #[tool(
        description = "A version's SASS (default) or PTX, kernel by kernel, without addresses or encodings, with the instruction mix (memory instructions by space and width, tensor-core instructions, FFMA, branches, barriers, spills). Builds the version first when its listing is missing or stale.",
        output_schema = schema_for_output::<AsmOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true)
    )]
    async fn get_asm(&self, Parameters(args): Parameters<AsmArgs>) -> CallToolResult {
        self.run(move |c| verbs::get_asm(c, &args)).await
    }

    #[tool(
        description = "Diff two versions' SASS (default) or PTX, kernels paired by name: the instruction-mix counts that changed, then the hunks (labels renamed by first use, so two builds compare by structure; `registers` renames registers too). Builds either version first when needed.",
        output_schema = schema_for_output::<DiffAsmOut>(),
        annotations(read_only_hint = false, destructive_hint = false, idempotent_hint = true)
    )]
    async fn diff_asm(&self, Parameters(args): Parameters<DiffAsmArgs>) -> CallToolResult {
        self.run(move |c| verbs::diff_asm(c, &args)).await
    }

    #[tool(
        description = "A version's latest profile (Nsight Compute's summary, and the sanitizers' findings), when one has been recorded (`rung profile`); otherwise it says `not available yet` rather than inventing data.",
        output_schema = schema_for_output::<ProfileOut>(),
        annotations(read_only_hint = true)
    )]
    async fn get_profile(&self, Parameters(args): Parameters<VersionArgs>) -> CallToolResult {
        self.run(move |c| verbs::get_profile(c, &args)).await
    }

    #[tool(
        description = "A version's latest trace (`rung trace`: its rung_trace.cuh sections timed inside the kernel: calls, median, p99, share, per-SM spread, beside the untraced bench), when one has been recorded; otherwise it says `not available yet`.",
        output_schema = schema_for_output::<TraceOut>(),
        annotations(read_only_hint = true)
    )]
    async fn get_trace(&self, Parameters(args): Parameters<VersionArgs>) -> CallToolResult {
        self.run(move |c| verbs::get_trace(c, &args)).await
    }

    #[tool(
        description = "Recorded results, newest first: of one version or all, optionally of one stage, with their full records when `payload` is true.",
        output_schema = schema_for_output::<HistoryOut>(),
        annotations(read_only_hint = true)
    )]
    async fn history(&self, Parameters(args): Parameters<HistoryArgs>) -> CallToolResult {
        self.run(move |c| verbs::history(c, &args)).await
    }
}

/// `failed to deserialize parameters: ...`, rmcp's text for arguments that do not fit a tool's
/// input type.
const ARGUMENT_ERROR_PREFIX: &str = "failed to deserialize parameters:";

#[tool_handler(router = self.tool_router)]
impl ServerHandler for RungServer {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("rung", env!("CARGO_PKG_VERSION")))
            .with_instructions(format!("{INSTRUCTIONS} Workspace: {}.", self.ctx.dir.display()))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let name = request.name.to_string();
        // Arguments that do not fit the tool: say which argument, what was wrong and the fix.
        let mut request = request;
        let arguments = serde_json::Value::Object(request.arguments.take().unwrap_or_default());
        if let Some((field, what)) = invalid_arguments(&name, &arguments) {
            return Ok(CallToolResponse::Complete(argument_error(&self.tool_router, &name, field, &what)));
        }
        if let serde_json::Value::Object(map) = arguments {
            request.arguments = Some(map);
        }
        let tcc = ToolCallContext::new(self, request, context);
        let response = self.tool_router.call(tcc).await?;
        Ok(match response {
            CallToolResponse::Complete(r) => {
                CallToolResponse::Complete(explain_argument_error(&self.tool_router, &name, r))
            }
            other => other,
        })
    }
}

/// Why `arguments` do not fit `tool`'s input type: the argument at fault (its path, or the field
/// a message names) and serde's words.
fn invalid_arguments(tool: &str, arguments: &serde_json::Value) -> Option<(Option<String>, String)> {
    fn parse<T: serde::de::DeserializeOwned>(v: &serde_json::Value) -> Option<(Option<String>, String)> {
        let e = serde_path_to_error::deserialize::<_, T>(v).err()?;
        let path = e.path().to_string();
        let what = e.inner().to_string();
        let field = if path == "." { field_named(&what) } else { Some(path) };
        Some((field, what))
    }
    match tool {
        "read_version" | "get_results" | "get_profile" | "get_trace" => parse::<VersionArgs>(arguments),
        "submit_version" => parse::<SubmitArgs>(arguments),
        "check" => parse::<CheckArgs>(arguments),
        "get_asm" => parse::<AsmArgs>(arguments),
        "diff_asm" => parse::<DiffAsmArgs>(arguments),
        "history" => parse::<HistoryArgs>(arguments),
        _ => None,
    }
}

/// The field serde names in `missing field `x`` or `unknown field `x``.
fn field_named(what: &str) -> Option<String> {
    ["missing field `", "unknown field `"]
        .iter()
        .find_map(|p| what.split_once(p).and_then(|(_, rest)| rest.split('`').next()))
        .map(str::to_string)
}

fn argument_error(router: &ToolRouter<RungServer>, tool: &str, field: Option<String>, what: &str) -> CallToolResult {
    let takes = router.get(tool).map(|t| describe_arguments(&t.input_schema)).unwrap_or_default();
    let at = field.as_ref().filter(|f| !what.contains(&format!("`{f}`"))).map(|f| format!("{f}: ")).unwrap_or_default();
    failure(&ToolError {
        field,
        error: format!("{tool}: invalid arguments: {at}{what}"),
        help: format!("pass a JSON object with {takes} (its input schema in tools/list says the same)"),
    })
}

/// Arguments that do not fit a tool's input type and slipped past [`invalid_arguments`] come back
/// from rmcp as a bare serde message: say the same as for the others.
fn explain_argument_error(router: &ToolRouter<RungServer>, tool: &str, r: CallToolResult) -> CallToolResult {
    let message = match (r.is_error, r.content.first().and_then(|c| c.as_text())) {
        (Some(true), Some(t)) if t.text.starts_with(ARGUMENT_ERROR_PREFIX) => t.text.clone(),
        _ => return r,
    };
    let what = message.trim_start_matches(ARGUMENT_ERROR_PREFIX).trim();
    argument_error(router, tool, field_named(what), what)
}

/// `name (string, required), extension (`cu` | `py` | `ptx`)`: a tool's arguments from its input
/// schema.
fn describe_arguments(schema: &serde_json::Map<String, serde_json::Value>) -> String {
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|a| a.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    let Some(props) = schema.get("properties").and_then(|p| p.as_object()).filter(|p| !p.is_empty()) else {
        return "no arguments".to_string();
    };
    props
        .iter()
        .map(|(name, p)| {
            let mut values = Vec::new();
            choices(schema, p, &mut values);
            let ty = if values.is_empty() {
                let ty = match p.get("type") {
                    Some(serde_json::Value::Array(a)) => {
                        a.iter().filter_map(|x| x.as_str()).filter(|x| *x != "null").collect::<Vec<_>>().join(" or ")
                    }
                    Some(t) => t.as_str().unwrap_or("value").to_string(),
                    None => "see the schema".to_string(),
                };
                match p.get("items").and_then(|i| i.get("type")).and_then(|t| t.as_str()) {
                    Some(item) if ty == "array" => format!("array of {item}s"),
                    _ => ty,
                }
            } else {
                values.join(" | ")
            };
            let req = if required.contains(&name.as_str()) { ", required" } else { "" };
            format!("{name} ({ty}{req})")
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// The values an enumerated argument takes, through `$ref`, `anyOf` and `oneOf`.
fn choices(root: &serde_json::Map<String, serde_json::Value>, s: &serde_json::Value, out: &mut Vec<String>) {
    if let Some(def) = s
        .get("$ref")
        .and_then(|r| r.as_str())
        .and_then(|r| r.strip_prefix("#/$defs/"))
        .and_then(|name| root.get("$defs")?.get(name))
    {
        choices(root, def, out);
    }
    if let Some(e) = s.get("enum").and_then(|e| e.as_array()) {
        out.extend(e.iter().filter_map(|v| v.as_str()).map(|v| format!("`{v}`")));
    }
    if let Some(c) = s.get("const").and_then(|c| c.as_str()) {
        out.push(format!("`{c}`"));
    }
    for key in ["anyOf", "oneOf"] {
        for alt in s.get(key).and_then(|a| a.as_array()).into_iter().flatten() {
            choices(root, alt, out);
        }
    }
}

/// Why `rung mcp` could not start serving.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("cannot set up the standard streams for the protocol: {0}")]
    Streams(std::io::Error),
    #[error("cannot start the async runtime: {0}")]
    Runtime(std::io::Error),
    #[error("the client did not complete the MCP initialisation: {0}")]
    Initialize(String),
}

/// Serves the workspace at `dir` on standard input and output until the client disconnects.
pub fn serve(dir: &Path) -> Result<(), ServeError> {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    let (input, output) = private_stdio().map_err(ServeError::Streams)?;
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().map_err(ServeError::Runtime)?;
    let ctx = Arc::new(Context::new(dir));
    let server = RungServer::new(ctx.clone());
    let output = Arc::new(std::sync::Mutex::new(output));
    let input = parse_errors_answered(input, output.clone()).map_err(ServeError::Streams)?;
    let outcome = runtime.block_on(async move {
        let input = tokio::fs::File::from_std(input);
        let output = LineWriter { out: output, pending: Vec::new() };
        let running = server.serve((input, output)).await.map_err(|e| ServeError::Initialize(e.to_string()))?;
        let _ = running.waiting().await;
        Ok(())
    });
    ctx.shutdown();
    // A read of standard input cannot be cancelled; do not wait for one at exit.
    runtime.shutdown_timeout(std::time::Duration::from_millis(200));
    outcome
}

/// The client's lines as the server reads them, less those that are not JSON: JSON-RPC answers
/// each of those with a parse error (-32700, id null), which this writes itself, a whole line at a
/// time beside the server's. A thread copies the lines into a pipe the server reads; the end of
/// the input closes it.
fn parse_errors_answered(
    input: std::fs::File,
    output: Arc<std::sync::Mutex<std::fs::File>>,
) -> std::io::Result<std::fs::File> {
    use std::io::{BufRead, Write};
    use std::os::fd::FromRawFd;
    let mut fds = [0; 2];
    // SAFETY: pipe(2) fills two descriptors this process then owns; the result is checked.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are fresh and owned by nothing else.
    let (read, mut write) = unsafe { (std::fs::File::from_raw_fd(fds[0]), std::fs::File::from_raw_fd(fds[1])) };
    std::thread::spawn(move || {
        let mut lines = std::io::BufReader::new(input);
        let mut line = String::new();
        loop {
            line.clear();
            match lines.read_line(&mut line) {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
            if line.trim().is_empty() {
                continue;
            }
            match serde_json::from_str::<serde_json::Value>(&line) {
                Ok(_) => {
                    if write.write_all(line.as_bytes()).and_then(|()| write.flush()).is_err() {
                        return;
                    }
                }
                Err(e) => {
                    let reply = serde_json::json!({
                        "jsonrpc": "2.0",
                        "id": null,
                        "error": { "code": -32700, "message": format!("Parse error: the line is not JSON ({e})") },
                    });
                    let mut out = output.lock().unwrap_or_else(|p| p.into_inner());
                    let _ = writeln!(out, "{reply}").and_then(|()| out.flush());
                }
            }
        }
    });
    Ok(read)
}

/// The server's side of standard output: what it writes goes out a whole line at a time, under
/// the lock the parse errors take too, so the two never interleave inside a message.
struct LineWriter {
    out: Arc<std::sync::Mutex<std::fs::File>>,
    pending: Vec<u8>,
}

impl tokio::io::AsyncWrite for LineWriter {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        use std::io::Write;
        self.pending.extend_from_slice(buf);
        if let Some(end) = self.pending.iter().rposition(|b| *b == b'\n') {
            let whole: Vec<u8> = self.pending.drain(..=end).collect();
            let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
            if let Err(e) = out.write_all(&whole).and_then(|()| out.flush()) {
                return std::task::Poll::Ready(Err(e));
            }
        }
        std::task::Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        use std::io::Write;
        if self.pending.is_empty() {
            return std::task::Poll::Ready(Ok(()));
        }
        let rest = std::mem::take(&mut self.pending);
        let mut out = self.out.lock().unwrap_or_else(|p| p.into_inner());
        std::task::Poll::Ready(out.write_all(&rest).and_then(|()| out.flush()))
    }

    fn poll_shutdown(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        self.poll_flush(cx)
    }
}

/// Takes the standard streams for the protocol: returns copies of descriptors 0 and 1, then
/// points 0 at /dev/null and 1 at standard error for everything else in the process.
fn private_stdio() -> std::io::Result<(std::fs::File, std::fs::File)> {
    use std::os::fd::{AsRawFd, FromRawFd};
    let dup = |fd: i32| {
        // SAFETY: dup(2) on a descriptor this process owns; the result is checked.
        let new = unsafe { libc::dup(fd) };
        if new < 0 {
            Err(std::io::Error::last_os_error())
        } else {
            // SAFETY: `new` is a fresh descriptor owned by nothing else.
            Ok(unsafe { std::fs::File::from_raw_fd(new) })
        }
    };
    let input = dup(0)?;
    let output = dup(1)?;
    let null = std::fs::File::open("/dev/null")?;
    // SAFETY: dup2(2) onto the standard descriptors, whose originals were copied above.
    if unsafe { libc::dup2(null.as_raw_fd(), 0) } < 0 || unsafe { libc::dup2(2, 1) } < 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok((input, output))
}
