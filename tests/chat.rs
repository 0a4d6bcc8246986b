//! The chat side panel on its own (the App wires it into its layout): snapshots of a streaming
//! reply, a code block, tool calls and an error, each also asserting the text it must show, and
//! its keys (send, history, slash commands, newline).

use std::time::Duration;

use crossterm::event::{KeyCode, KeyEvent, KeyModifiers};
use ratatui::Terminal;
use ratatui::backend::TestBackend;
use ratatui::buffer::Buffer;
use ratatui::style::Color;
use ratatui::widgets::Block;
use rung::agent::{AgentError, AgentEvent, Conversation, Message, Role, ToolCall, Usage};
use rung_tui::chat::{Activity, ChatOutcome, ChatPanel, SlashCommand};

fn draw(panel: &ChatPanel, width: u16, height: u16) -> (String, Buffer) {
    let mut term = Terminal::new(TestBackend::new(width, height)).unwrap();
    let block = Block::bordered().title(panel.title());
    term.draw(|f| panel.draw(block, f.area(), f.buffer_mut())).unwrap();
    (term.backend().to_string(), term.backend().buffer().clone())
}

fn key(code: KeyCode) -> KeyEvent {
    KeyEvent::new(code, KeyModifiers::NONE)
}

fn type_text(panel: &mut ChatPanel, text: &str) {
    for c in text.chars() {
        panel.handle_key(key(KeyCode::Char(c)));
    }
}

fn panel() -> ChatPanel {
    ChatPanel::new("openai gpt-test", true)
}

#[test]
fn streaming_partial_text() {
    let mut p = panel();
    p.push_user("Why is v002 slower than v001?");
    for t in ["The loads in v002 are ", "not coalesced: each thread reads a stride of 4 floats, so"] {
        p.apply(&AgentEvent::Text(t.into()));
    }
    assert_eq!(p.activity, Activity::Streaming);
    let (text, _) = draw(&p, 60, 14);
    assert!(text.contains("you"));
    assert!(text.contains("agent …"), "{text}");
    assert!(text.contains("The loads in v002 are not coalesced:"), "{text}");
    assert!(text.contains("streaming · /stop cancels"));
    insta::assert_snapshot!("chat_streaming", text);
}

#[test]
fn code_block_is_highlighted() {
    let mut p = panel();
    p.push_user("a vectorised version?");
    p.apply(&AgentEvent::Text("Use `float4`:\n\n```cuda\n__global__ void add4(const float4* a, float4* o) {\n  o[threadIdx.x] = a[threadIdx.x];\n}\n```\n".into()));
    p.apply(&AgentEvent::ReplyDone { usage: Usage { input_tokens: 52, output_tokens: 61 } });
    p.finish(&Ok(()), None);
    assert_eq!(p.activity, Activity::Idle);
    let (text, buf) = draw(&p, 64, 16);
    assert!(text.contains("52 in / 61 out"), "{text}");
    assert!(text.contains("┌ cuda"));
    assert!(text.contains("│ __global__ void add4(const float4* a, float4* o) {"), "{text}");
    // The grammar colours the code: `__global__` and `void` are not the plain text colour.
    let row = text.lines().position(|l| l.contains("__global__")).unwrap() as u16;
    let col = text.lines().nth(row as usize).unwrap().chars().position(|c| c == '_').unwrap() as u16;
    assert!(matches!(buf[(col, row)].fg, Color::Rgb(..)), "{:?}", buf[(col, row)]);
    insta::assert_snapshot!("chat_code_block", text);
}

