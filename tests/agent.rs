//! The agent's providers against a real HTTP server on 127.0.0.1 that replays the vendors'
//! recorded streams byte for byte (`tests/fixtures/agent/`, each file's source in its README),
//! written in pieces whose boundaries split tool-call arguments and UTF-8 characters; then the
//! failures (401, 429 with Retry-After, 500, a malformed chunk, a cut connection, silence,
//! cancellation), each ending in its own error with the conversation intact; and a fake key that
//! must appear nowhere rung writes or prints.

use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rung::agent::anthropic::Anthropic;
use rung::agent::command::CommandProvider;
use rung::agent::http::{Endpoint, HttpOptions};
use rung::agent::openai::OpenAi;
use rung::agent::secrets::{KeySource, Secret};
use rung::agent::{
    AgentError, AgentEvent, Cancel, ChatStore, Conversation, Message, NoTools, Prices, Provider, Role, ToolBox,
    ToolOutput, ToolSpec, Usage, run_turn,
};

mod common;

use common::loopback::{End, Reply, Server, fixture, inside};

const KEY: &str = "sk-rung-test-DO-NOT-LEAK-1234";

fn opts() -> HttpOptions {
    HttpOptions {
        connect_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(5),
        retries: 2,
        backoff: Duration::from_millis(20),
        backoff_max: Duration::from_millis(100),
        max_retry_after: Duration::from_secs(10),
        // The loopback server must be reached directly, whatever proxy the machine sets.
        proxy_from_env: false,
    }
}

fn endpoint(server: &Server, opts: HttpOptions) -> Endpoint {
    Endpoint {
        base_url: server.url.clone(),
        key: Some(Secret::new(KEY)),
        key_source: KeySource::Env("RUNG_TEST_KEY".into()),
        opts,
    }
}

fn openai(server: &Server) -> OpenAi {
    OpenAi::new(endpoint(server, opts()), "gpt-test".into(), None)
}

fn anthropic(server: &Server) -> Anthropic {
    Anthropic::new(endpoint(server, opts()), "claude-test".into(), 1024)
}

/// A toolbox that records its calls and answers with their arguments.
#[derive(Default)]
struct Recording(Mutex<Vec<(String, String)>>);

impl ToolBox for Recording {
    fn specs(&self) -> Vec<ToolSpec> {
        ["list_files", "other", "get_weather"]
            .into_iter()
            .map(|n| ToolSpec {
                name: n.into(),
                description: format!("{n} tool"),
                parameters: serde_json::json!({"type": "object"}),
            })
            .collect()
    }
    fn call(&self, name: &str, arguments: &str) -> ToolOutput {
        self.0.lock().unwrap().push((name.into(), arguments.into()));
        ToolOutput { text: format!("{name} ran with {arguments}"), is_error: false }
    }
}

/// Runs one user turn in a saved conversation, collecting the events.
fn turn(
    provider: &dyn Provider,
    store: &ChatStore,
    tools: &dyn ToolBox,
    question: &str,
) -> (Conversation, Vec<AgentEvent>, Result<(), AgentError>) {
    let mut conv = store.create("test", provider.model()).unwrap();
    conv.prices = Some(Prices { input_per_mtok: 2.0, output_per_mtok: 8.0 });
    conv.push(Message::user(question)).unwrap();
    let mut events = Vec::new();
    let r = run_turn(provider, &mut conv, tools, "system text", 4, &Cancel::new(), &mut |e| events.push(e));
    (conv, events, r)
}

fn texts(events: &[AgentEvent]) -> Vec<String> {
    events.iter().filter_map(|e| if let AgentEvent::Text(t) = e { Some(t.clone()) } else { None }).collect()
}

fn roles(conv: &Conversation) -> Vec<Role> {
    conv.messages.iter().map(|m| m.role).collect()
}

fn store() -> (tempfile::TempDir, ChatStore) {
    let tmp = tempfile::tempdir().unwrap();
    let store = ChatStore::for_workspace(tmp.path());
    (tmp, store)
}

#[test]
fn openai_text_streams_token_by_token_with_usage_and_unknown_fields() {
    let body = fixture("openai-text-usage.sse");
    let server = Server::start(vec![Reply::stream(&body, &[inside(&body, "\"content\": \"k\"", 5)])]);
    let (_tmp, store) = store();
    let (conv, events, r) = turn(&openai(&server), &store, &NoTools, "say ok");
    r.unwrap();
    assert_eq!(texts(&events), ["o", "k"]);
    assert_eq!(roles(&conv), [Role::User, Role::Assistant]);
    assert_eq!(conv.messages[1].text, "ok");
    assert_eq!(conv.usage, Usage { input_tokens: 1, output_tokens: 1 });
    let req = &server.requests()[0];
    assert_eq!(req.path, "/chat/completions");
    assert_eq!(req.header("authorization"), Some(format!("Bearer {KEY}").as_str()));
    assert_eq!(req.body["model"], "gpt-test");
    assert_eq!(req.body["stream"], true);
    assert_eq!(req.body["stream_options"]["include_usage"], true);
    assert_eq!(req.body["messages"][0], serde_json::json!({"role": "system", "content": "system text"}));
    assert_eq!(req.body["messages"][1], serde_json::json!({"role": "user", "content": "say ok"}));
    assert!(req.body.get("tools").is_none(), "no tools offered: {}", req.body);
    // The saved file holds the same conversation.
    let again = store.load(&conv.id).unwrap();
    assert_eq!(again.messages, conv.messages);
    assert_eq!(again.usage, conv.usage);
}

