//! One streaming POST with server-sent events, shared by the HTTP providers: time limits,
//! retries with backoff on 429 and 5xx (honouring `Retry-After` and `retry-after-ms`),
//! cancellation, and error texts with the key taken out.
//!
//! The request runs on a thread of its own (ureq is blocking); it sends what it reads over a
//! channel, and the caller waits on that channel in slices of [`POLL`], so a cancel or a silent
//! server is noticed within one slice whatever the socket is doing. A cancelled or abandoned
//! request's thread ends at its next read, when it finds nobody listening, and drops the
//! connection.

use std::io::Read;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use eventsource_stream::{EventStreamError, Eventsource};

use super::secrets::{KeySource, Secret};
use super::{AgentError, AgentEvent, Cancel, POLL};

#[derive(Debug, Clone, PartialEq)]
pub struct HttpOptions {
    /// Time to connect and get the response's headers.
    pub connect_timeout: Duration,
    /// The longest silence allowed once the request is sent.
    pub idle_timeout: Duration,
    /// Retries after the first attempt, on 408, 409, 429, 5xx and failed connections.
    pub retries: u32,
    /// The first retry's wait (doubling, with jitter), when the server gives no Retry-After.
    pub backoff: Duration,
    pub backoff_max: Duration,
    /// A Retry-After longer than this is not waited for: the error says how long was asked.
    pub max_retry_after: Duration,
    /// Use `HTTPS_PROXY`/`HTTP_PROXY`/`ALL_PROXY` (and `NO_PROXY`) as ureq reads them.
    pub proxy_from_env: bool,
}

impl Default for HttpOptions {
    fn default() -> HttpOptions {
        HttpOptions {
            connect_timeout: Duration::from_secs(15),
            idle_timeout: Duration::from_secs(120),
            retries: 3,
            backoff: Duration::from_millis(500),
            backoff_max: Duration::from_secs(20),
            max_retry_after: Duration::from_secs(120),
            proxy_from_env: true,
        }
    }
}

/// Where an HTTP provider sends its requests, and with which key.
#[derive(Debug, Clone)]
pub struct Endpoint {
    pub base_url: String,
    pub key: Option<Secret>,
    pub key_source: KeySource,
    pub opts: HttpOptions,
}

/// One server-sent event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseEvent {
    pub event: String,
    pub data: String,
}

/// Whether the caller wants more events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flow {
    More,
    Stop,
}

/// How a stream ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StreamEnd {
    /// The caller said stop (it saw the provider's end marker).
    Stopped,
    /// The server closed the body cleanly; whether the reply was complete is the caller's call.
    Eof,
}

enum Msg {
    /// Connecting or sending failed before any response.
    Failed(String),
    /// A response that is not 2xx, with its body (capped).
    Status {
        code: u16,
        retry_after: Option<Duration>,
        body: String,
    },
    /// Bytes arrived (a keep-alive comment counts as life too).
    Alive,
    Event(SseEvent),
    /// The bytes are not server-sent events.
    Bad(String),
    /// The connection broke while reading the body.
    Broken(String),
    End,
}

/// Reads the body in pieces as they arrive, telling the waiting side of each.
struct Chunks<R> {
    reader: R,
    tx: mpsc::Sender<Msg>,
}

impl<R: Read> Iterator for Chunks<R> {
    type Item = Result<Vec<u8>, std::io::Error>;
    fn next(&mut self) -> Option<Self::Item> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            return match self.reader.read(&mut buf) {
                Ok(0) => None,
                Ok(n) => {
                    buf.truncate(n);
                    // Nobody listening: stop reading, which drops the connection.
                    if self.tx.send(Msg::Alive).is_err() {
                        return None;
                    }
                    Some(Ok(buf))
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => Some(Err(e)),
            };
        }
    }
}

/// The events of a byte stream, parsed by eventsource-stream; usable on any reader (tests feed
/// it pieces split wherever they like).
pub fn events<I>(pieces: I) -> impl Iterator<Item = Result<SseEvent, EventStreamError<std::io::Error>>>
where
    I: Iterator<Item = Result<Vec<u8>, std::io::Error>> + Unpin,
{
    futures::executor::block_on_stream(futures::stream::iter(pieces).eventsource())
        .map(|r| r.map(|e| SseEvent { event: e.event, data: e.data }))
}

/// The wait a response asks for: `retry-after-ms` (OpenAI's), else `Retry-After` in seconds.
/// An HTTP-date Retry-After is not read; the backoff applies instead.
fn retry_after(headers: &ureq::http::HeaderMap) -> Option<Duration> {
    let num = |name: &str| {
        headers.get(name)?.to_str().ok()?.trim().parse::<f64>().ok().filter(|v| v.is_finite() && *v >= 0.0)
    };
    if let Some(ms) = num("retry-after-ms") {
        return Some(Duration::from_secs_f64(ms / 1000.0));
    }
    num("retry-after").map(Duration::from_secs_f64)
}

