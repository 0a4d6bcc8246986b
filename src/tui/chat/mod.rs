//! The chat side panel: the conversation (Markdown, highlighted code, one line per tool call,
//! notices), the reply as it streams, and an input box with history and slash commands. Its
//! own state and keys; the App owns one, forwards keys and agent events to it, and draws it
//! into the area its layout gives. Drawing takes `&self`.

pub mod markdown;

use crossterm::event::{KeyCode, KeyEvent, KeyEventKind, KeyModifiers};
use ratatui::buffer::Buffer;
use ratatui::layout::{Constraint, Layout, Rect};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};
use ratatui::widgets::{Block, Borders, Paragraph, Widget};
use ratatui_textarea::TextArea;
use rung_agent::{AgentError, AgentEvent, Conversation, Message, Role, Usage};

/// What a key did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChatOutcome {
    /// Not the panel's: the App may use it (Tab, Esc...).
    Ignored,
    Consumed,
    /// Enter on a message: send it (the panel has already shown it).
    Send(String),
    /// Enter on a slash command.
    Command(SlashCommand),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SlashCommand {
    /// `/model` (show) or `/model NAME` (switch).
    Model(Option<String>),
    /// `/context`: what the prompt holds.
    Context,
    /// `/clear`: start afresh (the file keeps the old messages).
    Clear,
    /// `/stop`: cancel the reply.
    Stop,
}

impl SlashCommand {
    pub const HELP: &'static str = "/model [NAME], /context, /clear, /stop";

    /// `None`: not a command. `Some(Err)`: a command rung does not know.
    pub fn parse(input: &str) -> Option<Result<SlashCommand, String>> {
        let rest = input.trim().strip_prefix('/')?;
        let (word, arg) = rest.split_once(char::is_whitespace).map_or((rest, ""), |(w, a)| (w, a.trim()));
        Some(match word {
            "model" => Ok(SlashCommand::Model(Some(arg.to_string()).filter(|a| !a.is_empty()))),
            "context" => Ok(SlashCommand::Context),
            "clear" => Ok(SlashCommand::Clear),
            "stop" => Ok(SlashCommand::Stop),
            other => Err(format!("unknown command /{other}: the commands are {}", SlashCommand::HELP)),
        })
    }
}

