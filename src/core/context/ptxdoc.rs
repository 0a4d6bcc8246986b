//! `rung context add-docs NAME FILE`: a manual the user saved (the PTX ISA's HTML page, or its
//! PDF) split into one Markdown file per section under `context/NAME/`, each starting with its
//! numbered heading (`# 9.7.9.25.5.1. Data Movement and Conversion Instructions:
//! cp.async.bulk.tensor`), so that the index ranks the section an instruction's name heads first
//! and a passage says which section it is from.
//!
//! HTML is read as the documentation generator writes it (Sphinx: `<hN>` headings with a
//! `section-number` span, `<pre>` code, tables); navigation, headers, footers, scripts and styles
//! are dropped. A PDF is turned into text by poppler's `pdftotext -layout` (when it is installed)
//! and split at its numbered heading lines, the table of contents' dotted leaders left out.

use std::path::{Path, PathBuf};

use super::sources::{SourceError, io};

/// One section of a manual.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Section {
    /// The section's number as printed (`9.7.9.25.5.1`), when it has one.
    pub number: Option<String>,
    /// Its heading without the number.
    pub title: String,
    pub text: String,
}

impl Section {
    /// The heading as the section's file starts with it.
    pub fn heading(&self) -> String {
        match &self.number {
            Some(n) => format!("{n}. {}", self.title),
            None => self.title.clone(),
        }
    }
}

/// The marker a folder of split sections carries: which manual it came from. A folder without it
/// is the user's and is never replaced.
pub const MARKER: &str = ".rung-docs";

fn entity(name: &str) -> Option<char> {
    if let Some(num) = name.strip_prefix('#') {
        let code = match num.strip_prefix(['x', 'X']) {
            Some(hex) => u32::from_str_radix(hex, 16).ok()?,
            None => num.parse().ok()?,
        };
        return char::from_u32(code);
    }
    Some(match name {
        "lt" => '<',
        "gt" => '>',
        "amp" => '&',
        "quot" => '"',
        "apos" => '\'',
        "nbsp" => ' ',
        "ndash" => '–',
        "mdash" => '—',
        "hellip" => '…',
        "rarr" => '→',
        "larr" => '←',
        "times" => '×',
        "le" => '≤',
        "ge" => '≥',
        "ne" => '≠',
        "para" => '¶',
        "copy" => '©',
        _ => return None,
    })
}

/// Text with its character references decoded (an unknown one is kept as written).
fn decode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(at) = rest.find('&') {
        out.push_str(&rest[..at]);
        let tail = &rest[at + 1..];
        match tail.find(';').filter(|&e| e <= 10).and_then(|e| entity(&tail[..e]).map(|c| (c, e))) {
            Some((c, e)) => {
                out.push(c);
                rest = &tail[e + 1..];
            }
            None => {
                out.push('&');
                rest = tail;
            }
        }
    }
    out.push_str(rest);
    out
}

/// A tag's name, lower case, and whether it closes (`</p>` → ("p", true)).
fn tag_name(tag: &str) -> (String, bool) {
    let t = tag.trim_start_matches('<');
    let (closing, t) = match t.strip_prefix('/') {
        Some(t) => (true, t),
        None => (false, t),
    };
    let name: String = t.chars().take_while(|c| c.is_ascii_alphanumeric()).collect();
    (name.to_ascii_lowercase(), closing)
}

/// Tags that end a line of text.
const BLOCK: &[&str] = &[
    "p",
    "div",
    "br",
    "tr",
    "table",
    "pre",
    "dt",
    "dd",
    "dl",
    "section",
    "ul",
    "ol",
    "blockquote",
    "caption",
    "figure",
    "hr",
    "thead",
    "tbody",
];
/// Elements dropped with everything inside them.
const DROPPED: &[&str] = &["script", "style", "nav", "header", "footer", "head", "noscript", "svg"];

