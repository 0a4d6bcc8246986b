//! A loopback HTTP/1.1 server on 127.0.0.1 that replays recorded streams
//! (`tests/fixtures/agent/`) in pieces, for the agent's providers and the chat panel's real turns.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/agent").join(name)).unwrap()
}

/// How a scripted response ends.
#[derive(Clone, Copy, PartialEq)]
pub enum End {
    /// The chunked body's terminator.
    Complete,
    /// The socket closes in the middle of the body.
    Cut,
    /// Nothing more is written for this long, then the body completes.
    Stall(Duration),
}

#[derive(Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub pieces: Vec<Vec<u8>>,
    pub end: End,
}

impl Reply {
    pub fn stream(body: &[u8], cuts: &[usize]) -> Reply {
        Reply { status: 200, headers: vec![], pieces: split(body, cuts), end: End::Complete }
    }
    pub fn status(status: u16, body: &str) -> Reply {
        Reply { status, headers: vec![], pieces: vec![body.as_bytes().to_vec()], end: End::Complete }
    }
    pub fn header(mut self, k: &str, v: &str) -> Reply {
        self.headers.push((k.into(), v.into()));
        self
    }
    pub fn end(mut self, end: End) -> Reply {
        self.end = end;
        self
    }
}

/// `body` cut at the given byte offsets (and every 97 bytes besides, so every stream arrives in
/// many reads).
pub fn split(body: &[u8], cuts: &[usize]) -> Vec<Vec<u8>> {
    let mut at: Vec<usize> = cuts.to_vec();
    at.extend((97..body.len()).step_by(97));
    at.push(body.len());
    at.sort();
    at.dedup();
    let mut out = Vec::new();
    let mut from = 0;
    for to in at {
        if to > from && to <= body.len() {
            out.push(body[from..to].to_vec());
            from = to;
        }
    }
    out
}

/// The byte offset just inside the first occurrence of `needle` (after `into` bytes of it).
pub fn inside(body: &[u8], needle: &str, into: usize) -> usize {
    let n = needle.as_bytes();
    body.windows(n.len()).position(|w| w == n).unwrap_or_else(|| panic!("{needle} not in fixture")) + into
}

#[derive(Debug, Clone)]
pub struct Recorded {
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: serde_json::Value,
}

impl Recorded {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }
}

/// A loopback HTTP/1.1 server answering each connection with the next scripted reply.
pub struct Server {
    pub url: String,
    pub requests: Arc<Mutex<Vec<Recorded>>>,
}

impl Server {
    pub fn start(replies: Vec<Reply>) -> Server {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let requests = Arc::new(Mutex::new(Vec::new()));
        let seen = requests.clone();
        std::thread::spawn(move || {
            for reply in replies {
                let Ok((stream, _)) = listener.accept() else { return };
                let seen = seen.clone();
                // One connection at a time: a reply's order is the order of the requests.
                serve(stream, &reply, &seen);
            }
        });
        Server { url, requests }
    }

    pub fn requests(&self) -> Vec<Recorded> {
        self.requests.lock().unwrap().clone()
    }
}

fn serve(mut stream: TcpStream, reply: &Reply, seen: &Mutex<Vec<Recorded>>) {
    stream.set_nodelay(true).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    reader.read_line(&mut first).unwrap();
    let path = first.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        reader.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        let (k, v) = line.split_once(':').unwrap();
        headers.push((k.trim().to_ascii_lowercase(), v.trim().to_string()));
    }
    let len: usize = headers.iter().find(|(k, _)| k == "content-length").map(|(_, v)| v.parse().unwrap()).unwrap_or(0);
    let mut body = vec![0; len];
    reader.read_exact(&mut body).unwrap();
    let body = serde_json::from_slice(&body).unwrap_or(serde_json::Value::Null);
    seen.lock().unwrap().push(Recorded { path, headers, body });

    let mut head = format!(
        "HTTP/1.1 {} X\r\ncontent-type: {}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n",
        reply.status,
        if reply.status == 200 { "text/event-stream" } else { "application/json" }
    );
    for (k, v) in &reply.headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    if stream.write_all(head.as_bytes()).is_err() {
        return;
    }
    for p in &reply.pieces {
        let mut chunk = format!("{:x}\r\n", p.len()).into_bytes();
        chunk.extend_from_slice(p);
        chunk.extend_from_slice(b"\r\n");
        if stream.write_all(&chunk).and_then(|_| stream.flush()).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_millis(3));
    }
    match reply.end {
        End::Complete => {
            let _ = stream.write_all(b"0\r\n\r\n");
        }
        End::Cut => {}
        End::Stall(d) => {
            std::thread::sleep(d);
            let _ = stream.write_all(b"0\r\n\r\n");
        }
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}

/// An OpenAI chat-completions stream that says `text` in pieces of 40 characters, then its usage
/// (1,000 tokens in, 200 out) and `[DONE]`: for tests that script what a model answers.
pub fn openai_text(text: &str) -> Vec<u8> {
    let mut out = String::new();
    let chars: Vec<char> = text.chars().collect();
    for (i, piece) in chars.chunks(40).enumerate() {
        let piece: String = piece.iter().collect();
        let delta = if i == 0 {
            serde_json::json!({"role": "assistant", "content": piece})
        } else {
            serde_json::json!({"content": piece})
        };
        let chunk = serde_json::json!({"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
        out.push_str(&format!("data: {chunk}\n\n"));
    }
    let usage = serde_json::json!({"id": "c", "choices": [], "usage": {"prompt_tokens": 1000, "completion_tokens": 200, "total_tokens": 1200}});
    out.push_str(&format!("data: {usage}\n\ndata: [DONE]\n\n"));
    out.into_bytes()
}