#[test]
fn tool_calls_are_one_line_each() {
    let mut p = panel();
    p.push_user("look at v002's SASS");
    p.apply(&AgentEvent::Text("Let me read the listing.".into()));
    p.apply(&AgentEvent::ToolCall { index: 0, id: "c1".into(), name: "get_asm".into() });
    p.apply(&AgentEvent::ToolArguments { index: 0, fragment: "{\"version\":".into() });
    p.apply(&AgentEvent::ToolArguments { index: 0, fragment: " \"v002\"}".into() });
    let (text, _) = draw(&p, 70, 12);
    assert!(text.contains("⚙ get_asm({\"version\": \"v002\"}) ⋯"), "while streaming: {text}");
    p.apply(&AgentEvent::ReplyDone { usage: Usage::default() });
    p.apply(&AgentEvent::ToolResult {
        id: "c1".into(),
        name: "get_asm".into(),
        is_error: false,
        text: "v002: 1 kernel, 48 instructions (sass)\n...".into(),
    });
    p.apply(&AgentEvent::ToolCall { index: 0, id: "c2".into(), name: "read_file".into() });
    p.apply(&AgentEvent::ToolArguments { index: 0, fragment: "{\"path\": \"../etc/passwd\"}".into() });
    p.apply(&AgentEvent::ReplyDone { usage: Usage::default() });
    p.apply(&AgentEvent::ToolResult {
        id: "c2".into(),
        name: "read_file".into(),
        is_error: true,
        text: "error: `../etc/passwd` cannot be read: it is outside the workspace".into(),
    });
    let (text, _) = draw(&p, 70, 12);
    assert!(text.contains("⚙ get_asm({\"version\": \"v002\"}) ✓ v002: 1 kernel, 48 instructions"), "{text}");
    assert!(text.contains("⚙ read_file({\"path\": \"../etc/passwd\"}) ✗ error:"), "{text}");
    insta::assert_snapshot!("chat_tool_calls", text);
}

#[test]
fn an_error_keeps_the_partial_reply() {
    let mut p = panel();
    p.push_user("explain the roofline");
    p.apply(&AgentEvent::Text("The kernel reaches 61% of".into()));
    p.apply(&AgentEvent::Retrying { attempt: 1, wait: Duration::from_millis(1500), reason: "HTTP 429".into() });
    let (text, _) = draw(&p, 60, 12);
    assert!(text.contains("⟳ retry 1 in 1.5s: HTTP 429"), "{text}");
    let e = AgentError::Cut { detail: "connection reset".into() };
    p.finish(&Err(e), None);
    let (text, buf) = draw(&p, 60, 12);
    assert!(text.contains("agent (cut short)"), "{text}");
    assert!(text.contains("The kernel reaches 61% of"));
    assert!(text.contains("! error: the connection closed before the reply"), "{text}");
    let row = text.lines().position(|l| l.contains("! error")).unwrap() as u16;
    assert_eq!(buf[(1, row)].fg, Color::Red);
    insta::assert_snapshot!("chat_error", text);
}

#[test]
fn keys_send_recall_and_command() {
    let mut p = panel();
    type_text(&mut p, "first question");
    assert_eq!(p.handle_key(key(KeyCode::Enter)), ChatOutcome::Send("first question".into()));
    assert_eq!(p.input_text(), "");
    p.finish(&Ok(()), None);
    // Alt+Enter is a new line, not a send.
    type_text(&mut p, "two");
    assert_eq!(p.handle_key(KeyEvent::new(KeyCode::Enter, KeyModifiers::ALT)), ChatOutcome::Consumed);
    type_text(&mut p, "lines");
    assert_eq!(p.input_text(), "two\nlines");
    assert_eq!(p.handle_key(key(KeyCode::Enter)), ChatOutcome::Send("two\nlines".into()));
    p.finish(&Ok(()), None);
    // Up recalls the history, newest first; inside a recalled multi-line entry Up first moves
    // the cursor to its first line; Down goes back to an empty box.
    p.handle_key(key(KeyCode::Up));
    assert_eq!(p.input_text(), "two\nlines");
    p.handle_key(key(KeyCode::Up));
    assert_eq!(p.input_text(), "two\nlines");
    p.handle_key(key(KeyCode::Up));
    assert_eq!(p.input_text(), "first question");
    p.handle_key(key(KeyCode::Down));
    assert_eq!(p.input_text(), "two\nlines");
    p.handle_key(key(KeyCode::Down));
    assert_eq!(p.input_text(), "");
    // Slash commands.
    type_text(&mut p, "/model claude-test");
    assert_eq!(
        p.handle_key(key(KeyCode::Enter)),
        ChatOutcome::Command(SlashCommand::Model(Some("claude-test".into())))
    );
    type_text(&mut p, "/bogus");
    assert_eq!(p.handle_key(key(KeyCode::Enter)), ChatOutcome::Consumed);
    let (text, _) = draw(&p, 80, 12);
    assert!(text.contains("unknown command /bogus"), "{text}");
    // While a reply streams, a message is not sent but /stop is.
    p.apply(&AgentEvent::Text("...".into()));
    type_text(&mut p, "again");
    assert_eq!(p.handle_key(key(KeyCode::Enter)), ChatOutcome::Consumed);
    assert_eq!(p.input_text(), "again", "the text stays in the box");
    p.handle_key(KeyEvent::new(KeyCode::Char('u'), KeyModifiers::CONTROL));
    let _ = p.input_text();
    let mut q = panel();
    q.apply(&AgentEvent::Text("...".into()));
    type_text(&mut q, "/stop");
    assert_eq!(q.handle_key(key(KeyCode::Enter)), ChatOutcome::Command(SlashCommand::Stop));
    assert_eq!(q.handle_key(key(KeyCode::Tab)), ChatOutcome::Ignored);
}

