//! Markdown to styled lines for the chat panel (pulldown-cmark's events): headings, emphasis,
//! inline code, lists, quotes, and fenced code blocks highlighted by `rung_core::highlight`. A reply
//! that is still streaming renders too: an unclosed fence is a code block up to the end.

use pulldown_cmark::{CodeBlockKind, Event, HeadingLevel, Parser, Tag, TagEnd};
use ratatui::style::{Color, Modifier, Style};
use ratatui::text::{Line, Span};

/// Code blocks are indented by this, so they read as blocks without colour too.
pub const CODE_INDENT: &str = "  ";

struct Builder {
    color: bool,
    lines: Vec<Line<'static>>,
    current: Vec<Span<'static>>,
    styles: Vec<Style>,
    /// The prefix of each line: list bullets' indentation, quote bars.
    prefix: Vec<String>,
    /// List numbering (None for bullets).
    lists: Vec<Option<u64>>,
    code: Option<(String, String)>,
}

impl Builder {
    fn style(&self) -> Style {
        self.styles.iter().fold(Style::new(), |a, s| a.patch(*s))
    }

    fn paint(&self, s: Style) -> Style {
        if self.color { s } else { Style::new().add_modifier(s.add_modifier) }
    }

    fn push_text(&mut self, text: &str) {
        let style = self.paint(self.style());
        for (i, part) in text.split('\n').enumerate() {
            if i > 0 {
                self.flush();
            }
            if !part.is_empty() {
                if self.current.is_empty() && !self.prefix.is_empty() {
                    self.current.push(Span::raw(self.prefix.concat()));
                }
                self.current.push(Span::styled(part.to_string(), style));
            }
        }
    }

    fn flush(&mut self) {
        let spans = std::mem::take(&mut self.current);
        self.lines.push(Line::from(spans));
    }

    fn blank(&mut self) {
        if !self.current.is_empty() {
            self.flush();
        }
        if self.lines.last().is_some_and(|l| !l.spans.is_empty()) {
            self.lines.push(Line::default());
        }
    }

    fn code_block(&mut self, lang: &str, text: &str) {
        let body: Vec<&str> = text.strip_suffix('\n').unwrap_or(text).split('\n').collect();
        let label = if lang.is_empty() { "code".to_string() } else { lang.to_string() };
        let dim = self.paint(Style::new().fg(Color::DarkGray));
        self.lines.push(Line::from(Span::styled(format!("{CODE_INDENT}┌ {label}"), dim)));
        let runs = if self.color { rung_core::highlight::colour_runs(lang, body.iter().copied()) } else { None };
        for (i, l) in body.iter().enumerate() {
            let mut spans = vec![Span::styled(format!("{CODE_INDENT}│ "), dim)];
            match runs.as_ref().and_then(|r| r.get(i)) {
                Some(line) => {
                    for run in line {
                        let (r, g, b) = run.rgb;
                        let mut st = Style::new().fg(Color::Rgb(r, g, b));
                        if run.bold {
                            st = st.add_modifier(Modifier::BOLD);
                        }
                        spans.push(Span::styled(run.text.clone(), st));
                    }
                }
                None => spans.push(Span::raw(l.to_string())),
            }
            self.lines.push(Line::from(spans));
        }
        self.lines.push(Line::from(Span::styled(format!("{CODE_INDENT}└"), dim)));
    }
}