/// One thing shown in the transcript.
#[derive(Debug, Clone, PartialEq)]
pub enum Entry {
    User(String),
    Assistant {
        text: String,
        partial: bool,
    },
    /// `result`: None while running, then (is_error, first line of the answer).
    Tool {
        name: String,
        arguments: String,
        result: Option<(bool, String)>,
    },
    Notice {
        text: String,
        is_error: bool,
    },
    /// The passages of `context/` the prompt quoted for the message above: where each is
    /// (`path:line § section`).
    Context(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Activity {
    Idle,
    /// A reply is streaming.
    Streaming,
    /// Waiting to retry (the reason).
    Retrying(String),
}

pub struct ChatPanel {
    pub entries: Vec<Entry>,
    /// The reply streaming now.
    pub streaming: String,
    pub activity: Activity,
    /// `provider model`, in the title.
    pub model: String,
    pub usage: Usage,
    pub cost_usd: Option<f64>,
    pub color: bool,
    pub focused: bool,
    input: TextArea<'static>,
    history: Vec<String>,
    /// Where Up/Down is in `history` (None: the text being written).
    history_pos: Option<usize>,
    /// Rows scrolled up from the bottom (0: follow the newest).
    scroll: u16,
    /// Tool calls of the streaming reply, by index: (name, arguments so far).
    pending_tools: std::collections::BTreeMap<usize, (String, String)>,
}

impl ChatPanel {
    pub fn new(model: impl Into<String>, color: bool) -> ChatPanel {
        let mut input = TextArea::default();
        input.set_placeholder_text("a message, or /model /context /clear /stop");
        input.set_cursor_line_style(Style::new());
        ChatPanel {
            entries: Vec::new(),
            streaming: String::new(),
            activity: Activity::Idle,
            model: model.into(),
            usage: Usage::default(),
            cost_usd: None,
            color,
            focused: true,
            input,
            history: Vec::new(),
            history_pos: None,
            scroll: 0,
            pending_tools: Default::default(),
        }
    }

    /// Shows a conversation loaded from `.rung/chat/`.
    pub fn show(&mut self, conv: &Conversation) {
        self.entries.clear();
        for m in &conv.messages {
            self.push_message(m);
        }
        self.usage = conv.usage;
        self.cost_usd = conv.cost_usd;
        self.model = format!("{} {}", conv.provider, conv.model);
        self.history = conv.messages.iter().filter(|m| m.role == Role::User).map(|m| m.text.clone()).collect();
    }

    fn push_message(&mut self, m: &Message) {
        match m.role {
            Role::User => self.entries.push(Entry::User(m.text.clone())),
            Role::Assistant => {
                if !m.text.is_empty() {
                    self.entries.push(Entry::Assistant { text: m.text.clone(), partial: m.partial });
                }
                for c in &m.tool_calls {
                    self.entries.push(Entry::Tool {
                        name: c.name.clone(),
                        arguments: c.arguments.clone(),
                        result: None,
                    });
                }
            }
            Role::Tool => self.set_tool_result(m.tool_name.as_deref().unwrap_or(""), m.is_error, &m.text),
            Role::Notice => self.entries.push(Entry::Notice { text: m.text.clone(), is_error: m.is_error }),
        }
    }

    fn set_tool_result(&mut self, name: &str, is_error: bool, text: &str) {
        let first = text.lines().find(|l| !l.trim().is_empty()).unwrap_or("").trim().to_string();
        let open =
            self.entries.iter_mut().find(|e| matches!(e, Entry::Tool { name: n, result: None, .. } if n == name));
        if let Some(Entry::Tool { result, .. }) = open {
            *result = Some((is_error, first));
        }
    }

    /// The user's message, shown at once (before the provider answers).
    pub fn push_user(&mut self, text: &str) {
        self.entries.push(Entry::User(text.to_string()));
        self.scroll = 0;
    }

    pub fn push_notice(&mut self, text: impl Into<String>, is_error: bool) {
        self.entries.push(Entry::Notice { text: text.into(), is_error });
    }

    /// Shows which passages of `context/` went into the prompt (nothing when none did).
    pub fn push_context(&mut self, places: Vec<String>) {
        if !places.is_empty() {
            self.entries.push(Entry::Context(places));
        }
    }

    /// `/clear`: the transcript empties (the tokens and cost so far stay in the title).
    pub fn clear(&mut self) {
        self.entries.clear();
        self.streaming.clear();
        self.pending_tools.clear();
        self.scroll = 0;
    }

    /// An event of the running turn.
    pub fn apply(&mut self, ev: &AgentEvent) {
        match ev {
            AgentEvent::Text(t) => {
                self.activity = Activity::Streaming;
                self.streaming.push_str(t);
            }
            AgentEvent::ToolCall { index, name, .. } => {
                self.activity = Activity::Streaming;
                self.pending_tools.entry(*index).or_default().0.clone_from(name);
            }
            AgentEvent::ToolArguments { index, fragment } => {
                self.pending_tools.entry(*index).or_default().1.push_str(fragment);
            }
            AgentEvent::Usage(_) => {}
            AgentEvent::Retrying { attempt, wait, reason } => {
                self.activity = Activity::Retrying(format!("retry {attempt} in {:.1}s: {reason}", wait.as_secs_f64()));
            }
            AgentEvent::ReplyDone { usage } => {
                self.settle(false);
                self.usage.add(*usage);
            }
            AgentEvent::ToolResult { name, is_error, text, .. } => self.set_tool_result(name, *is_error, text),
        }
    }

    /// Moves the streamed reply and its tool calls into the transcript.
    fn settle(&mut self, partial: bool) {
        let text = std::mem::take(&mut self.streaming);
        if !text.is_empty() {
            self.entries.push(Entry::Assistant { text, partial });
        }
        let tools = std::mem::take(&mut self.pending_tools);
        if !partial {
            for (name, arguments) in tools.into_values() {
                self.entries.push(Entry::Tool { name, arguments, result: None });
            }
        }
        self.activity = Activity::Streaming;
    }

    /// The turn is over: an error becomes a notice, the partial reply stays.
    pub fn finish(&mut self, result: &Result<(), AgentError>, conv: Option<&Conversation>) {
        let cut = result.is_err();
        self.settle(cut);
        match result {
            Ok(()) => {}
            Err(AgentError::Cancelled) => self.push_notice("reply cancelled", false),
            Err(e) => self.push_notice(format!("error: {e}"), true),
        }
        if let Some(c) = conv {
            self.usage = c.usage;
            self.cost_usd = c.cost_usd;
        }
        self.activity = Activity::Idle;
    }

    pub fn busy(&self) -> bool {
        self.activity != Activity::Idle
    }

    /// The input box's text.
    pub fn input_text(&self) -> String {
        self.input.lines().join("\n")
    }

    fn set_input(&mut self, text: &str) {
        self.input = TextArea::new(text.split('\n').map(String::from).collect());
        self.input.set_cursor_line_style(Style::new());
        self.input.move_cursor(ratatui_textarea::CursorMove::Bottom);
        self.input.move_cursor(ratatui_textarea::CursorMove::End);
    }

    pub fn handle_key(&mut self, key: KeyEvent) -> ChatOutcome {
        if key.kind == KeyEventKind::Release {
            return ChatOutcome::Ignored;
        }
        let alt = key.modifiers.contains(KeyModifiers::ALT) || key.modifiers.contains(KeyModifiers::SHIFT);
        match key.code {
            KeyCode::Enter if !alt => {
                let text = self.input_text();
                if text.trim().is_empty() {
                    return ChatOutcome::Consumed;
                }
                self.history.push(text.clone());
                self.history_pos = None;
                self.set_input("");
                match SlashCommand::parse(&text) {
                    Some(Ok(cmd)) => ChatOutcome::Command(cmd),
                    Some(Err(msg)) => {
                        self.push_notice(msg, true);
                        ChatOutcome::Consumed
                    }
                    None => {
                        if self.busy() {
                            self.push_notice("a reply is still streaming: /stop cancels it", true);
                            self.set_input(&text);
                            self.history.pop();
                            return ChatOutcome::Consumed;
                        }
                        self.push_user(&text);
                        ChatOutcome::Send(text)
                    }
                }
            }
            KeyCode::Enter => {
                self.input.insert_newline();
                ChatOutcome::Consumed
            }
            KeyCode::Up if self.input.cursor().0 == 0 && !self.history.is_empty() => {
                let pos = self.history_pos.map_or(self.history.len() - 1, |p| p.saturating_sub(1));
                self.history_pos = Some(pos);
                let t = self.history[pos].clone();
                self.set_input(&t);
                ChatOutcome::Consumed
            }
            KeyCode::Down if self.history_pos.is_some() && self.input.cursor().0 + 1 >= self.input.lines().len() => {
                let next = self.history_pos.map(|p| p + 1).filter(|p| *p < self.history.len());
                self.history_pos = next;
                let t = next.map(|p| self.history[p].clone()).unwrap_or_default();
                self.set_input(&t);
                ChatOutcome::Consumed
            }
            KeyCode::PageUp => {
                self.scroll = self.scroll.saturating_add(10);
                ChatOutcome::Consumed
            }
            KeyCode::PageDown => {
                self.scroll = self.scroll.saturating_sub(10);
                ChatOutcome::Consumed
            }
            KeyCode::Tab | KeyCode::BackTab | KeyCode::Esc => ChatOutcome::Ignored,
            _ => {
                // Every other key edits the input (the box keeps its own undo and cursor).
                self.input.input(key);
                ChatOutcome::Consumed
            }
        }
    }

    fn paint(&self, s: Style) -> Style {
        if self.color { s } else { Style::new().add_modifier(s.add_modifier) }
    }

    /// The transcript as lines for a `width`-column area, before wrapping (tool lines are cut
    /// to the width instead: one line per call).
    pub fn transcript(&self, width: u16) -> Vec<Line<'static>> {
        let mut out: Vec<Line<'static>> = Vec::new();
        let you = self.paint(Style::new().fg(Color::Green).add_modifier(Modifier::BOLD));
        let agent = self.paint(Style::new().fg(Color::Cyan).add_modifier(Modifier::BOLD));
        let dim = self.paint(Style::new().fg(Color::DarkGray));
        let red = self.paint(Style::new().fg(Color::Red));
        let gap = |out: &mut Vec<Line<'static>>| {
            if !out.is_empty() {
                out.push(Line::default());
            }
        };
        for e in &self.entries {
            match e {
                Entry::User(t) => {
                    gap(&mut out);
                    out.push(Line::from(Span::styled("you", you)));
                    out.extend(t.lines().map(|l| Line::from(l.to_string())));
                }
                Entry::Assistant { text, partial } => {
                    gap(&mut out);
                    out.push(Line::from(vec![
                        Span::styled("agent", agent),
                        Span::styled(if *partial { " (cut short)" } else { "" }, dim),
                    ]));
                    out.extend(markdown::render(text, self.color));
                }
                Entry::Tool { name, arguments, result } => {
                    out.push(tool_line(name, arguments, result.as_ref(), width, dim, red))
                }
                Entry::Context(places) => {
                    out.push(Line::from(Span::styled(
                        format!(
                            "  context: {} passage{} in the prompt",
                            places.len(),
                            if places.len() == 1 { "" } else { "s" }
                        ),
                        dim,
                    )));
                    for p in places {
                        out.push(Line::from(Span::styled(
                            format!("    {}", shorten(p, (width as usize).saturating_sub(4).max(8))),
                            dim,
                        )));
                    }
                }
                Entry::Notice { text, is_error } => {
                    gap(&mut out);
                    // Lines after the first are indented under it.
                    let style = if *is_error { red } else { dim };
                    for (i, l) in text.lines().enumerate() {
                        let mark = if i == 0 { "! " } else { "  " };
                        out.push(Line::from(Span::styled(format!("{mark}{l}"), style)));
                    }
                }
            }
        }
        if !self.streaming.is_empty() || !self.pending_tools.is_empty() {
            gap(&mut out);
            out.push(Line::from(vec![Span::styled("agent", agent), Span::styled(" …", dim)]));
            out.extend(markdown::render(&self.streaming, self.color));
            for (name, args) in self.pending_tools.values() {
                out.push(tool_line(name, args, None, width, dim, red));
            }
        }
        out
    }

