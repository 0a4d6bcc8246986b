//! The Anthropic Messages API (`POST {base_url}/v1/messages`, `stream: true`). Events of a type
//! rung does not know (new block or delta kinds, future events) are skipped, as the API's
//! versioning policy asks of clients.

use std::cell::RefCell;

use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{Endpoint, Flow, SseEvent, StreamEnd};
use super::openai::excerpt;
use super::{AgentError, AgentEvent, Cancel, Finish, Provider, Request, Role, Usage};

/// The API version rung speaks (the `anthropic-version` header).
pub const API_VERSION: &str = "2023-06-01";

pub struct Anthropic {
    http: Endpoint,
    model: String,
    max_tokens: u32,
}

impl Anthropic {
    pub fn new(http: Endpoint, model: String, max_tokens: u32) -> Anthropic {
        Anthropic { http, model, max_tokens }
    }

    /// The request body. Consecutive tool answers become one user message of `tool_result`
    /// blocks, as the API requires.
    pub fn body(&self, req: &Request<'_>) -> Value {
        let mut messages: Vec<Value> = Vec::new();
        for m in req.messages {
            match m.role {
                Role::Notice => {}
                Role::User => messages.push(json!({"role": "user", "content": m.text})),
                Role::Assistant => {
                    let mut content = Vec::new();
                    if !m.text.is_empty() {
                        content.push(json!({"type": "text", "text": m.text}));
                    }
                    for c in &m.tool_calls {
                        let input: Value = serde_json::from_str(&c.arguments).unwrap_or_else(|_| json!({}));
                        content.push(json!({"type": "tool_use", "id": c.id, "name": c.name, "input": input}));
                    }
                    if !content.is_empty() {
                        messages.push(json!({"role": "assistant", "content": content}));
                    }
                }
                Role::Tool => {
                    let block = json!({"type": "tool_result", "tool_use_id": m.tool_call_id,
                                       "content": m.text, "is_error": m.is_error});
                    let last_is_results = messages.last().is_some_and(|l| {
                        l["role"] == "user"
                            && l["content"].as_array().is_some_and(|a| a.iter().all(|b| b["type"] == "tool_result"))
                    });
                    if last_is_results {
                        messages.last_mut().expect("checked")["content"].as_array_mut().expect("checked").push(block);
                    } else {
                        messages.push(json!({"role": "user", "content": [block]}));
                    }
                }
            }
        }
        let mut body = json!({
            "model": self.model,
            "max_tokens": self.max_tokens,
            "system": req.system,
            "messages": messages,
            "stream": true,
        });
        if !req.tools.is_empty() {
            body["tools"] = req
                .tools
                .iter()
                .map(|t| json!({"name": t.name, "description": t.description, "input_schema": t.parameters}))
                .collect();
        }
        body
    }
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: StartMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: Block,
    },
    ContentBlockDelta {
        index: usize,
        delta: BlockDelta,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<EventUsage>,
    },
    MessageStop,
    Error {
        error: Value,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct StartMessage {
    #[serde(default)]
    usage: Option<EventUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Block {
    ToolUse {
        id: String,
        name: String,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
#[serde(tag = "type")]
enum BlockDelta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

/// Input counts every token read, cached or not: `input_tokens` plus cache reads and writes.
#[derive(Deserialize, Default)]
struct EventUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
}

impl EventUsage {
    fn usage(&self) -> Usage {
        let input = [self.input_tokens, self.cache_creation_input_tokens, self.cache_read_input_tokens];
        Usage { input_tokens: input.iter().flatten().sum(), output_tokens: self.output_tokens.unwrap_or(0) }
    }
}

impl Provider for Anthropic {
    fn secret(&self) -> Option<super::Secret> {
        self.http.key.clone()
    }

    fn describe(&self) -> String {
        format!("anthropic {} ({})", self.model, self.http.base_url)
    }

    fn model(&self) -> &str {
        &self.model
    }

    fn stream(
        &self,
        req: &Request<'_>,
        cancel: &Cancel,
        sink: &mut dyn FnMut(AgentEvent),
    ) -> Result<Finish, AgentError> {
        let url = self.http.url("v1/messages");
        let mut headers = vec![
            ("content-type", "application/json".to_string()),
            ("accept", "text/event-stream".into()),
            ("anthropic-version", API_VERSION.into()),
        ];
        if let Some(k) = &self.http.key {
            headers.push(("x-api-key", k.expose().to_string()));
        }
        let body = self.body(req).to_string();
        let mut finish = Finish::default();
        let mut stopped = false;
        let sink = RefCell::new(sink);
        let emit = |e: AgentEvent| (sink.borrow_mut())(e);
        let mut input_tokens = 0;
        let mut on_event = |ev: SseEvent| -> Result<Flow, AgentError> {
            let data = ev.data.trim();
            if data.is_empty() {
                return Ok(Flow::More);
            }
            let parsed: Event = serde_json::from_str(data)
                .map_err(|e| AgentError::Malformed { detail: format!("{e} in `{}`", excerpt(&self.http, data)) })?;
            match parsed {
                Event::MessageStart { message } => {
                    if let Some(u) = message.usage {
                        input_tokens = u.usage().input_tokens;
                        emit(AgentEvent::Usage(u.usage()));
                    }
                }
                Event::ContentBlockStart { index, content_block: Block::ToolUse { id, name } } => {
                    emit(AgentEvent::ToolCall { index, id, name });
                }
                Event::ContentBlockStart { .. } => {}
                Event::ContentBlockDelta { delta: BlockDelta::Text { text }, .. } => {
                    if !text.is_empty() {
                        emit(AgentEvent::Text(text));
                    }
                }
                Event::ContentBlockDelta { index, delta: BlockDelta::InputJson { partial_json } } => {
                    if !partial_json.is_empty() {
                        emit(AgentEvent::ToolArguments { index, fragment: partial_json });
                    }
                }
                Event::ContentBlockDelta { .. } => {}
                Event::MessageDelta { delta, usage } => {
                    if let Some(r) = delta.stop_reason {
                        finish.stop_reason = Some(r);
                    }
                    if let Some(u) = usage {
                        // output_tokens here is the reply's running total.
                        let mut u = u.usage();
                        if u.input_tokens == 0 {
                            u.input_tokens = input_tokens;
                        }
                        emit(AgentEvent::Usage(u));
                    }
                }
                Event::MessageStop => {
                    stopped = true;
                    return Ok(Flow::Stop);
                }
                Event::Error { error } => {
                    let kind = error.get("type").and_then(Value::as_str).unwrap_or("error");
                    let message = error.get("message").and_then(Value::as_str).unwrap_or("");
                    return Err(AgentError::Stream { message: self.http.redact(&format!("{kind}: {message}")) });
                }
                Event::Other => {}
            }
            Ok(Flow::More)
        };
        let end = self.http.stream(&url, &headers, &body, cancel, &mut |e| emit(e), &mut on_event)?;
        // A body that ends cleanly right after the stop reason is complete even if its last
        // event (message_stop) has no terminating blank line and so is never dispatched.
        if end == StreamEnd::Eof && !stopped && finish.stop_reason.is_none() {
            return Err(AgentError::Cut { detail: "the stream ended before message_stop".into() });
        }
        Ok(finish)
    }
}