#[test]
fn openai_code_block_split_inside_utf8_characters() {
    let body = fixture("openai-code-block.sse");
    // Cut inside the em dash (3 bytes) and the micro sign (2 bytes), and inside the fence.
    let cuts = [
        inside(&body, "\u{2014}", 1),
        inside(&body, "\u{2014}", 2),
        inside(&body, "\u{b5}", 1),
        inside(&body, "```cuda", 2),
    ];
    let server = Server::start(vec![Reply::stream(&body, &cuts)]);
    let (_tmp, store) = store();
    let (conv, events, r) = turn(&openai(&server), &store, &NoTools, "a kernel?");
    r.unwrap();
    let want = "Here is a vectorised kernel \u{2014} each thread adds four floats (2.3 \u{b5}s on the H200):\n\n```cuda\n\
__global__ void add4(const float4* a, float4* out, int n) {\n  int i = blockIdx.x * blockDim.x + threadIdx.x;\n  \
if (i < n) out[i] = a[i];\n}\n```\nIt needs `n % 4 == 0`.";
    assert_eq!(texts(&events).len(), 4, "one event per delta");
    assert_eq!(conv.messages[1].text, want);
    assert_eq!(conv.usage, Usage { input_tokens: 52, output_tokens: 61 });
    let cost = conv.cost_usd.unwrap();
    assert!((cost - (52.0 * 2.0 + 61.0 * 8.0) / 1e6).abs() < 1e-12, "{cost}");
}

#[test]
fn openai_parallel_tool_calls_split_mid_arguments_then_answered() {
    let tools_body = fixture("openai-parallel-tool-calls.sse");
    let cuts = [inside(&tools_body, "{\\\"path\\\"", 4), inside(&tools_body, "\\\".\\\"}", 2)];
    let server =
        Server::start(vec![Reply::stream(&tools_body, &cuts), Reply::stream(&fixture("openai-text-usage.sse"), &[])]);
    let (_tmp, store) = store();
    let tools = Recording::default();
    let (conv, _events, r) = turn(&openai(&server), &store, &tools, "list files");
    r.unwrap();
    assert_eq!(
        *tools.0.lock().unwrap(),
        [("other".to_string(), "{}".to_string()), ("list_files".to_string(), "{\"path\": \".\"}".to_string())]
    );
    assert_eq!(roles(&conv), [Role::User, Role::Assistant, Role::Tool, Role::Tool, Role::Assistant]);
    let reqs = server.requests();
    assert_eq!(reqs.len(), 2);
    assert_eq!(reqs[0].body["tools"][0]["function"]["name"], "list_files");
    let sent = &reqs[1].body["messages"];
    assert_eq!(sent[2]["role"], "assistant");
    assert_eq!(sent[2]["tool_calls"][1]["id"], "call_files");
    assert_eq!(sent[2]["tool_calls"][1]["function"]["arguments"], "{\"path\": \".\"}");
    assert_eq!(
        sent[3],
        serde_json::json!({"role": "tool", "tool_call_id": "call_other", "content": "other ran with {}"})
    );
    assert_eq!(sent[4]["tool_call_id"], "call_files");
}

#[test]
fn anthropic_basic_text_usage_and_headers() {
    let body = fixture("anthropic-basic.sse");
    let server = Server::start(vec![Reply::stream(&body, &[inside(&body, "\" there\"", 3)])]);
    let (_tmp, store) = store();
    let (conv, events, r) = turn(&anthropic(&server), &store, &NoTools, "hi");
    r.unwrap();
    assert_eq!(texts(&events), ["Hello", " there", "!"]);
    assert_eq!(conv.messages[1].text, "Hello there!");
    assert_eq!(conv.usage, Usage { input_tokens: 11, output_tokens: 6 });
    let req = &server.requests()[0];
    assert_eq!(req.path, "/v1/messages");
    assert_eq!(req.header("x-api-key"), Some(KEY));
    assert_eq!(req.header("anthropic-version"), Some("2023-06-01"));
    assert_eq!(req.body["system"], "system text");
    assert_eq!(req.body["max_tokens"], 1024);
    assert_eq!(req.body["messages"], serde_json::json!([{"role": "user", "content": "hi"}]));
}