/// The lines of `text` rendered; `color: false` keeps bold and italics but no colours.
pub fn render(text: &str, color: bool) -> Vec<Line<'static>> {
    let mut b = Builder {
        color,
        lines: Vec::new(),
        current: Vec::new(),
        styles: Vec::new(),
        prefix: Vec::new(),
        lists: Vec::new(),
        code: None,
    };
    for ev in Parser::new(text) {
        if let Some((_, body)) = b.code.as_mut() {
            match ev {
                Event::Text(t) => body.push_str(&t),
                Event::End(TagEnd::CodeBlock) => {
                    let (lang, body) = b.code.take().expect("inside a block");
                    b.code_block(&lang, &body);
                }
                _ => {}
            }
            continue;
        }
        match ev {
            Event::Start(Tag::Paragraph) => {}
            Event::End(TagEnd::Paragraph) => b.blank(),
            Event::Start(Tag::Heading { level, .. }) => {
                let color = if level == HeadingLevel::H1 { Color::Cyan } else { Color::Blue };
                b.styles.push(Style::new().fg(color).add_modifier(Modifier::BOLD));
            }
            Event::End(TagEnd::Heading(_)) => {
                b.styles.pop();
                b.blank();
            }
            Event::Start(Tag::Emphasis) => b.styles.push(Style::new().add_modifier(Modifier::ITALIC)),
            Event::Start(Tag::Strong) => b.styles.push(Style::new().add_modifier(Modifier::BOLD)),
            Event::Start(Tag::Strikethrough) => b.styles.push(Style::new().add_modifier(Modifier::CROSSED_OUT)),
            Event::End(TagEnd::Emphasis | TagEnd::Strong | TagEnd::Strikethrough) => {
                b.styles.pop();
            }
            Event::Start(Tag::BlockQuote(_)) => b.prefix.push("▎ ".into()),
            Event::End(TagEnd::BlockQuote(_)) => {
                b.prefix.pop();
            }
            Event::Start(Tag::List(start)) => {
                if !b.current.is_empty() {
                    b.flush();
                }
                b.lists.push(start);
            }
            Event::End(TagEnd::List(_)) => {
                b.lists.pop();
                if b.lists.is_empty() {
                    b.blank();
                }
            }
            Event::Start(Tag::Item) => {
                if !b.current.is_empty() {
                    b.flush();
                }
                let depth = b.lists.len().saturating_sub(1);
                let bullet = match b.lists.last_mut() {
                    Some(Some(n)) => {
                        let s = format!("{n}. ");
                        *n += 1;
                        s
                    }
                    _ => "• ".to_string(),
                };
                b.current.push(Span::raw(format!("{}{}{bullet}", b.prefix.concat(), "  ".repeat(depth))));
                b.prefix.push("  ".repeat(depth) + &" ".repeat(bullet.chars().count()));
            }
            Event::End(TagEnd::Item) => {
                b.prefix.pop();
                if !b.current.is_empty() {
                    b.flush();
                }
            }
            Event::Start(Tag::CodeBlock(kind)) => {
                if !b.current.is_empty() {
                    b.flush();
                }
                let lang = match kind {
                    CodeBlockKind::Fenced(l) => l.split_whitespace().next().unwrap_or("").to_string(),
                    CodeBlockKind::Indented => String::new(),
                };
                b.code = Some((lang, String::new()));
            }
            Event::Text(t) => b.push_text(&t),
            Event::Code(t) => {
                let st = b.paint(b.style().fg(Color::Yellow));
                if b.current.is_empty() && !b.prefix.is_empty() {
                    b.current.push(Span::raw(b.prefix.concat()));
                }
                b.current.push(Span::styled(format!("`{t}`"), st));
            }
            // A line break in a reply is kept: `name:` and what follows stay two lines, as the
            // model wrote them (a terminal is no paragraph reflow).
            Event::SoftBreak => b.flush(),
            Event::HardBreak => b.flush(),
            Event::Rule => {
                b.blank();
                b.lines.push(Line::from("────────"));
            }
            _ => {}
        }
    }
    // A fence still open at the end of a streaming reply.
    if let Some((lang, body)) = b.code.take() {
        b.code_block(&lang, &body);
    }
    if !b.current.is_empty() {
        b.flush();
    }
    while b.lines.last().is_some_and(|l| l.spans.is_empty()) {
        b.lines.pop();
    }
    b.lines
}

#[cfg(test)]
mod tests {
    use super::*;

    fn plain(lines: &[Line]) -> Vec<String> {
        lines.iter().map(|l| l.spans.iter().map(|s| s.content.as_ref()).collect()).collect()
    }

    #[test]
    fn paragraphs_lists_and_code() {
        let md = "# Title\n\nSome *text* and `code`.\n\n- one\n- two\n\n```cuda\nint x;\n```\n";
        let lines = render(md, true);
        assert_eq!(
            plain(&lines),
            ["Title", "", "Some text and `code`.", "", "• one", "• two", "", "  ┌ cuda", "  │ int x;", "  └"]
        );
        assert!(lines[2].spans[1].style.add_modifier.contains(Modifier::ITALIC));
        // The code line is coloured by the grammar: more than the prefix and one run.
        assert!(lines[8].spans.len() > 2, "{:?}", lines[8]);
    }

    #[test]
    fn a_line_break_in_a_paragraph_is_kept() {
        let lines = render("Registers:\n32 per thread\nSpills: none", false);
        assert_eq!(plain(&lines), ["Registers:", "32 per thread", "Spills: none"]);
    }

    #[test]
    fn an_unclosed_fence_is_code_to_the_end() {
        let lines = render("Here:\n\n```py\nx = 1\ny = 2", false);
        assert_eq!(plain(&lines), ["Here:", "", "  ┌ py", "  │ x = 1", "  │ y = 2", "  └"]);
    }
}
