//! Any OpenAI-compatible chat-completions endpoint (`POST {base_url}/chat/completions` with
//! `stream: true`): OpenAI, vLLM, Ollama, llama.cpp's server, OpenRouter, LM Studio. The chunk
//! types read only what rung uses and tolerate every other field, and `null` where a list or
//! text is expected, as servers differ there.

use serde::Deserialize;
use serde_json::{Value, json};

use super::http::{Endpoint, Flow, SseEvent, StreamEnd};
use super::{AgentError, AgentEvent, Cancel, Finish, Message, Provider, Request, Role, Usage};

pub struct OpenAi {
    http: Endpoint,
    model: String,
    max_tokens: Option<u32>,
}

impl OpenAi {
    pub fn new(http: Endpoint, model: String, max_tokens: Option<u32>) -> OpenAi {
        OpenAi { http, model, max_tokens }
    }

    /// The request body (public for tests that check what is sent).
    pub fn body(&self, req: &Request<'_>) -> Value {
        let mut messages = vec![json!({"role": "system", "content": req.system})];
        for m in req.messages {
            messages.extend(message(m));
        }
        let mut body = json!({
            "model": self.model,
            "messages": messages,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if let Some(n) = self.max_tokens {
            body["max_tokens"] = json!(n);
        }
        if !req.tools.is_empty() {
            let tools: Vec<Value> = req
                .tools
                .iter()
                .map(|t| {
                    json!({"type": "function", "function": {
                        "name": t.name, "description": t.description, "parameters": t.parameters}})
                })
                .collect();
            body["tools"] = Value::Array(tools);
        }
        body
    }
}

fn message(m: &Message) -> Option<Value> {
    Some(match m.role {
        Role::Notice => return None,
        Role::User => json!({"role": "user", "content": m.text}),
        Role::Assistant => {
            if m.text.is_empty() && m.tool_calls.is_empty() {
                return None;
            }
            let mut v =
                json!({"role": "assistant", "content": if m.text.is_empty() { Value::Null } else { json!(m.text) }});
            if !m.tool_calls.is_empty() {
                v["tool_calls"] = m
                    .tool_calls
                    .iter()
                    .map(|c| json!({"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}))
                    .collect();
            }
            v
        }
        Role::Tool => json!({"role": "tool", "tool_call_id": m.tool_call_id, "content": m.text}),
    })
}

fn null_default<'de, D: serde::Deserializer<'de>, T: Default + Deserialize<'de>>(d: D) -> Result<T, D::Error> {
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default, deserialize_with = "null_default")]
    choices: Vec<Choice>,
    #[serde(default)]
    usage: Option<ChunkUsage>,
    /// Some servers report a failure inside the stream.
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct Choice {
    #[serde(default, deserialize_with = "null_default")]
    index: usize,
    #[serde(default, deserialize_with = "null_default")]
    delta: Delta,
    #[serde(default)]
    finish_reason: Option<String>,
}

#[derive(Deserialize, Default)]
struct Delta {
    #[serde(default)]
    content: Option<String>,
    #[serde(default, deserialize_with = "null_default")]
    tool_calls: Vec<ToolDelta>,
}

#[derive(Deserialize)]
struct ToolDelta {
    #[serde(default, deserialize_with = "null_default")]
    index: usize,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    function: Option<FunctionDelta>,
}

#[derive(Deserialize)]
struct FunctionDelta {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    arguments: Option<String>,
}

#[derive(Deserialize)]
struct ChunkUsage {
    #[serde(default, deserialize_with = "null_default")]
    prompt_tokens: u64,
    #[serde(default, deserialize_with = "null_default")]
    completion_tokens: u64,
}

/// A short, key-free excerpt of an event's data for an error message.
pub(crate) fn excerpt(http: &Endpoint, data: &str) -> String {
    let mut s: String = data.chars().take(160).collect();
    if s.len() < data.len() {
        s.push('…');
    }
    http.redact(&s)
}

impl Provider for OpenAi {
    fn secret(&self) -> Option<super::Secret> {
        self.http.key.clone()
    }

    fn describe(&self) -> String {
        format!("openai-compatible {} ({})", self.model, self.http.base_url)
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
        let url = self.http.url("chat/completions");
        let mut headers =
            vec![("content-type", "application/json".to_string()), ("accept", "text/event-stream".into())];
        if let Some(k) = &self.http.key {
            headers.push(("authorization", format!("Bearer {}", k.expose())));
        }
        let body = self.body(req).to_string();
        let mut finish = Finish::default();
        let mut done = false;
        // Retries and events both go to `sink`, never at the same time.
        let sink = std::cell::RefCell::new(sink);
        let emit = |e: AgentEvent| (sink.borrow_mut())(e);
        let mut on_event = |ev: SseEvent| -> Result<Flow, AgentError> {
            let data = ev.data.trim();
            if data == "[DONE]" {
                done = true;
                return Ok(Flow::Stop);
            }
            if data.is_empty() {
                return Ok(Flow::More);
            }
            let chunk: Chunk = serde_json::from_str(data)
                .map_err(|e| AgentError::Malformed { detail: format!("{e} in `{}`", excerpt(&self.http, data)) })?;
            if let Some(err) = chunk.error {
                let message = err.get("message").and_then(Value::as_str).map(String::from).unwrap_or(err.to_string());
                return Err(AgentError::Stream { message: self.http.redact(&message) });
            }
            for choice in chunk.choices.iter().filter(|c| c.index == 0) {
                if let Some(t) = choice.delta.content.as_deref().filter(|t| !t.is_empty()) {
                    emit(AgentEvent::Text(t.to_string()));
                }
                for tc in &choice.delta.tool_calls {
                    let name = tc.function.as_ref().and_then(|f| f.name.clone());
                    if let Some(id) = tc.id.clone().filter(|i| !i.is_empty()) {
                        emit(AgentEvent::ToolCall { index: tc.index, id, name: name.unwrap_or_default() });
                    }
                    if let Some(a) = tc.function.as_ref().and_then(|f| f.arguments.clone()) {
                        emit(AgentEvent::ToolArguments { index: tc.index, fragment: a });
                    }
                }
                if let Some(r) = &choice.finish_reason {
                    finish.stop_reason = Some(r.clone());
                }
            }
            if let Some(u) = chunk.usage {
                emit(AgentEvent::Usage(Usage { input_tokens: u.prompt_tokens, output_tokens: u.completion_tokens }));
            }
            Ok(Flow::More)
        };
        let end = self.http.stream(&url, &headers, &body, cancel, &mut |e| emit(e), &mut on_event)?;
        // Without [DONE], a clean end after a finish reason is complete (some servers omit the
        // marker); without either, the reply was cut.
        if end == StreamEnd::Eof && !done && finish.stop_reason.is_none() {
            return Err(AgentError::Cut { detail: "the stream ended without a finish reason or [DONE]".into() });
        }
        Ok(finish)
    }
}