#[test]
fn anthropic_unknown_events_are_skipped() {
    let server = Server::start(vec![Reply::stream(&fixture("anthropic-unknown-events.sse"), &[])]);
    let (_tmp, store) = store();
    let (conv, _, r) = turn(&anthropic(&server), &store, &NoTools, "hi");
    r.unwrap();
    assert_eq!(conv.messages[1].text, "Hello there!");
    // The unknown events' usage (99) is not counted.
    assert_eq!(conv.usage, Usage { input_tokens: 11, output_tokens: 6 });
}

#[test]
fn anthropic_tool_use_split_mid_json_then_answered() {
    let body = fixture("anthropic-tool-use.sse");
    let cuts = [inside(&body, "{\\\"locati", 5), inside(&body, "on\\\": \\\"P", 6)];
    let server = Server::start(vec![Reply::stream(&body, &cuts), Reply::stream(&fixture("anthropic-basic.sse"), &[])]);
    let (_tmp, store) = store();
    let tools = Recording::default();
    let (conv, _, r) = turn(&anthropic(&server), &store, &tools, "weather in Paris?");
    r.unwrap();
    assert_eq!(*tools.0.lock().unwrap(), [("get_weather".to_string(), "{\"location\": \"Paris\"}".to_string())]);
    assert_eq!(conv.messages[1].text, "I'll check the current weather in Paris for you.");
    assert_eq!(conv.usage, Usage { input_tokens: 377 + 11, output_tokens: 65 + 6 });
    let reqs = server.requests();
    assert_eq!(reqs[0].body["tools"][2]["input_schema"], serde_json::json!({"type": "object"}));
    let sent = &reqs[1].body["messages"];
    assert_eq!(sent[1]["content"][1]["type"], "tool_use");
    assert_eq!(sent[1]["content"][1]["input"], serde_json::json!({"location": "Paris"}));
    assert_eq!(sent[2]["role"], "user");
    assert_eq!(sent[2]["content"][0]["type"], "tool_result");
    assert_eq!(sent[2]["content"][0]["tool_use_id"], "toolu_01NRLabsLyVHZPKxbKvkfSMn");
}

#[test]
fn anthropic_code_block_split_inside_utf8() {
    let body = fixture("anthropic-code-block.sse");
    let cuts = [inside(&body, "\u{2014}", 1), inside(&body, "\u{b5}", 1)];
    let server = Server::start(vec![Reply::stream(&body, &cuts)]);
    let (_tmp, store) = store();
    let (conv, _, r) = turn(&anthropic(&server), &store, &NoTools, "a kernel?");
    r.unwrap();
    assert!(conv.messages[1].text.contains("kernel \u{2014} each") && conv.messages[1].text.contains("2.3 \u{b5}s"));
    assert!(conv.messages[1].text.contains("```cuda\n__global__ void add4"));
}

/// The conversation after a failed turn: the question, what arrived (if anything), a notice.
fn assert_kept(conv: &Conversation, store: &ChatStore, partial: Option<&str>) {
    let saved = store.load(&conv.id).unwrap();
    assert_eq!(saved.messages, conv.messages, "the file holds what memory holds");
    assert_eq!(conv.messages[0], Message::user("q"));
    let last = conv.messages.last().unwrap();
    assert_eq!(last.role, Role::Notice);
    match partial {
        Some(text) => {
            assert_eq!(conv.messages.len(), 3);
            assert!(conv.messages[1].partial);
            assert_eq!(conv.messages[1].text, text);
        }
        None => assert_eq!(conv.messages.len(), 2),
    }
}