    /// ` chat · openai gpt-4.1 · 120 in / 40 out · $0.0004 `
    pub fn title(&self) -> String {
        let cost = self.cost_usd.map(|c| format!(" · ${c:.4}")).unwrap_or_default();
        format!(" chat · {} · {} in / {} out{cost} ", self.model, self.usage.input_tokens, self.usage.output_tokens)
    }

    /// Draws inside `block`, the host's border with [`ChatPanel::title`] (the TUI's, in its theme).
    pub fn draw(&self, block: Block, area: Rect, buf: &mut Buffer) {
        let inner = block.inner(area);
        block.render(area, buf);
        let input_rows = (self.input.lines().len() as u16).clamp(1, 5) + 1;
        let [log, status, input] =
            Layout::vertical([Constraint::Min(1), Constraint::Length(1), Constraint::Length(input_rows)]).areas(inner);
        let rows = wrap(&self.transcript(log.width), log.width);
        let height = log.height as usize;
        let end = rows.len().saturating_sub(self.scroll as usize).max(height.min(rows.len()));
        let start = end.saturating_sub(height);
        Paragraph::new(rows[start..end].to_vec()).render(log, buf);
        let dim = self.paint(Style::new().fg(Color::DarkGray));
        let status_text = match &self.activity {
            Activity::Idle if self.scroll > 0 => format!("↑ {} rows up · PgDn to follow", self.scroll),
            Activity::Idle => String::new(),
            Activity::Streaming => "▍ streaming · /stop cancels".to_string(),
            Activity::Retrying(r) => format!("⟳ {r}"),
        };
        Paragraph::new(Line::from(Span::styled(status_text, dim))).render(status, buf);
        let mut boxed = self.input.clone();
        boxed.set_block(Block::new().borders(Borders::TOP).border_style(dim));
        if !self.focused {
            // Keys go elsewhere: no cursor invites typing here.
            boxed.set_cursor_style(Style::new());
        }
        (&boxed).render(input, buf);
    }
}

