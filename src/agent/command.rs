//! An external command as a provider (a CLI agent such as `claude -p` or `codex exec -`): the
//! conversation as plain text on standard input, the reply streamed from standard output.
//! It has no tool calls of rung's: such agents bring their own (and can call `rung mcp`).

use std::io::{Read, Write};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use super::{AgentError, AgentEvent, Cancel, Finish, POLL, Provider, Request, Role, Utf8Pieces};

pub struct CommandProvider {
    argv: Vec<String>,
    model: String,
    idle_timeout: Duration,
}

impl CommandProvider {
    pub fn new(argv: Vec<String>, model: String, idle_timeout: Duration) -> CommandProvider {
        CommandProvider { argv, model, idle_timeout }
    }

    /// The prompt: the system text, then each message under a `## role` heading.
    pub fn prompt(req: &Request<'_>) -> String {
        let mut p = format!("{}\n", req.system);
        for m in req.messages {
            let who = match m.role {
                Role::User => "user",
                Role::Assistant => "assistant",
                Role::Tool => "tool result",
                Role::Notice => continue,
            };
            p.push_str(&format!("\n## {who}\n\n{}\n", m.text));
        }
        p
    }
}

enum Out {
    Bytes(Vec<u8>),
    End,
}

impl Provider for CommandProvider {
    fn describe(&self) -> String {
        format!("command `{}`", self.argv.join(" "))
    }

    fn model(&self) -> &str {
        if self.model.is_empty() { &self.argv[0] } else { &self.model }
    }

    fn supports_tools(&self) -> bool {
        false
    }

    fn stream(
        &self,
        req: &Request<'_>,
        cancel: &Cancel,
        sink: &mut dyn FnMut(AgentEvent),
    ) -> Result<Finish, AgentError> {
        let shown = self.argv.join(" ");
        let fail = |detail: String| AgentError::Command { command: shown.clone(), detail };
        let mut child = Command::new(&self.argv[0])
            .args(&self.argv[1..])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| fail(format!("cannot start it: {e}")))?;
        let prompt = CommandProvider::prompt(req);
        let mut stdin = child.stdin.take().expect("piped");
        // Written from a thread: a command that prints before reading all its input must not
        // deadlock against us.
        std::thread::spawn(move || {
            let _ = stdin.write_all(prompt.as_bytes());
        });
        let (tx, rx) = mpsc::channel();
        let mut stdout = child.stdout.take().expect("piped");
        std::thread::spawn(move || {
            let mut buf = [0u8; 8192];
            loop {
                match stdout.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => {
                        if tx.send(Out::Bytes(buf[..n].to_vec())).is_err() {
                            return;
                        }
                    }
                }
            }
            let _ = tx.send(Out::End);
        });
        let mut stderr = child.stderr.take().expect("piped");
        // Read to the end, keeping the last 64 KiB: a reader that stopped early left the command
        // blocked on a full pipe, and its error is in its last lines, not its first.
        let err_reader = std::thread::spawn(move || {
            const KEEP: usize = 64 * 1024;
            let (mut kept, mut buf) = (Vec::new(), [0u8; 8192]);
            while let Ok(n) = stderr.read(&mut buf) {
                if n == 0 {
                    break;
                }
                kept.extend_from_slice(&buf[..n]);
                if kept.len() > 2 * KEEP {
                    kept.drain(..kept.len() - KEEP);
                }
            }
            let from = kept.len().saturating_sub(KEEP);
            String::from_utf8_lossy(&kept[from..]).into_owned()
        });
        let mut text = Utf8Pieces::default();
        let mut last = Instant::now();
        loop {
            if cancel.is_cancelled() {
                let _ = child.kill();
                let _ = child.wait();
                return Err(AgentError::Cancelled);
            }
            match rx.recv_timeout(POLL) {
                Ok(Out::Bytes(b)) => {
                    last = Instant::now();
                    let t = text.push(&b);
                    if !t.is_empty() {
                        sink(AgentEvent::Text(t));
                    }
                }
                Ok(Out::End) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if last.elapsed() > self.idle_timeout {
                        let _ = child.kill();
                        let _ = child.wait();
                        return Err(AgentError::Timeout { what: format!("`{shown}`"), after: self.idle_timeout });
                    }
                }
            }
        }
        let t = text.finish();
        if !t.is_empty() {
            sink(AgentEvent::Text(t));
        }
        let status = child.wait().map_err(|e| fail(e.to_string()))?;
        let stderr = err_reader.join().unwrap_or_default();
        if !status.success() {
            let tail: Vec<&str> = stderr.lines().rev().take(5).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            return Err(fail(format!(
                "{status}{}",
                if tail.is_empty() { String::new() } else { format!(": {}", tail.join(" / ")) }
            )));
        }
        Ok(Finish { stop_reason: Some("exit".into()) })
    }
}