/// The sections of an HTML manual, in order. Text before the first heading is dropped.
pub fn split_html(html: &str) -> Vec<Section> {
    let mut sections: Vec<Section> = Vec::new();
    let mut heading: Option<String> = None;
    let mut in_heading = false;
    let mut cell = 0usize;
    let mut text = String::new();
    let mut pre = 0usize;
    let mut dropped: Option<(String, usize)> = None;
    let mut rest = html;
    let push_text = |buf: &mut String, raw: &str, pre: bool| {
        let t = decode(raw);
        if pre {
            buf.push_str(&t);
        } else {
            let mut last_space = buf.ends_with([' ', '\n']) || buf.is_empty();
            for c in t.chars() {
                if c.is_whitespace() {
                    if !last_space {
                        buf.push(' ');
                        last_space = true;
                    }
                } else {
                    buf.push(c);
                    last_space = false;
                }
            }
        }
    };
    let newline = |buf: &mut String| {
        while buf.ends_with(' ') {
            buf.pop();
        }
        if !buf.is_empty() && !buf.ends_with("\n\n") {
            buf.push('\n');
        }
    };
    let close = |sections: &mut Vec<Section>, heading: &Option<String>, text: &str| {
        if let Some(h) = heading {
            let h = h.replace('¶', "");
            let h = h.split_whitespace().collect::<Vec<_>>().join(" ");
            let (number, title) = split_number(&h);
            let body = text.lines().map(str::trim_end).collect::<Vec<_>>().join("\n");
            sections.push(Section { number, title, text: squeeze(&body) });
        }
    };
    while !rest.is_empty() {
        let Some(lt) = rest.find('<') else {
            if dropped.is_none() {
                push_text(&mut text, rest, pre > 0);
            }
            break;
        };
        if dropped.is_none() {
            let chunk = &rest[..lt];
            match (&mut heading, in_heading) {
                // Inside the heading element: its text is the heading.
                (Some(h), true) => h.push_str(&decode(chunk)),
                _ => push_text(&mut text, chunk, pre > 0),
            }
        }
        rest = &rest[lt..];
        // Comments and doctype.
        if rest.starts_with("<!--") {
            rest = rest.find("-->").map_or("", |e| &rest[e + 3..]);
            continue;
        }
        let Some(gt) = rest.find('>') else { break };
        let tag = &rest[..=gt];
        rest = &rest[gt + 1..];
        let (name, closing) = tag_name(tag);
        if let Some((d, depth)) = &mut dropped {
            if name == *d {
                if closing {
                    *depth -= 1;
                    if *depth == 0 {
                        dropped = None;
                    }
                } else if !tag.ends_with("/>") {
                    *depth += 1;
                }
            }
            continue;
        }
        if DROPPED.contains(&name.as_str()) && !closing {
            dropped = Some((name, 1));
            continue;
        }
        let is_heading = name.len() == 2 && name.starts_with('h') && name.as_bytes()[1].is_ascii_digit();
        if is_heading {
            if !closing {
                close(&mut sections, &heading, &text);
                text.clear();
                heading = Some(String::new());
            }
            in_heading = !closing;
            continue;
        }
        match name.as_str() {
            "pre" if closing => {
                pre = pre.saturating_sub(1);
                newline(&mut text);
                text.push('\n');
            }
            "pre" => {
                newline(&mut text);
                text.push('\n');
                pre += 1;
            }
            "li" if !closing => {
                newline(&mut text);
                text.push_str("- ");
            }
            "td" | "th" if !closing => {
                cell += 1;
                if !text.ends_with('\n') && !text.is_empty() {
                    text.push_str(" | ");
                }
            }
            "td" | "th" => cell = cell.saturating_sub(1),
            // Paragraphs inside a table's cell stay on the row's line.
            n if BLOCK.contains(&n) && (cell == 0 || matches!(n, "tr" | "table")) => newline(&mut text),
            _ => {}
        }
    }
    close(&mut sections, &heading, &text);
    sections
}

/// `9.7.9.25.5.1. Title` → (Some("9.7.9.25.5.1"), "Title").
fn split_number(h: &str) -> (Option<String>, String) {
    let num: String = h.chars().take_while(|c| c.is_ascii_digit() || *c == '.').collect();
    let rest = h[num.len()..].trim();
    let num = num.trim_end_matches('.');
    if num.is_empty() || !num.starts_with(|c: char| c.is_ascii_digit()) || rest.is_empty() {
        (None, h.trim().to_string())
    } else {
        (Some(num.to_string()), rest.to_string())
    }
}