fn retryable(code: u16) -> bool {
    matches!(code, 408 | 409 | 429) || (500..600).contains(&code)
}

/// The `error.message` of a JSON error body (OpenAI's and Anthropic's shape), else the body's
/// start; a body that says nothing is "(empty body)".
pub fn error_text(body: &str) -> String {
    let parsed: Option<serde_json::Value> = serde_json::from_str(body).ok();
    let msg = parsed.as_ref().and_then(|v| {
        let e = v.get("error")?;
        e.get("message").and_then(|m| m.as_str()).map(String::from).or_else(|| e.as_str().map(String::from))
    });
    let text = msg.unwrap_or_else(|| body.trim().to_string());
    if text.is_empty() {
        return "(empty body)".into();
    }
    let mut cut: String = text.chars().take(400).collect();
    if cut.len() < text.len() {
        cut.push('…');
    }
    cut
}

/// A factor in [0.5, 1) from the standard library's randomly keyed hasher.
fn jitter() -> f64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(Instant::now().elapsed().as_nanos() as u64);
    0.5 + (h.finish() >> 11) as f64 / (1u64 << 53) as f64 * 0.5
}

impl Endpoint {
    pub fn url(&self, path: &str) -> String {
        format!("{}/{}", self.base_url.trim_end_matches('/'), path.trim_start_matches('/'))
    }

    /// Any text with the key taken out.
    pub fn redact(&self, text: &str) -> String {
        match &self.key {
            Some(k) => k.redact(text),
            None => text.to_string(),
        }
    }

    /// POSTs `body` to `url` and hands each event to `on_event` until it says stop, the body
    /// ends, or something fails. Retries happen only before the first event, so a reply is
    /// never shown twice; each retry is reported to `sink` first.
    pub fn stream(
        &self,
        url: &str,
        headers: &[(&str, String)],
        body: &str,
        cancel: &Cancel,
        sink: &mut dyn FnMut(AgentEvent),
        on_event: &mut dyn FnMut(SseEvent) -> Result<Flow, AgentError>,
    ) -> Result<StreamEnd, AgentError> {
        let opts = &self.opts;
        let mut attempt: u32 = 0;
        loop {
            attempt += 1;
            let rx = self.spawn(url, headers, body);
            let started = Instant::now();
            let mut last = Instant::now();
            let mut opened = false;
            // A failure worth retrying: its error if no retry is left, and the wait asked for.
            let (error, asked) = loop {
                if cancel.is_cancelled() {
                    return Err(AgentError::Cancelled);
                }
                match rx.recv_timeout(POLL) {
                    Ok(Msg::Failed(detail)) => {
                        break (
                            AgentError::Connect { url: url.into(), attempts: attempt, detail: self.redact(&detail) },
                            None,
                        );
                    }
                    Ok(Msg::Status { code, retry_after, body }) => {
                        let message = self.redact(&error_text(&body));
                        match code {
                            401 | 403 => {
                                return Err(AgentError::Unauthorized {
                                    url: url.into(),
                                    status: code,
                                    message,
                                    key_source: self.key_source.describe(),
                                });
                            }
                            429 => {
                                let e = AgentError::RateLimited {
                                    url: url.into(),
                                    attempts: attempt,
                                    retry_after,
                                    message,
                                };
                                break (e, retry_after);
                            }
                            c if retryable(c) => {
                                let e = AgentError::Server { url: url.into(), status: c, attempts: attempt, message };
                                break (e, retry_after);
                            }
                            c => return Err(AgentError::Rejected { url: url.into(), status: c, message }),
                        }
                    }
                    Ok(Msg::Alive) => {
                        opened = true;
                        last = Instant::now();
                    }
                    Ok(Msg::Event(ev)) => {
                        last = Instant::now();
                        if on_event(ev)? == Flow::Stop {
                            return Ok(StreamEnd::Stopped);
                        }
                    }
                    Ok(Msg::Bad(d)) => return Err(AgentError::Malformed { detail: self.redact(&d) }),
                    Ok(Msg::Broken(d)) => return Err(AgentError::Cut { detail: self.redact(&d) }),
                    Ok(Msg::End) => return Ok(StreamEnd::Eof),
                    Err(mpsc::RecvTimeoutError::Timeout) => {
                        let (limit, since) = if opened {
                            (opts.idle_timeout, last)
                        } else {
                            (opts.connect_timeout + opts.idle_timeout, started)
                        };
                        if since.elapsed() > limit {
                            let what = if opened { format!("the stream of {url}") } else { url.to_string() };
                            return Err(AgentError::Timeout { what, after: limit });
                        }
                    }
                    Err(mpsc::RecvTimeoutError::Disconnected) => {
                        return Err(AgentError::Cut { detail: "the request's thread stopped".into() });
                    }
                }
            };
            if attempt > opts.retries {
                return Err(error);
            }
            let wait = match asked {
                Some(d) if d > opts.max_retry_after => return Err(error),
                Some(d) => d,
                None => opts.backoff.saturating_mul(1 << (attempt - 1).min(16)).min(opts.backoff_max).mul_f64(jitter()),
            };
            sink(AgentEvent::Retrying { attempt, wait, reason: error.to_string() });
            if cancel.sleep(wait) {
                return Err(AgentError::Cancelled);
            }
        }
    }

