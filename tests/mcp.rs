//! `rung mcp` end to end. An independent client (tests/mcp_client.py, on the Python `mcp` SDK,
//! not rmcp) submits, checks, reads SASS and diffs a version of a vector-add workspace, and sees
//! bad names, oversized sources and malformed arguments refused as tool errors while the server
//! keeps serving; it needs the CUDA toolchain (`rung setup`) and rung's Python with `mcp` (.ci/run
//! installs it). A raw JSON-RPC exchange needs neither: the protocol alone owns standard output,
//! and a line that is not JSON does not stop the server.

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

mod common;

fn workspace() -> (tempfile::TempDir, PathBuf) {
    common::new_workspace("vector-add")
}

#[test]
fn an_independent_client_submits_checks_reads_sass_diffs_and_survives_bad_calls() {
    let Some(_) = common::real_nvcc() else { return };
    let Some(python) = common::python_with_module("mcp") else { return };
    let (_tmp, ws) = workspace();
    let client = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out = Command::new(&python)
        .arg(&client)
        .arg(env!("CARGO_BIN_EXE_rung"))
        .arg(&ws)
        .env("NO_COLOR", "1")
        .env("MCP_CLIENT_TIMEOUT", "300")
        .output()
        .expect("the client runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    assert!(out.status.success(), "the client failed ({}):\n{stdout}\n{stderr}", out.status);
    for step in [
        "initialise: rung",
        "list tools:",
        "submit_version: versions/v004-float4-parallel-tail.cu (proposed, parent v002)",
        "check v004:",
        "get_asm v004:",
        "diff_asm v002 v004:",
        "get_profile v004: not available yet",
        "get_trace v004: not available yet",
        "path traversal refused: error: name `../../x`",
        "oversized source refused: error: source is",
        "malformed requests refused:",
        "still serving after the errors",
    ] {
        assert!(stdout.contains(step), "no `{step}` step:\n{stdout}");
    }
    let last = stdout.lines().last().unwrap_or_default();
    let n = stdout.lines().filter(|l| l.starts_with("ok ")).count();
    assert_eq!(last, format!("mcp client: {n} steps passed"), "{stdout}");
}

/// The server's replies to raw requests, by id.
struct Raw {
    child: std::process::Child,
    stdin: std::process::ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Raw {
    fn start(ws: &Path, home: &Path) -> Raw {
        let mut child = Command::new(env!("CARGO_BIN_EXE_rung"))
            .args(["mcp", "-C"])
            .arg(ws)
            .env("RUNG_HOME", home)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdin = child.stdin.take().unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Raw { child, stdin, lines }
    }

    fn send(&mut self, line: &str) {
        writeln!(self.stdin, "{line}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// The reply to request `id`; every line before it must be JSON-RPC too.
    fn reply(&mut self, id: u64) -> serde_json::Value {
        self.reply_to(serde_json::Value::from(id))
    }

    fn reply_to(&mut self, id: serde_json::Value) -> serde_json::Value {
        loop {
            let line = self.lines.recv_timeout(Duration::from_secs(60)).expect("a reply within 60 s");
            let v: serde_json::Value = serde_json::from_str(&line)
                .unwrap_or_else(|e| panic!("standard output carries only the protocol, got ({e}): {line}"));
            assert_eq!(v["jsonrpc"], "2.0", "{line}");
            if v["id"] == id {
                return v;
            }
        }
    }

    fn call(&mut self, id: u64, tool: &str, arguments: serde_json::Value) -> serde_json::Value {
        let req = serde_json::json!({
            "jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": { "name": tool, "arguments": arguments },
        });
        self.send(&req.to_string());
        self.reply(id)["result"].clone()
    }
}

fn text(result: &serde_json::Value) -> String {
    result["content"][0]["text"].as_str().unwrap_or_default().to_string()
}

#[test]
fn raw_json_rpc_gets_only_protocol_on_stdout_and_a_bad_line_does_not_stop_the_server() {
    let (tmp, ws) = workspace();
    let mut raw = Raw::start(&ws, &tmp.path().join("rung-home"));
    raw.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    let init = raw.reply(1);
    assert_eq!(init["result"]["serverInfo"]["name"], "rung", "{init}");
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    raw.send("this line is not JSON-RPC");
    // JSON-RPC's answer to a line that is not JSON: a parse error with a null id.
    let parse = raw.reply_to(serde_json::Value::Null);
    assert_eq!(parse["error"]["code"], -32700, "{parse}");
    assert!(parse["error"]["message"].as_str().unwrap().starts_with("Parse error"), "{parse}");

    let listed = raw.call(2, "list_versions", serde_json::json!({}));
    assert_eq!(listed["isError"], false, "{listed}");
    let ids: Vec<&str> =
        listed["structuredContent"]["versions"].as_array().unwrap().iter().map(|v| v["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["v001", "v002", "v003"]);

    let bad = raw.call(3, "submit_version", serde_json::json!({ "name": "../../x", "source": "x", "extension": "cu" }));
    assert_eq!(bad["isError"], true, "{bad}");
    assert_eq!(bad["structuredContent"]["field"], "name", "{bad}");
    assert!(text(&bad).contains("may not contain") && text(&bad).contains("help:"), "{bad}");

    let wrong = raw.call(4, "history", serde_json::json!({ "limit": "ten" }));
    assert_eq!(wrong["isError"], true, "{wrong}");
    assert!(text(&wrong).starts_with("error: history: invalid arguments: limit: invalid type"), "{}", text(&wrong));
    assert_eq!(wrong["structuredContent"]["field"], "limit", "{wrong}");
    assert!(text(&wrong).contains("help: pass a JSON object with limit (integer), "), "{}", text(&wrong));

    // A proposal with its parent, then its results: no toolchain needed for either.
    let source =
        std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap().replace("a[i] + b[i]", "b[i] + a[i]");
    let sub =
        raw.call(5, "submit_version", serde_json::json!({ "name": "swapped", "source": source, "parent": "v001" }));
    assert_eq!(sub["isError"], false, "{sub}");
    assert_eq!(sub["structuredContent"]["path"], "versions/v004-swapped.cu");
    assert_eq!(std::fs::read_to_string(ws.join("versions/v004-swapped.cu")).unwrap(), source);
    let res = raw.call(6, "get_results", serde_json::json!({ "version": "v004" }));
    assert_eq!(res["structuredContent"]["status"], "proposed", "{res}");
    assert_eq!(res["structuredContent"]["parent"], "v001", "{res}");
    assert!(text(&res).contains("not checked yet"), "{res}");

    drop(raw.stdin);
    let status = raw.child.wait().unwrap();
    assert!(status.success(), "rung mcp exits cleanly when the client closes its input: {status}");
}

#[test]
fn a_folder_that_is_no_workspace_is_refused_before_serving() {
    let tmp = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rung")).args(["mcp", "-C"]).arg(tmp.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(rung::exit::WORKSPACE_INVALID));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("not a kernel workspace") && err.contains("help:"), "{err}");
}

/// The `check` tool goes where rung.toml's [runner] says, as `rung check` does: with an SSH host
/// that cannot be reached, the verdict is the lost connection, recorded, not a local check.
#[test]
fn the_check_tool_honours_the_runner_table() {
    let (tmp, ws) = workspace();
    let toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let remote = toml.replace("kind = \"local\"", "kind = \"ssh\"\nhost = \"nobody@rung-test.invalid\"");
    assert_ne!(remote, toml);
    std::fs::write(ws.join("rung.toml"), remote).unwrap();
    let mut raw = Raw::start(&ws, &tmp.path().join("rung-home"));
    raw.send(
        r#"{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}"#,
    );
    raw.reply(1);
    raw.send(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#);
    let checked = raw.call(2, "check", serde_json::json!({ "versions": ["v001"], "no_bench": true }));
    let report = &checked["structuredContent"];
    let run = report["versions"][0]["stages"].as_array().unwrap().iter().find(|s| s["stage"] == "run").cloned();
    let run = run.unwrap_or_else(|| panic!("a run row: {checked}"));
    assert_eq!(run["reason"], "connection-failed", "{checked}");
    assert!(run["summary"].as_str().unwrap().contains("rung-test.invalid"), "{run}");
}