/// Blank lines at most one in a row, none at the ends.
fn squeeze(s: &str) -> String {
    let mut out = String::new();
    let mut blank = 0;
    for l in s.lines() {
        if l.trim().is_empty() {
            blank += 1;
            continue;
        }
        if !out.is_empty() {
            out.push_str(if blank > 0 { "\n\n" } else { "\n" });
        }
        blank = 0;
        out.push_str(l);
    }
    out
}

/// The sections of a manual's text (what `pdftotext -layout` prints): a line that is a section
/// number and a title starts a section; table-of-contents lines (dotted leaders, a page number
/// at the end) do not. Text before the first heading is dropped.
pub fn split_text(text: &str) -> Vec<Section> {
    let heading = regex::Regex::new(r"^\s{0,8}(\d+(?:\.\d+)*)\.?\s+(\S.{0,160}?)\s*$").expect("a valid pattern");
    let leader = regex::Regex::new(r"(\.\s?){4,}\s*\d*\s*$|\s{3,}\d+\s*$").expect("a valid pattern");
    let mut sections: Vec<Section> = Vec::new();
    let mut body = String::new();
    let mut current: Option<(String, String)> = None;
    for line in text.replace('\x0c', "\n").lines() {
        let caps = heading.captures(line).filter(|c| {
            let title = &c[2];
            // A title starts with a letter and is no sentence of the text (those end with `.`).
            title.starts_with(|ch: char| ch.is_alphabetic())
                && !leader.is_match(line)
                && !title.ends_with('.')
                && c[1].contains('.')
        });
        match caps {
            Some(c) => {
                if let Some((n, t)) = current.take() {
                    sections.push(Section { number: Some(n), title: t, text: squeeze(&body) });
                }
                body.clear();
                current = Some((c[1].to_string(), c[2].trim().to_string()));
            }
            None if current.is_some() => {
                body.push_str(line.trim_end());
                body.push('\n');
            }
            None => {}
        }
    }
    if let Some((n, t)) = current {
        sections.push(Section { number: Some(n), title: t, text: squeeze(&body) });
    }
    sections
}

/// A file name for a section: its order, then the part of its title after the last `: ` (an
/// instruction's name) or the title, in lower case with `-` between words.
fn file_name(i: usize, s: &Section) -> String {
    let key = s.title.rsplit(": ").next().unwrap_or(&s.title);
    let mut slug = String::new();
    for c in key.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.ends_with('-') && !slug.is_empty() {
            slug.push('-');
        }
        if slug.len() >= 60 {
            break;
        }
    }
    format!("{:04}-{}.md", i + 1, slug.trim_end_matches('-'))
}

/// What `add_docs` wrote.
#[derive(Debug, Clone)]
pub struct Written {
    pub dir: PathBuf,
    pub sections: usize,
    /// Sections with a heading and no text of their own (a chapter's heading), not written.
    pub empty: usize,
}