#[test]
fn unauthorized_is_not_retried_and_never_echoes_the_key() {
    let echo =
        format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}.","type":"invalid_request_error"}}}}"#);
    let server = Server::start(vec![Reply::status(401, &echo), Reply::status(401, &echo)]);
    let (_tmp, store) = store();
    let (conv, _, r) = turn(&openai(&server), &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert!(matches!(e, AgentError::Unauthorized { status: 401, .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains("Incorrect API key provided: [redacted].") && text.contains("$RUNG_TEST_KEY"), "{text}");
    assert!(!text.contains(KEY));
    assert_eq!(server.requests().len(), 1, "a refused key is not retried");
    assert_kept(&conv, &store, None);
    assert!(!std::fs::read_to_string(conv.path.as_ref().unwrap()).unwrap().contains(KEY));
}

#[test]
fn rate_limit_waits_for_retry_after_then_succeeds() {
    let limited = r#"{"error":{"message":"Rate limit reached","type":"rate_limit_error"}}"#;
    let server = Server::start(vec![
        Reply::status(429, limited).header("retry-after", "1"),
        Reply::stream(&fixture("anthropic-basic.sse"), &[]),
    ]);
    let (_tmp, store) = store();
    let t0 = Instant::now();
    let (conv, events, r) = turn(&anthropic(&server), &store, &NoTools, "q");
    r.unwrap();
    assert!(t0.elapsed() >= Duration::from_secs(1), "waited {:?}", t0.elapsed());
    let retries: Vec<&AgentEvent> = events.iter().filter(|e| matches!(e, AgentEvent::Retrying { .. })).collect();
    assert_eq!(retries.len(), 1);
    let AgentEvent::Retrying { attempt, wait, reason } = retries[0] else { unreachable!() };
    assert_eq!((*attempt, *wait), (1, Duration::from_secs(1)));
    assert!(reason.contains("HTTP 429") && reason.contains("Rate limit reached"), "{reason}");
    assert_eq!(conv.messages[1].text, "Hello there!");
    assert_eq!(server.requests().len(), 2);
}

#[test]
fn rate_limit_retry_after_ms_and_a_too_long_wait() {
    // OpenAI's retry-after-ms wins over Retry-After; retries run out: the error counts them.
    let server = Server::start(vec![
        Reply::status(429, "{}").header("retry-after-ms", "30").header("retry-after", "1"),
        Reply::status(429, "{}").header("retry-after-ms", "30"),
        Reply::status(429, r#"{"error":{"message":"slow down"}}"#).header("retry-after-ms", "30"),
    ]);
    let (_tmp, store) = store();
    let t0 = Instant::now();
    let (conv, _, r) = turn(&openai(&server), &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert!(t0.elapsed() < Duration::from_millis(900), "retry-after-ms was not used: {:?}", t0.elapsed());
    assert!(matches!(e, AgentError::RateLimited { attempts: 3, .. }), "{e:?}");
    assert!(e.to_string().contains("slow down"), "{e}");
    assert_kept(&conv, &store, None);

    let server = Server::start(vec![Reply::status(429, "{}").header("retry-after", "3600")]);
    let t0 = Instant::now();
    let (_, _, r) = turn(&openai(&server), &store, &NoTools, "q");
    let e = r.unwrap_err().to_string();
    assert!(t0.elapsed() < Duration::from_secs(2));
    assert!(e.contains("it asks to wait 1h"), "{e}");
}

#[test]
fn server_errors_are_retried_with_backoff_then_reported() {
    let server = Server::start(vec![
        Reply::status(500, r#"{"error":{"message":"boom"}}"#),
        Reply::status(503, "Service Unavailable"),
        Reply::stream(&fixture("openai-text-usage.sse"), &[]),
    ]);
    let (_tmp, store) = store();
    let (conv, events, r) = turn(&openai(&server), &store, &NoTools, "q");
    r.unwrap();
    assert_eq!(events.iter().filter(|e| matches!(e, AgentEvent::Retrying { .. })).count(), 2);
    assert_eq!(conv.messages[1].text, "ok");

    let server =
        Server::start(vec![Reply::status(500, "{}"), Reply::status(500, "{}"), Reply::status(502, "bad gateway")]);
    let (conv, _, r) = turn(&openai(&server), &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert!(matches!(e, AgentError::Server { status: 502, attempts: 3, .. }), "{e:?}");
    assert!(e.to_string().contains("bad gateway"));
    assert_kept(&conv, &store, None);

    // A 400 is the request's fault: not retried.
    let server = Server::start(vec![Reply::status(400, r#"{"error":{"message":"unknown model"}}"#)]);
    let (_, _, r) = turn(&openai(&server), &store, &NoTools, "q");
    assert!(matches!(r.unwrap_err(), AgentError::Rejected { status: 400, .. }));
    assert_eq!(server.requests().len(), 1);
}

#[test]
fn malformed_chunk_keeps_what_arrived() {
    let body = fixture("openai-text-usage.sse");
    let first = inside(&body, "\n\n", 2);
    let mut bad = body[..first].to_vec();
    bad.extend_from_slice(b"data: {\"choices\": [oops\n\n");
    let server = Server::start(vec![Reply::stream(&bad, &[])]);
    let (_tmp, store) = store();
    let (conv, _, r) = turn(&openai(&server), &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert!(matches!(e, AgentError::Malformed { .. }), "{e:?}");
    assert!(e.to_string().contains("{\"choices\": [oops"), "{e}");
    assert_kept(&conv, &store, Some("o"));
    assert!(conv.messages[2].text.contains("cannot read"), "{:?}", conv.messages[2]);
}

#[test]
fn cut_connection_keeps_the_partial_reply() {
    let body = fixture("anthropic-code-block.sse");
    let half = inside(&body, "float4* out", 0);
    let server = Server::start(vec![Reply::stream(&body[..half], &[]).end(End::Cut)]);
    let (_tmp, store) = store();
    let (conv, _, r) = turn(&anthropic(&server), &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert!(matches!(e, AgentError::Cut { .. }), "{e:?}");
    let partial = conv.messages[1].text.clone();
    assert!(partial.starts_with("Here is a vectorised kernel") && partial.ends_with("const float4* a, "), "{partial}");
    assert_kept(&conv, &store, Some(&partial));
    assert!(conv.messages[2].text.contains("closed before the reply was complete"));

    // A body that ends cleanly but early (no stop reason, no [DONE]) is cut too.
    let body = fixture("openai-text-usage.sse");
    let server = Server::start(vec![Reply::stream(&body[..inside(&body, "\n\n", 2)], &[])]);
    let (conv, _, r) = turn(&openai(&server), &store, &NoTools, "q");
    assert!(matches!(r.unwrap_err(), AgentError::Cut { .. }));
    assert_kept(&conv, &store, Some("o"));
}

#[test]
fn stream_error_event_is_reported() {
    let mut body = fixture("anthropic-basic.sse");
    body.truncate(inside(&body, "event: content_block_stop", 0));
    body.extend_from_slice(
        b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Overloaded\"}}\n\n",
    );
    let server = Server::start(vec![Reply::stream(&body, &[])]);
    let (_tmp, store) = store();
    let (conv, _, r) = turn(&anthropic(&server), &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert_eq!(e, AgentError::Stream { message: "overloaded_error: Overloaded".into() });
    assert_kept(&conv, &store, Some("Hello there!"));
}

#[test]
fn silence_times_out_and_cancel_stops_at_once() {
    let body = fixture("openai-text-usage.sse");
    let first = inside(&body, "\n\n", 2);
    let stalled = Reply::stream(&body[..first], &[]).end(End::Stall(Duration::from_secs(4)));
    let server = Server::start(vec![stalled.clone()]);
    let (_tmp, store) = store();
    let quick = OpenAi::new(
        endpoint(&server, HttpOptions { idle_timeout: Duration::from_millis(400), ..opts() }),
        "m".into(),
        None,
    );
    let t0 = Instant::now();
    let (conv, _, r) = turn(&quick, &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert!(matches!(e, AgentError::Timeout { .. }), "{e:?}");
    assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
    assert_kept(&conv, &store, Some("o"));

    // Cancel from another thread once the first token is in.
    let server = Server::start(vec![stalled]);
    let provider = openai(&server);
    let mut conv = store.create("test", "m").unwrap();
    conv.push(Message::user("q")).unwrap();
    let cancel = Cancel::new();
    let (tx, rx) = std::sync::mpsc::channel();
    let c2 = cancel.clone();
    std::thread::spawn(move || {
        rx.recv().unwrap();
        c2.cancel();
    });
    let t0 = Instant::now();
    let r = run_turn(&provider, &mut conv, &NoTools, "s", 4, &cancel, &mut |e| {
        if matches!(e, AgentEvent::Text(_)) {
            let _ = tx.send(());
        }
    });
    assert_eq!(r.unwrap_err(), AgentError::Cancelled);
    assert!(t0.elapsed() < Duration::from_secs(1), "{:?}", t0.elapsed());
    assert_kept(&conv, &store, Some("o"));
    assert_eq!(conv.messages[2].text, "reply cancelled");
}

#[test]
fn refused_connection_is_retried_then_reported() {
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let ep = Endpoint {
        base_url: format!("http://127.0.0.1:{port}/v1"),
        key: None,
        key_source: KeySource::None,
        opts: opts(),
    };
    let (_tmp, store) = store();
    let (conv, events, r) = turn(&OpenAi::new(ep, "m".into(), None), &store, &NoTools, "q");
    let e = r.unwrap_err();
    assert!(matches!(e, AgentError::Connect { attempts: 3, .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("127.0.0.1:{port}")), "{e}");
    assert_eq!(events.iter().filter(|e| matches!(e, AgentEvent::Retrying { .. })).count(), 2);
    assert_kept(&conv, &store, None);
}

#[test]
fn command_provider_streams_stdout_and_reports_failure() {
    let (_tmp, store) = store();
    // The prompt arrives on standard input; the reply is what the command prints.
    let upper =
        CommandProvider::new(vec!["tr".into(), "a-z".into(), "A-Z".into()], String::new(), Duration::from_secs(5));
    let (conv, _, r) = turn(&upper, &store, &NoTools, "q");
    r.unwrap();
    assert_eq!(conv.messages[1].text, "SYSTEM TEXT\n\n## USER\n\nQ\n");

    let failing = CommandProvider::new(
        vec!["sh".into(), "-c".into(), "cat >/dev/null; printf partial; echo 'quota exceeded' >&2; exit 7".into()],
        String::new(),
        Duration::from_secs(5),
    );
    let (conv, _, r) = turn(&failing, &store, &NoTools, "q");
    let e = r.unwrap_err().to_string();
    assert!(e.contains("exit status: 7") && e.contains("quota exceeded"), "{e}");
    assert_kept(&conv, &store, Some("partial"));

    // 200 KiB of warnings before the reply and the error: the command is never stuck on a full
    // pipe, and the error shown is its last line.
    let chatty = CommandProvider::new(
        vec![
            "sh".into(),
            "-c".into(),
            "cat >/dev/null; i=0; while [ $i -lt 4000 ]; do echo 'warning: a line of fifty-odd bytes, again' >&2; i=$((i+1)); done; printf done; echo 'the real error' >&2; exit 3".into(),
        ],
        String::new(),
        Duration::from_secs(5),
    );
    let (conv, _, r) = turn(&chatty, &store, &NoTools, "q");
    let e = r.unwrap_err().to_string();
    assert!(e.contains("exit status: 3") && e.contains("the real error"), "{e}");
    assert_kept(&conv, &store, Some("done"));

    let slow = CommandProvider::new(vec!["sleep".into(), "5".into()], String::new(), Duration::from_millis(300));
    let t0 = Instant::now();
    let (_, _, r) = turn(&slow, &store, &NoTools, "q");
    assert!(matches!(r.unwrap_err(), AgentError::Timeout { .. }));
    assert!(t0.elapsed() < Duration::from_secs(2));
}

/// Every file under `dir`, recursively, as bytes.
fn files(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let Ok(rd) = std::fs::read_dir(dir) else { return out };
    for e in rd.flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(files(&p));
        } else if let Ok(b) = std::fs::read(&p) {
            out.push((p, b));
        }
    }
    out
}

fn contains(hay: &[u8], needle: &str) -> bool {
    hay.windows(needle.len()).any(|w| w == needle.as_bytes())
}

#[test]
fn a_fake_key_is_nowhere_rung_writes_or_prints() {
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path().join("ws");
    let home = tmp.path().join("home");
    let config = tmp.path().join("config");
    std::fs::create_dir_all(&home).unwrap();
    std::fs::create_dir_all(config.join("rung")).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["new", ws.to_str().unwrap(), "--template", "vector-add"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    // First a reply that streams and then breaks with the key in a malformed chunk; then a 401
    // that echoes the key in its body.
    let body = fixture("openai-text-usage.sse");
    let first = inside(&body, "\n\n", 2);
    let mut leaky = body[..first].to_vec();
    leaky.extend_from_slice(format!("data: {{\"bad\": {KEY}\n\n").as_bytes());
    let echo = format!(r#"{{"error":{{"message":"Incorrect API key provided: {KEY}"}}}}"#);
    let server = Server::start(vec![Reply::stream(&leaky, &[]), Reply::status(401, &echo)]);
    let cfg = config.join("rung/config.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nprovider = \"local\"\n\n[agent.providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\napi_key_env = \"RUNG_TEST_KEY\"\nretries = 0\n",
            server.url
        ),
    )
    .unwrap();
    let mut printed = Vec::new();
    for question in ["first question", "second question"] {
        let out = Command::new(env!("CARGO_BIN_EXE_rung"))
            .args(["-C", ws.to_str().unwrap(), "chat", question, "--config", cfg.to_str().unwrap()])
            .env("RUNG_TEST_KEY", KEY)
            .env("HOME", &home)
            .env("XDG_CONFIG_HOME", &config)
            .env("XDG_CACHE_HOME", home.join(".cache"))
            .env("NO_PROXY", "127.0.0.1")
            .env_remove("HTTP_PROXY")
            .env_remove("http_proxy")
            .env_remove("ALL_PROXY")
            .env_remove("all_proxy")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(5), "{}", String::from_utf8_lossy(&out.stderr));
        printed.extend_from_slice(&out.stdout);
        printed.extend_from_slice(&out.stderr);
    }
    let printed_text = String::from_utf8_lossy(&printed).to_string();
    assert!(printed_text.contains("cannot read") && printed_text.contains("refused the API key"), "{printed_text}");
    assert!(printed_text.contains("[redacted]"), "{printed_text}");
    assert!(!contains(&printed, KEY), "the key was printed:\n{printed_text}");
    let all: Vec<(PathBuf, Vec<u8>)> = [files(&ws), files(&home), files(&config)].concat();
    let chats: Vec<&PathBuf> =
        all.iter().map(|(p, _)| p).filter(|p| p.to_string_lossy().contains(".rung/chat/")).collect();
    assert_eq!(chats.len(), 2, "two conversations saved: {chats:?}");
    for (p, b) in &all {
        assert!(!contains(b, KEY), "the key is in {}", p.display());
    }
    // Both questions and the partial reply survived.
    let chat_text: String = all
        .iter()
        .filter(|(p, _)| p.to_string_lossy().contains(".rung/chat/"))
        .map(|(_, b)| String::from_utf8_lossy(b).to_string())
        .collect();
    assert!(chat_text.contains("first question") && chat_text.contains("second question"));
    assert!(chat_text.contains("\"partial\":true"), "{chat_text}");
}

/// An OpenAI-shaped stream (rung's own, in the chunk shape of the fixtures above) whose reply
/// calls the given tools at once, each in one delta.
fn tool_call_stream(calls: &[(&str, serde_json::Value)]) -> Vec<u8> {
    let tool_calls: Vec<serde_json::Value> = calls
        .iter()
        .enumerate()
        .map(|(i, (name, args))| {
            serde_json::json!({"index": i, "id": format!("call_{i}"), "type": "function",
                               "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    let chunks = [
        serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                           "choices": [{"index": 0, "delta": {"role": "assistant", "tool_calls": tool_calls}, "finish_reason": null}]}),
        serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 0, "model": "m",
                           "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]}),
    ];
    let mut body: String = chunks.iter().map(|c| format!("data: {c}\n\n")).collect();
    body.push_str("data: [DONE]\n\n");
    body.into_bytes()
}

#[test]
fn workspace_tools_answer_a_model_through_the_mcp_functions() {
    let (tmp, ws) = common::new_workspace("vector-add");
    std::fs::create_dir_all(ws.join("context")).unwrap();
    std::fs::write(ws.join("context/notes.md"), "# Coalescing\nfloat4 loads make 128-bit transactions\n").unwrap();
    std::fs::write(tmp.path().join("outside.txt"), "not for the model\n").unwrap();
    let calls = [
        ("read_file", serde_json::json!({"path": "rung.toml", "max_lines": 3})),
        ("get_results", serde_json::json!({"version": "v001"})),
        ("search_context", serde_json::json!({"query": "float4 transactions"})),
        ("read_file", serde_json::json!({"path": "../outside.txt"})),
        ("get_asm", serde_json::json!({"version": "v999"})),
    ];
    let server = Server::start(vec![
        Reply::stream(&tool_call_stream(&calls), &[]),
        Reply::stream(&fixture("openai-text-usage.sse"), &[]),
    ]);
    let (_t, store) = store();
    let tools = rung::agent::tools::WorkspaceTools::new(ws.clone());
    let (conv, _, r) = turn(&openai(&server), &store, &tools, "q");
    r.unwrap();
    let answers: Vec<&Message> = conv.messages.iter().filter(|m| m.role == Role::Tool).collect();
    assert_eq!(answers.len(), 5);
    let rung_toml = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    let first_line = rung_toml.lines().next().unwrap();
    assert!(answers[0].text.starts_with(&format!("    1  {first_line}\n")), "{}", answers[0].text);
    assert!(!answers[0].is_error);
    assert!(answers[1].text.contains("v001") && answers[1].text.contains("not checked yet"), "{}", answers[1].text);
    // The workspace's own passage first (the index ranks it over rung's notes), from its line 1,
    // with the section it is under.
    assert!(
        answers[2]
            .text
            .starts_with("context/notes.md:1 § Coalescing\n# Coalescing\nfloat4 loads make 128-bit transactions\n"),
        "{}",
        answers[2].text
    );
    assert!(answers[3].is_error && answers[3].text.contains("outside the workspace"), "{}", answers[3].text);
    assert!(!answers[3].text.contains("not for the model"));
    assert!(answers[4].is_error && answers[4].text.contains("v999"), "{}", answers[4].text);
    // What went back to the model is what the conversation holds.
    let reqs = server.requests();
    let sent = &reqs[1].body["messages"];
    assert_eq!(sent[3]["content"].as_str().unwrap(), answers[0].text);
    let offered: Vec<&str> =
        reqs[0].body["tools"].as_array().unwrap().iter().map(|t| t["function"]["name"].as_str().unwrap()).collect();
    assert_eq!(
        offered,
        ["search_context", "read_file", "get_results", "get_asm", "diff_asm", "get_profile", "get_trace"]
    );
}

/// The prompt carries the workspace: `rung chat --version v002` sends rung.toml, the reference,
/// v002's source and its results of the file as it is now, and every rejected version's reason;
/// without `--version`, the task and the reference alone, for a first proposal.
#[test]
fn the_request_carries_the_task_the_version_in_focus_its_results_and_rejection_reasons() {
    use rung::store::{NewResult, Status, Store};
    let (_tmp, ws) = common::new_workspace("vector-add");
    let w = rung::workspace::Workspace::open(&ws).unwrap();
    let mut store = Store::open(&w.state_dir()).unwrap();
    for v in &w.versions {
        store.sync_version(v, &w.source_hash(v).unwrap(), Status::Draft).unwrap();
    }
    let v2 = w.version("v002").unwrap();
    let payload = serde_json::json!({
        "summary": "1 error(s): identifier \"qq\" is undefined",
        "diagnostics": [{"file": v2.path, "line": 7, "column": 3, "severity": "error", "message": "identifier \"qq\" is undefined"}],
    })
    .to_string();
    store
        .record(&NewResult {
            version: "v002",
            stage: "build",
            verdict: "fail",
            source_hash: &w.source_hash(v2).unwrap(),
            seed: Some(1),
            payload: &payload,
            tools: "{}",
            started_at_ms: 1,
            finished_at_ms: 2,
        })
        .unwrap();
    store.set_status("v001", Status::Rejected, Some("reads x twice; keep the row in registers")).unwrap();
    drop(store);
    let server = Server::start(vec![
        Reply::stream(&fixture("openai-text-usage.sse"), &[]),
        Reply::stream(&fixture("openai-text-usage.sse"), &[]),
    ]);
    let chat = |extra: &[&str]| {
        chat_with(&ws, &server, extra);
    };
    chat(&["--version", "v002"]);
    chat(&[]);
    let requests = server.requests();
    let system = |i: usize| requests[i].body["messages"][0]["content"].as_str().unwrap_or_default().to_string();
    let focused = system(0);
    assert!(focused.starts_with(rung::agent::SYSTEM_PROMPT), "the base prompt first");
    let spec = std::fs::read_to_string(ws.join("rung.toml")).unwrap();
    assert!(focused.contains(spec.lines().next().unwrap()), "the task: {focused}");
    assert!(focused.contains("## The reference"), "{focused}");
    assert!(focused.contains("The version in focus: v002"), "{focused}");
    assert!(focused.contains(std::fs::read_to_string(ws.join(&v2.path)).unwrap().lines().next().unwrap()));
    assert!(focused.contains("- build fail: 1 error(s): identifier \"qq\" is undefined"), "{focused}");
    assert!(focused.contains(":7: identifier \"qq\" is undefined"), "{focused}");
    assert!(focused.contains("- v001: reads x twice; keep the row in registers"), "the rejection reason: {focused}");
    let first = system(1);
    assert!(first.contains("No version in focus") && !first.contains("The version in focus"), "{first}");
    assert!(first.contains("- v001: reads x twice"), "{first}");
}

/// `rung chat` with a kernel in the reply: without --propose it says in one line that nothing
/// was written and how to write it; with --propose it writes the block as a new version made
/// from --version, as the TUI's chat does.
#[test]
fn rung_chat_says_how_to_propose_and_proposes_with_propose() {
    let (_tmp, ws) = common::new_workspace("vector-add");
    let kernel = std::fs::read_to_string(ws.join("versions/v001-naive.cu")).unwrap();
    let reply = format!("Use a grid-stride loop.\n\n```cuda\n{}\n// grid-stride\n```\n", kernel.trim_end());
    let server = Server::start(vec![
        Reply::stream(&common::loopback::openai_text(&reply), &[]),
        Reply::stream(&common::loopback::openai_text(&reply), &[]),
        Reply::stream(&common::loopback::openai_text(&reply), &[]),
    ]);
    let chat = |extra: &[&str]| chat_with(&ws, &server, extra);
    let versions = || std::fs::read_dir(ws.join("versions")).unwrap().count();
    let before = versions();
    let err = chat(&["--version", "v001"]);
    assert!(err.contains("the reply has code and nothing was written: `rung chat --propose --version v001`"), "{err}");
    assert_eq!(versions(), before, "nothing written without --propose");
    let err = chat(&["--version", "v001", "--propose"]);
    assert!(err.contains("[proposed v004 (versions/v004-agent-"), "{err}");
    assert!(err.contains("made from v001: `rung check v004` climbs its rungs]"), "{err}");
    assert_eq!(versions(), before + 1);
    let written = std::fs::read_dir(ws.join("versions"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("v004-"))
        .unwrap();
    assert!(std::fs::read_to_string(written).unwrap().contains("// grid-stride"));
    // Rejected, then proposed again word for word: written, with a warning naming the rejection.
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["-C", ws.to_str().unwrap(), "reject", "v004", "--reason", "no faster"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let err = chat(&["--version", "v001", "--propose"]);
    assert!(err.contains("[warning: v005 has the same source as v004 (rejected: no faster)]"), "{err}");
}

/// An endpoint that redirects does not get the key carried to the new address: the redirect is
/// the answer, an error naming where it pointed, and the other server sees no request.
#[test]
fn a_redirect_is_not_followed_with_the_key() {
    let elsewhere = Server::start(vec![Reply::stream(&fixture("anthropic-basic.sse"), &[])]);
    let target = format!("{}/v1/messages", elsewhere.url);
    let server = Server::start(vec![Reply::status(307, "").header("location", &target)]);
    let (_tmp, store) = store();
    let (_conv, _events, r) = turn(&anthropic(&server), &store, &NoTools, "hi");
    let e = r.unwrap_err().to_string();
    assert!(e.contains(&format!("redirects to {target}")) && e.contains("set base_url"), "{e}");
    assert_eq!(server.requests()[0].header("x-api-key"), Some(KEY), "the first request had it");
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(elsewhere.requests().is_empty(), "the key went to the redirect target");
}

/// `rung chat "make it faster" --no-tools` in `ws` against the loopback `server` (an agent
/// config written beside), with `extra` arguments; it must succeed. Returns its standard error.
fn chat_with(ws: &Path, server: &Server, extra: &[&str]) -> String {
    let cfg = ws.join("agent.toml");
    std::fs::write(
        &cfg,
        format!(
            "[agent]\nprovider = \"local\"\n\n[agent.providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\nretries = 0\n",
            server.url
        ),
    )
    .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rung"))
        .args(["-C", ws.to_str().unwrap(), "chat", "make it faster", "--no-tools", "--config", cfg.to_str().unwrap()])
        .args(extra)
        .env("NO_PROXY", "127.0.0.1")
        .env_remove("HTTP_PROXY")
        .env_remove("http_proxy")
        .env_remove("ALL_PROXY")
        .env_remove("all_proxy")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8_lossy(&out.stderr).into_owned()
}