/// `  ⚙ name(arguments) ✓ first line of the answer`, cut to `width` columns.
fn tool_line(
    name: &str,
    arguments: &str,
    result: Option<&(bool, String)>,
    width: u16,
    dim: Style,
    red: Style,
) -> Line<'static> {
    let args: String = arguments.split_whitespace().collect::<Vec<_>>().join(" ");
    let (mark, style, tail) = match result {
        None => ("⋯", dim, String::new()),
        Some((false, first)) => ("✓", dim, format!(" {first}")),
        Some((true, first)) => ("✗", red, format!(" {first}")),
    };
    let width = width.max(8) as usize;
    let head = shorten(&format!("  ⚙ {name}({}) {mark}", shorten(&args, width / 2)), width);
    let room = width.saturating_sub(head.chars().count());
    let tail = if room > 1 { shorten(&tail, room) } else { String::new() };
    Line::from(vec![Span::styled(head, style), Span::styled(tail, dim)])
}

fn shorten(s: &str, n: usize) -> String {
    if s.chars().count() <= n { s.to_string() } else { s.chars().take(n - 1).collect::<String>() + "…" }
}

/// Lines broken to `width` columns, preferring the last space, keeping each span's style.
pub fn wrap(lines: &[Line<'static>], width: u16) -> Vec<Line<'static>> {
    let cw = |c: char| Span::raw(c.to_string()).width();
    let width = width.max(1) as usize;
    let mut out = Vec::new();
    for line in lines {
        if line.width() <= width {
            out.push(line.clone());
            continue;
        }
        // A code line's gutter (`  │ `) starts every row it wraps into, so the block stays one.
        let gutter = line
            .spans
            .first()
            .filter(|s| s.content.ends_with("│ ") && s.content.trim_end().trim_start() == "│")
            .cloned()
            .filter(|s| s.width() < width / 2);
        // Characters with their styles, then rows cut from them.
        let chars: Vec<(char, Style)> =
            line.spans.iter().flat_map(|s| s.content.chars().map(move |c| (c, s.style))).collect();
        let mut start = 0;
        while start < chars.len() {
            let lead = if start > 0 { gutter.clone() } else { None };
            let mut w = lead.as_ref().map_or(0, |g| g.width());
            let mut end = start;
            while end < chars.len() && w + cw(chars[end].0) <= width {
                w += cw(chars[end].0);
                end += 1;
            }
            if end == start {
                end = start + 1;
            }
            if end < chars.len()
                && let Some(space) = chars[start..end].iter().rposition(|(c, _)| *c == ' ')
                && space > 0
            {
                end = start + space + 1;
            }
            let mut spans: Vec<Span<'static>> = lead.into_iter().collect();
            for (c, st) in &chars[start..end] {
                match spans.last_mut() {
                    Some(s) if s.style == *st => s.content.to_mut().push(*c),
                    _ => spans.push(Span::styled(c.to_string(), *st)),
                }
            }
            out.push(Line::from(spans));
            start = end;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_wrapped_code_line_keeps_its_gutter_and_a_wrapped_sentence_does_not_get_one() {
        let lines =
            markdown::render("Some words that wrap here.\n\n```\nfloat x = a[i] * b[i] + c[i] * d[i];\n```", false);
        let rows: Vec<String> =
            wrap(&lines, 16).iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect();
        let code: Vec<&String> =
            rows.iter().skip_while(|r| !r.contains('┌')).skip(1).take_while(|r| !r.contains('└')).collect();
        assert!(code.len() > 2, "the code line wrapped: {rows:?}");
        assert!(code.iter().all(|r| r.starts_with("  │ ")), "every row in the gutter: {rows:?}");
        let joined: String = code.iter().map(|r| r.trim_start_matches("  │ ")).collect();
        assert_eq!(joined, "float x = a[i] * b[i] + c[i] * d[i];", "nothing lost: {rows:?}");
        assert!(!rows[1].contains('│'), "prose has no gutter: {rows:?}");
    }

    #[test]
    fn slash_commands_parse() {
        assert_eq!(SlashCommand::parse("/model gpt-4.1"), Some(Ok(SlashCommand::Model(Some("gpt-4.1".into())))));
        assert_eq!(SlashCommand::parse(" /model "), Some(Ok(SlashCommand::Model(None))));
        assert_eq!(SlashCommand::parse("/stop"), Some(Ok(SlashCommand::Stop)));
        assert!(SlashCommand::parse("/nope").unwrap().unwrap_err().contains("/model [NAME]"));
        assert_eq!(SlashCommand::parse("why is v002 slow?"), None);
    }

    #[test]
    fn wrap_breaks_at_spaces_within_width() {
        let rows = wrap(&[Line::from("alpha beta gamma")], 11);
        let text: Vec<String> = rows.iter().map(|l| l.to_string()).collect();
        assert_eq!(text, ["alpha beta ", "gamma"]);
    }
}