/// Splits the manual at `file` (HTML, or PDF through `pdftotext`) into `context/NAME/`, replacing
/// what an earlier split of rung's wrote there (never a folder of the user's).
pub fn add_docs(root: &Path, name: &str, file: &Path) -> Result<Written, SourceError> {
    if !super::sources::valid_name(name) {
        return Err(SourceError::Usage(format!("`{name}` cannot be a folder under context/: e.g. ptx")));
    }
    let bytes = std::fs::read(file).map_err(io(format!("reading {}", file.display())))?;
    let pdf = bytes.starts_with(b"%PDF");
    let sections = if pdf {
        let out = std::process::Command::new("pdftotext")
            .args(["-layout", "-enc", "UTF-8"])
            .arg(file)
            .arg("-")
            .output()
            .map_err(|e| {
                SourceError::Usage(format!(
                    "{} is a PDF and pdftotext cannot run ({e}): install poppler-utils, or save the manual's HTML page and add that",
                    file.display()
                ))
            })?;
        if !out.status.success() {
            return Err(SourceError::Usage(format!(
                "pdftotext could not read {}: {}",
                file.display(),
                String::from_utf8_lossy(&out.stderr).trim()
            )));
        }
        split_text(&String::from_utf8_lossy(&out.stdout))
    } else {
        split_html(&String::from_utf8_lossy(&bytes))
    };
    let kept: Vec<&Section> = sections.iter().filter(|s| !s.text.trim().is_empty()).collect();
    if kept.is_empty() {
        return Err(SourceError::Usage(format!(
            "{} has no sections rung can find (no HTML headings with text under them{}): is it the manual's page?",
            file.display(),
            if pdf { ", no numbered heading lines" } else { "" }
        )));
    }
    let context = root.join("context");
    let dir = context.join(name);
    if dir.symlink_metadata().is_ok() && !dir.join(MARKER).is_file() {
        return Err(SourceError::Usage(format!(
            "{} exists and is not a manual rung split: choose another name (rung context add-docs OTHER {})",
            dir.display(),
            file.display()
        )));
    }
    let tmp = context.join(format!(".{name}.splitting-{}", crate::store::unique()));
    std::fs::create_dir_all(&tmp).map_err(io(format!("making {}", tmp.display())))?;
    let write = || -> Result<(), SourceError> {
        for (i, s) in kept.iter().enumerate() {
            let path = tmp.join(file_name(i, s));
            std::fs::write(&path, format!("# {}\n\n{}\n", s.heading(), s.text))
                .map_err(io(format!("writing {}", path.display())))?;
        }
        let source = file.canonicalize().unwrap_or_else(|_| file.to_path_buf());
        std::fs::write(tmp.join(MARKER), format!("{}\n{} sections\n", source.display(), kept.len()))
            .map_err(io("writing the marker"))
    };
    if let Err(e) = write() {
        let _ = std::fs::remove_dir_all(&tmp);
        return Err(e);
    }
    if dir.exists() {
        std::fs::remove_dir_all(&dir).map_err(io(format!("replacing {}", dir.display())))?;
    }
    std::fs::rename(&tmp, &dir).map_err(io(format!("moving the sections to {}", dir.display())))?;
    Ok(Written { dir, sections: kept.len(), empty: sections.len() - kept.len() })
}

/// The manual a split folder came from, as its marker says.
pub fn split_from(dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(dir.join(MARKER)).ok()?;
    text.lines().next().map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_decode_and_unknown_ones_stay() {
        assert_eq!(decode("a &lt;b&gt; &amp;&#39;&#x41;&nbsp;&bogus; & x"), "a <b> &'A &bogus; & x");
    }

    #[test]
    fn numbers_split_from_titles() {
        assert_eq!(
            split_number("9.7.9.25.5.1. Data: cp.async"),
            (Some("9.7.9.25.5.1".into()), "Data: cp.async".into())
        );
        assert_eq!(split_number("Introduction"), (None, "Introduction".into()));
        let s = Section { number: Some("9.7.1".into()), title: "Data Movement: ld.global.nc".into(), text: "x".into() };
        assert_eq!(file_name(4, &s), "0005-ld-global-nc.md");
    }

    #[test]
    fn text_headings_skip_the_table_of_contents() {
        let text = "Contents\n9.7.9.25.5.1. Data Movement: cp.async.bulk.tensor . . . . . . 312\n\x0c\
                    9.7.9.25.5.1. Data Movement: cp.async.bulk.tensor\nInitiates a copy.\n  12.5 GB/s is a figure.\n\
                    9.7.9.25.5.2. Data Movement: cp.reduce.async.bulk.tensor\nReduces.\n";
        let s = split_text(text);
        assert_eq!(s.len(), 2, "{s:?}");
        assert_eq!(s[0].heading(), "9.7.9.25.5.1. Data Movement: cp.async.bulk.tensor");
        assert_eq!(s[0].text, "Initiates a copy.\n  12.5 GB/s is a figure.");
        assert_eq!(s[1].title, "Data Movement: cp.reduce.async.bulk.tensor");
    }
}