#[test]
fn a_saved_conversation_shows_again() {
    let mut conv = Conversation::in_memory("anthropic", "claude-test");
    conv.messages = vec![
        Message::user("what does v002 spill?"),
        Message {
            tool_calls: vec![ToolCall {
                id: "t1".into(),
                name: "get_asm".into(),
                arguments: "{\"version\":\"v002\"}".into(),
            }],
            ..Message { role: Role::Assistant, ..Message::user("Reading it.") }
        },
        Message {
            tool_call_id: Some("t1".into()),
            tool_name: Some("get_asm".into()),
            ..Message { role: Role::Tool, ..Message::user("v002: no local stores") }
        },
        Message { partial: true, ..Message { role: Role::Assistant, ..Message::user("Nothing spills") } },
        Message::notice("error: the connection closed before the reply was complete: reset", true),
    ];
    conv.usage = Usage { input_tokens: 900, output_tokens: 40 };
    let mut p = panel();
    p.show(&conv);
    let (text, _) = draw(&p, 80, 16);
    assert!(text.contains("chat · anthropic claude-test · 900 in / 40 out"), "{text}");
    assert!(text.contains("⚙ get_asm({\"version\":\"v002\"}) ✓ v002: no local stores"), "{text}");
    assert!(text.contains("agent (cut short)") && text.contains("Nothing spills"), "{text}");
    assert!(text.contains("! error: the connection closed"), "{text}");
    // The history holds the user's messages for Up.
    p.handle_key(key(KeyCode::Up));
    assert_eq!(p.input_text(), "what does v002 spill?");
}

#[test]
fn clear_empties_the_transcript_and_a_notice_keeps_its_lines() {
    let mut p = panel();
    p.push_user("old question");
    p.apply(&AgentEvent::Text("old answer".into()));
    p.apply(&AgentEvent::ReplyDone { usage: Usage { input_tokens: 7, output_tokens: 3 } });
    p.finish(&Ok(()), None);
    p.clear();
    p.push_notice("first line\n    [agent]\nlast line", false);
    let (text, _) = draw(&p, 60, 10);
    assert!(!text.contains("old question") && !text.contains("old answer"), "{text}");
    assert!(text.contains("7 in / 3 out"), "the tokens so far stay: {text}");
    // Each line of a notice is a row of its own, indented under the first.
    let rows: Vec<&str> = text.lines().filter(|l| l.contains("line") || l.contains("[agent]")).collect();
    assert_eq!(rows.len(), 3, "{text}");
    assert!(
        rows[0].contains("│! first line") && rows[1].contains("│      [agent]") && rows[2].contains("│  last line"),
        "{text}"
    );
}

#[test]
fn the_passages_in_the_prompt_are_listed_under_the_message() {
    let mut p = panel();
    p.push_user("use stmatrix in the epilogue");
    p.push_context(vec![]);
    assert_eq!(p.entries.len(), 1, "no passages, no line");
    p.push_context(vec!["context/ptx/0412-stmatrix.md:1 § 9.7.16.10. stmatrix".into(), "rung:hopper.md:12".into()]);
    let (text, _) = draw(&p, 70, 12);
    assert!(text.contains("context: 2 passages in the prompt"), "{text}");
    assert!(text.contains("context/ptx/0412-stmatrix.md:1 § 9.7.16.10. stmatrix"), "{text}");
    assert!(text.contains("rung:hopper.md:12"), "{text}");
}
