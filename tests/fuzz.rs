//! Every parser of outside input, fed mutated real inputs: rung.toml and the agent's config,
//! size and launch expressions, launch headers and C signatures, PTX and SASS listings, ncu and
//! compute-sanitizer output, compiler diagnostics, the workers' protocol lines and the agents'
//! event streams. Each must return (a value or its error) for every input: no panic, no abort,
//! no hang. Mutations start from the files in tests/fixtures and the templates: bytes flipped,
//! runs deleted, duplicated or cut short, and tokens that parsers trip on spliced in.
//!
//! Deterministic: a fixed seed, so a failure names its case and repeats. `RUNG_FUZZ_CASES=N`
//! runs N mutations of each input instead of the short CI run's 300.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};

use rung::agent::ToolBox;

mod common;

/// xorshift64*: enough randomness for mutations, and no dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }
}

/// What parsers trip on: deep nesting, huge numbers, odd quoting, control bytes, Unicode.
const TOKENS: &[&str] = &[
    "(",
    ")",
    "((((((((((",
    "[",
    "]",
    "{",
    "}",
    "\"",
    "'",
    "\\",
    "\n",
    "\r\n",
    "\0",
    "=",
    ",",
    ":",
    ";",
    "99999999999999999999999",
    "-9223372036854775808",
    "1e308",
    "1e-400",
    "NaN",
    "inf",
    "-0",
    "0x",
    "..",
    "/",
    "*",
    "%",
    "cdiv(",
    "numel(",
    "bytes(",
    "é",
    "ℝ",
    "\u{202e}",
    "\t",
    "#",
    "//",
    "/*",
    "*/",
    "[[inputs]]",
    "[sizes]",
    "shape = [",
    "dtype = \"f32\"",
    ".entry ",
    ".loc ",
    "Function ",
    "==PROG== ",
    "========= ",
    "data: ",
    "event: ",
    "{\"op\":",
    "null",
    "true",
    "\"\"\"",
];

fn mutate(rng: &mut Rng, seed: &[u8]) -> Vec<u8> {
    let mut b = seed.to_vec();
    for _ in 0..1 + rng.below(6) {
        let at = rng.below(b.len() + 1);
        match rng.below(6) {
            0 if !b.is_empty() => {
                let i = rng.below(b.len());
                b[i] ^= 1 << rng.below(8);
            }
            1 if !b.is_empty() => {
                let end = (at + rng.below(64)).min(b.len());
                b.drain(at.min(end)..end);
            }
            2 => {
                let t = TOKENS[rng.below(TOKENS.len())].as_bytes();
                let long = rng.below(20) == 0;
                let n = 1 + rng.below(if long { 2000 } else { 3 });
                let spliced: Vec<u8> = t.iter().copied().cycle().take(t.len() * n).collect();
                b.splice(at..at, spliced);
            }
            3 if !b.is_empty() => {
                let start = rng.below(b.len());
                let end = (start + rng.below(256)).min(b.len());
                let copy = b[start..end].to_vec();
                b.splice(at..at, copy);
            }
            4 => b.truncate(at),
            _ => b.insert(at.min(b.len()), rng.next() as u8),
        }
    }
    b
}

fn cases() -> usize {
    std::env::var("RUNG_FUZZ_CASES").ok().and_then(|n| n.parse().ok()).unwrap_or(300)
}

fn files(dir: &str, ext: &[&str]) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![Path::new(env!("CARGO_MANIFEST_DIR")).join(dir)];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else if ext.iter().any(|x| p.to_string_lossy().ends_with(x)) {
                out.push((p.clone(), std::fs::read(&p).unwrap()));
            }
        }
    }
    out.sort();
    assert!(!out.is_empty(), "no {ext:?} files under {dir}");
    out
}

/// Runs `parse` on `cases()` mutations of each seed; a panic fails with its input.
fn fuzz(name: &str, seeds: &[(PathBuf, Vec<u8>)], parse: impl Fn(&str)) {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15 ^ name.len() as u64);
    let mut tried = 0;
    for (path, seed) in seeds {
        for _ in 0..cases() {
            let input = String::from_utf8_lossy(&mutate(&mut rng, seed)).into_owned();
            if catch_unwind(AssertUnwindSafe(|| parse(&input))).is_err() {
                let saved = std::env::temp_dir().join(format!("rung-fuzz-{name}.txt"));
                let _ = std::fs::write(&saved, &input);
                panic!("{name}: a mutation of {} panicked; the input is in {}", path.display(), saved.display());
            }
            tried += 1;
        }
    }
    eprintln!("{name}: {tried} inputs, no panic");
}