    fn spawn(&self, url: &str, headers: &[(&str, String)], body: &str) -> mpsc::Receiver<Msg> {
        let (tx, rx) = mpsc::channel();
        let url = url.to_string();
        let headers: Vec<(String, String)> = headers.iter().map(|(k, v)| (k.to_string(), v.clone())).collect();
        let body = body.to_string();
        let opts = self.opts.clone();
        std::thread::spawn(move || request(url, headers, body, opts, tx));
        rx
    }
}

fn request(url: String, headers: Vec<(String, String)>, body: String, opts: HttpOptions, tx: mpsc::Sender<Msg>) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .timeout_connect(Some(opts.connect_timeout))
        .timeout_recv_response(Some(opts.connect_timeout + opts.idle_timeout))
        .http_status_as_error(false)
        // A redirect would carry the API key (x-api-key, Authorization) to wherever it points:
        // never followed; the 3xx is the answer, with where it pointed.
        .max_redirects(0)
        .proxy(if opts.proxy_from_env { ureq::Proxy::try_from_env() } else { None })
        .build()
        .into();
    let mut req = agent.post(&url);
    for (k, v) in &headers {
        req = req.header(k.as_str(), v.as_str());
    }
    let resp = match req.send(body.as_bytes()) {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(Msg::Failed(e.to_string()));
            return;
        }
    };
    let code = resp.status().as_u16();
    if (300..400).contains(&code) {
        let to = resp.headers().get("location").and_then(|v| v.to_str().ok()).unwrap_or("nowhere said");
        let body = serde_json::json!({ "error": { "message": format!(
            "the endpoint redirects to {to}; rung does not follow a redirect with the API key: set base_url to where it points"
        ) } })
        .to_string();
        let _ = tx.send(Msg::Status { code, retry_after: None, body });
        return;
    }
    if !(200..300).contains(&code) {
        let retry_after = retry_after(resp.headers());
        let mut text = String::new();
        let _ = resp.into_body().into_reader().take(64 * 1024).read_to_string(&mut text);
        let _ = tx.send(Msg::Status { code, retry_after, body: text });
        return;
    }
    let reader = resp.into_body().into_reader();
    let pieces = Chunks { reader, tx: tx.clone() };
    for item in events(pieces) {
        let msg = match item {
            Ok(ev) => Msg::Event(ev),
            Err(EventStreamError::Transport(e)) => {
                let _ = tx.send(Msg::Broken(e.to_string()));
                return;
            }
            Err(e) => {
                let _ = tx.send(Msg::Bad(e.to_string()));
                return;
            }
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
    let _ = tx.send(Msg::End);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_survive_any_split() {
        let text = "event: a\ndata: {\"t\":\"— µ\"}\n\n: keep-alive\n\ndata: x\r\ndata: y\r\n\r\n";
        let want = vec![
            SseEvent { event: "a".into(), data: "{\"t\":\"— µ\"}".into() },
            SseEvent { event: "message".into(), data: "x\ny".into() },
        ];
        let bytes = text.as_bytes();
        for cut in 0..bytes.len() {
            let pieces = vec![Ok(bytes[..cut].to_vec()), Ok(bytes[cut..].to_vec())].into_iter();
            let got: Vec<SseEvent> = events(pieces).map(|r| r.unwrap()).collect();
            assert_eq!(got, want, "cut at {cut}");
        }
    }

    #[test]
    fn error_text_reads_vendor_bodies() {
        assert_eq!(error_text(r#"{"error":{"message":"Rate limit","type":"x"}}"#), "Rate limit");
        assert_eq!(
            error_text(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#),
            "Overloaded"
        );
        assert_eq!(error_text("  "), "(empty body)");
        assert_eq!(error_text("Bad Gateway"), "Bad Gateway");
    }
}