fn spec_seeds() -> Vec<(PathBuf, Vec<u8>)> {
    files("assets/templates", &["rung.toml"])
}

#[test]
fn rung_toml() {
    fuzz("rung.toml", &spec_seeds(), |t| {
        let _ = rung::spec::Spec::parse(t, Path::new("rung.toml"));
    });
}

#[test]
fn agent_config() {
    let seed = b"[agent]\nprovider = \"local\"\nsystem_prompt = \"be brief\"\n\n[agent.providers.local]\nkind = \"openai\"\n\
base_url = \"http://127.0.0.1:9/v1\"\nmodel = \"gpt-test\"\nretries = 2\napi_key_env = \"RUNG_KEY\"\ntimeout = \"30s\"\n\
price_input_per_mtok = 2.0\n\n[agent.auto]\nmax_versions = 5\n"
        .to_vec();
    fuzz("config.toml", &[(PathBuf::from("config.toml"), seed)], |t| {
        let _ = rung::agent::config::AgentConfig::parse(t, Path::new("config.toml"));
    });
}

#[test]
fn expressions_parse_and_evaluate() {
    let seeds: Vec<(PathBuf, Vec<u8>)> = [
        "cdiv(rows * cols, 256) + numel(x) % 7 - bytes(y) / (2 * num_sms)",
        "(rows, cols // 4, 1)",
        "-(-(-3)) * 1e-6 + 2**3",
    ]
    .iter()
    .map(|s| (PathBuf::from(s), s.as_bytes().to_vec()))
    .collect();
    let spec =
        rung::spec::Spec::parse(std::str::from_utf8(&spec_seeds()[0].1).unwrap(), Path::new("rung.toml")).unwrap();
    let sizes = spec.test_sizes[0].clone();
    fuzz("expression", &seeds, |t| {
        if let Ok(e) = rung::expr::Expr::parse(t) {
            let scope = spec.scope(&sizes, Some(132));
            let _ = e.eval_int(&scope);
            let _ = e.eval_f64(&scope);
        }
    });
}

#[test]
fn launch_headers_and_signatures() {
    let spec_text = String::from_utf8(spec_seeds()[0].1.clone()).unwrap();
    let spec = rung::spec::Spec::parse(&spec_text, Path::new("rung.toml")).unwrap();
    let seeds = files("assets/templates", &[".cu"]);
    fuzz("launch header", &seeds, |t| {
        let _ = rung::launch::parse_header(t, Path::new("versions/v001.cu"), &spec);
        let _ = rung::launch::find_signatures(t);
        let _ = rung::launch::ptx_entries(t);
    });
}

#[test]
fn ptx_and_sass_listings() {
    use rung::asm::{AsmKind, Normalize};
    let seeds = files("tests/fixtures/build", &[".ptx", "stdout.txt"]);
    fuzz("listing", &seeds, |t| {
        for kind in [AsmKind::Ptx, AsmKind::Sass] {
            let ks = rung::asm::parse(kind, t);
            let _ = rung::asm::diff::diff(kind, &ks, &ks[ks.len() / 2..], Normalize::default());
        }
    });
}

#[test]
fn profiler_and_sanitizer_output() {
    let seeds = files("tests/fixtures/profile", &[".csv", ".txt"]);
    fuzz("profile", &seeds, |t| {
        let _ = rung::profile::parse_raw(t);
        let _ = rung::profile::parse_source(t, 5);
        let _ = rung::profile::parse_sanitizer(t);
    });
}

#[test]
fn compiler_diagnostics() {
    use rung::parsers::{NvccFrontend, OutputParser, ParseContext, PtxasOutput, PythonTraceback};
    let seeds = files("tests/fixtures/build", &["stderr.txt"]);
    let ctx = ParseContext::for_version("versions/v001.cu");
    fuzz("diagnostics", &seeds, |t| {
        let _ = NvccFrontend.parse(t, &ctx);
        let _ = PtxasOutput.parse(t, &ctx);
        let _ = PythonTraceback.parse(t, &ctx);
        let _ = rung::parsers::parse_resources(t);
        let _ = rung::parsers::parse_resource_usage(t);
    });
}

#[test]
fn worker_protocol_lines() {
    let schema = std::fs::read(concat!(env!("CARGO_MANIFEST_DIR"), "/schema/worker.schema.json")).unwrap();
    let seeds = vec![
        (PathBuf::from("hello"), br#"{"hello":{"worker":"python","version":"1","capabilities":["fork"]}}"#.to_vec()),
        (PathBuf::from("schema"), schema),
    ];
    fuzz("protocol", &seeds, |t| {
        let _ = serde_json::from_str::<rung::model::protocol::Message>(t);
        let _ = serde_json::from_str::<rung::model::aot::AotReport>(t);
    });
}

#[test]
fn agent_event_streams() {
    let seeds = files("tests/fixtures/agent", &[".sse"]);
    fuzz("event stream", &seeds, |t| {
        let pieces = t.as_bytes().chunks(7).map(|c| Ok::<Vec<u8>, std::io::Error>(c.to_vec())).collect::<Vec<_>>();
        for e in rung::agent::http::events(pieces.into_iter()).take(10_000) {
            let _ = e;
        }
    });
}

/// The manual splitter (HTML and pdftotext's text) and the context index's term cutter.
#[test]
fn manuals_and_context_terms() {
    let seeds = files("tests/fixtures/manual", &["html"]);
    fuzz("a manual", &seeds, |t| {
        for s in rung::context::ptxdoc::split_html(t).iter().chain(&rung::context::ptxdoc::split_text(t)) {
            assert!(!s.heading().contains('\n'), "a heading of one line: {:?}", s.heading());
        }
        rung::context::terms(t);
    });
}

/// Every file under `dir`, relative, sorted: what a tool call may have written.
fn tree(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p.clone());
            }
            out.push(p.strip_prefix(dir).unwrap().to_path_buf());
        }
    }
    out.sort();
    out
}

/// The arguments a model or an MCP client sends to rung's tools (the agent's read_file,
/// search_context, get_results, get_asm, diff_asm, get_profile, get_trace; MCP's
/// submit_version), mutated: every call answers (a result or an error), no answer holds a file
/// from outside the workspace, and a submission writes nothing outside the workspace's
/// versions/ and .rung/ folders.
#[test]
fn tool_and_mcp_arguments() {
    const SECRET: &str = "RUNG-FUZZ-SECRET-7f3a";
    let (tmp, ws) = common::new_workspace("vector-add");
    std::fs::write(tmp.path().join("secret.txt"), format!("{SECRET}\n")).unwrap();
    std::fs::create_dir_all(ws.join("context")).unwrap();
    std::fs::write(ws.join("context/notes.md"), "# Coalescing\nfloat4 loads make 128-bit transactions\n").unwrap();
    let tools = rung::agent::tools::WorkspaceTools::new(ws.clone());
    let calls: &[(&str, &str)] = &[
        ("read_file", r#"{"path": "rung.toml", "max_lines": 3}"#),
        ("read_file", r#"{"path": "../secret.txt"}"#),
        ("read_file", r#"{"path": "context/notes.md", "start_line": 2}"#),
        ("search_context", r#"{"query": "float4 transactions", "max_results": 3}"#),
        ("get_results", r#"{"version": "v001"}"#),
        ("get_asm", r#"{"version": "v001", "kind": "ptx", "max_lines": 20}"#),
        ("diff_asm", r#"{"a": "v001", "b": "v002", "kind": "ptx"}"#),
        ("get_profile", r#"{"version": "versions/v002"}"#),
        ("get_trace", r#"{"version": "v001"}"#),
    ];
    for (name, args) in calls {
        let seeds = vec![(PathBuf::from(format!("{name} {args}")), args.as_bytes().to_vec())];
        fuzz(name, &seeds, |t| {
            let out = tools.call(name, t);
            assert!(!out.text.contains(SECRET), "{name} {t:?} read a file outside the workspace: {}", out.text);
        });
    }
    let outside = |t: &[PathBuf]| -> Vec<PathBuf> {
        t.iter().filter(|p| !p.starts_with("ws/versions") && !p.starts_with("ws/.rung")).cloned().collect()
    };
    let before = outside(&tree(tmp.path()));
    let ctx = rung::verbs::Context::new(ws.clone());
    let seeds = vec![(
        PathBuf::from("submit_version"),
        br#"{"name": "float4 tail", "source": "__global__ void k(float* x) { x[0] = 1.0f; }\n", "extension": "cu", "parent": "v001"}"#
            .to_vec(),
    )];
    let written = std::cell::Cell::new(0);
    fuzz("submit_version", &seeds, |t| {
        if let Ok(args) = serde_json::from_str::<rung::verbs::SubmitArgs>(t)
            && rung::verbs::submit_version(&ctx, &args).is_ok()
        {
            written.set(written.get() + 1);
        }
    });
    eprintln!("submit_version: {} mutations written as versions", written.get());
    assert!(written.get() > 0, "no mutation was a submission rung took: the property went untested");
    assert_eq!(outside(&tree(tmp.path())), before, "a submission wrote outside versions/ and .rung/");
    ctx.shutdown();
}
