//! A reply's code becomes a version: `versions/vNNN-agent-<slug>.<ext>`, status proposed, its
//! parent recorded, and the prompt and reply that made it kept in `.rung/proposals/vNNN.json`.
//! The file is written by the MCP server's `submit_version` (one path for both agents: the same
//! id allocation, name rules and refusal to overwrite); the scheduler then sees a new file and
//! climbs every rung with it, as with a save.
//!
//! Which block is the proposal: the longest fenced block in a language rung runs (CUDA C++,
//! Python, PTX). Models often show the whole file and then quote the line that matters; the
//! longest block is the file.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::verbs::{self as mcp, Context, Extension, SubmitArgs};
use rung_core::store::{Status, Store};
use rung_core::workspace::Workspace;

/// The slug's longest form, so a file name stays readable in the versions pane.
const SLUG_CHARS: usize = 24;

/// A fenced code block of a reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Code {
    /// The info string's first word, lowered (`cuda`, `python`), or empty.
    pub lang: String,
    pub source: String,
}

impl Code {
    /// The file extension the language names, if rung runs it.
    pub fn extension(&self) -> Option<Extension> {
        match self.lang.as_str() {
            "cuda" | "cu" | "c++" | "cpp" | "cxx" | "c" | "cuh" => Some(Extension::Cu),
            "python" | "py" | "python3" | "triton" => Some(Extension::Py),
            "ptx" => Some(Extension::Ptx),
            _ => None,
        }
    }
}

/// Every fenced block (``` or ~~~, three or more) of `text`, in order. An unclosed block runs to
/// the end (a reply cut short still shows what arrived, but see [`proposal_code`]).
pub fn code_blocks(text: &str) -> Vec<(Code, bool)> {
    let mut out = Vec::new();
    let mut lines = text.lines();
    while let Some(line) = lines.next() {
        let t = line.trim_start();
        let fence_char = if t.starts_with("```") {
            '`'
        } else if t.starts_with("~~~") {
            '~'
        } else {
            continue;
        };
        let width = t.chars().take_while(|&c| c == fence_char).count();
        let lang = t[width..].split_whitespace().next().unwrap_or("").trim_matches('{').trim_matches('}');
        let lang = lang.trim_start_matches('.').to_ascii_lowercase();
        let mut body = Vec::new();
        let mut closed = false;
        for l in lines.by_ref() {
            let lt = l.trim_start();
            let n = lt.chars().take_while(|&c| c == fence_char).count();
            if n >= width && lt[n..].trim().is_empty() {
                closed = true;
                break;
            }
            body.push(l);
        }
        let mut source = body.join("\n");
        source.push('\n');
        out.push((Code { lang, source }, closed));
    }
    out
}

/// The block of a reply that is a proposal: the longest closed block in a language rung runs;
/// an untagged block counts when the reply has no tagged one. `None`: the reply proposes nothing.
pub fn proposal_code(reply: &str) -> Option<Code> {
    let blocks: Vec<Code> = code_blocks(reply).into_iter().filter(|(_, closed)| *closed).map(|(c, _)| c).collect();
    let tagged = blocks.iter().filter(|c| c.extension().is_some()).max_by_key(|c| c.source.len());
    tagged
        .or_else(|| blocks.iter().filter(|c| c.lang.is_empty()).max_by_key(|c| c.source.len()))
        .filter(|c| !c.source.trim().is_empty())
        .cloned()
}

/// A short name for the file from the reply's words before its first block: a `name:` line
/// when the model wrote one, else its first heading or sentence. `proposal` when nothing fits.
pub fn slug(reply: &str) -> String {
    let before = reply.split("```").next().unwrap_or("");
    let named = before.lines().find_map(|l| {
        let t = l.trim().trim_start_matches(['*', '_', '#', ' ']);
        let lower = t.to_ascii_lowercase();
        lower.starts_with("name:").then(|| t[5..].trim().trim_matches(['*', '_', '`']).to_string())
    });
    let first = || {
        before
            .lines()
            .map(|l| l.trim().trim_start_matches('#').trim())
            .find(|l| !l.is_empty())
            .map(|l| l.split(['.', ':', ',', ';']).next().unwrap_or(l).to_string())
    };
    let raw = named.or_else(first).unwrap_or_default();
    // Words, not a cut mid-word: a slug that ends where a word does.
    let mut out = String::new();
    for w in raw.split(|c: char| !c.is_ascii_alphanumeric()).filter(|w| !w.is_empty()) {
        let w = w.to_ascii_lowercase();
        let extra = if out.is_empty() { w.len() } else { w.len() + 1 };
        if out.len() + extra > SLUG_CHARS {
            break;
        }
        if !out.is_empty() {
            out.push('-');
        }
        out.push_str(&w);
    }
    if out.is_empty() { "proposal".into() } else { out }
}

/// What made a proposal, kept beside it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Record {
    pub version: String,
    pub parent: Option<String>,
    pub created_unix_ms: i64,
    pub provider: String,
    pub model: String,
    /// The conversation's id in `.rung/chat/` (empty when it was not saved).
    pub conversation: String,
    /// The system prompt as sent, with the workspace's part.
    pub system: String,
    /// The user's message the reply answers.
    pub request: String,
    pub reply: String,
}

impl Record {
    /// What a turn of `conv` sent (`system`, `request`) and got back (`reply`); the version and
    /// parent are filled in by [`propose`].
    pub fn of_turn(conv: &super::Conversation, system: String, request: String, reply: String) -> Record {
        Record {
            version: String::new(),
            parent: None,
            created_unix_ms: rung_core::store::now_ms(),
            provider: conv.provider.clone(),
            model: conv.model.clone(),
            conversation: conv.id.clone(),
            // Kept beside the version, so cleaned of keys as the conversation's own file is.
            system: conv.clean(&system),
            request: conv.clean(&request),
            reply: conv.clean(&reply),
        }
    }
}

/// The text of the last non-empty assistant reply among `messages` (a turn's, after its tool
/// rounds), or empty.
pub fn last_reply(messages: &[super::Message]) -> String {
    messages
        .iter()
        .rev()
        .find(|m| m.role == super::Role::Assistant && !m.text.trim().is_empty())
        .map(|m| m.text.clone())
        .unwrap_or_default()
}

/// A written proposal.
#[derive(Debug, Clone, PartialEq)]
pub struct Proposed {
    pub id: String,
    pub path: PathBuf,
    pub parent: Option<String>,
    /// Where its [`Record`] lies.
    pub record: PathBuf,
    /// Versions with this very source, with their reviews (`v006 (rejected: too slow)`).
    pub same_as: Vec<String>,
}

/// Where proposals' records live.
pub fn records_dir(state_dir: &Path) -> PathBuf {
    state_dir.join("proposals")
}

/// The record of a proposed version, when it has one.
pub fn record_of(state_dir: &Path, id: &str) -> Option<Record> {
    let text = std::fs::read_to_string(records_dir(state_dir).join(format!("{id}.json"))).ok()?;
    serde_json::from_str(&text).ok()
}

/// Why a reply's code was not kept as a version.
#[derive(Debug, thiserror::Error)]
pub enum ProposeError {
    /// The version itself was refused (the MCP tool's error: what was wrong and what to do).
    #[error("{0}")]
    Submit(crate::verbs::ToolError),
    #[error("{} was written, but its prompt and reply could not be kept in {}: {source}", path.display(), file.display())]
    Record { path: PathBuf, file: PathBuf, source: std::io::Error },
    #[error("the proposal's record: {0}")]
    Json(#[from] serde_json::Error),
}

/// What the reply proposes, written as a version: `Ok(None)` when it has no code. The extension
/// is the block's language's, else the parent's; `record`'s version and parent are filled in.
pub fn propose(
    root: &Path,
    parent: Option<&str>,
    reply: &str,
    mut record: Record,
) -> Result<Option<Proposed>, ProposeError> {
    let Some(code) = proposal_code(reply) else { return Ok(None) };
    let args = SubmitArgs {
        name: format!("agent-{}", slug(reply)),
        source: code.source.clone(),
        extension: code.extension(),
        parent: parent.map(str::to_string),
    };
    let ctx = Context::new(root.to_path_buf());
    let out = mcp::submit_version(&ctx, &args).map_err(ProposeError::Submit)?;
    let id = out.data.get("id").and_then(|v| v.as_str()).unwrap_or_default().to_string();
    let path = PathBuf::from(out.data.get("path").and_then(|v| v.as_str()).unwrap_or_default());
    record.version = id.clone();
    record.parent = parent.map(str::to_string);
    let state = root.join(rung_core::workspace::STATE_DIR);
    let dir = records_dir(&state);
    let file = dir.join(format!("{id}.json"));
    let text = serde_json::to_string_pretty(&record)?;
    if let Err(source) = std::fs::create_dir_all(&dir).and_then(|()| std::fs::write(&file, text)) {
        return Err(ProposeError::Record { path, file, source });
    }
    let same_as = out
        .data
        .get("same_as")
        .and_then(|v| v.as_array())
        .map(|a| a.iter().filter_map(|s| s.as_str().map(str::to_string)).collect())
        .unwrap_or_default();
    Ok(Some(Proposed { id, path, parent: parent.map(str::to_string), record: file, same_as }))
}

/// The parent a new proposal starts from when the user has `selected` a version: that version,
/// unless it was rejected, in which case the version it was made from (and so on up), since a
/// rejected version is what not to build on. `None`: the task and reference alone.
pub fn parent_for(root: &Path, selected: Option<&str>) -> Option<String> {
    let ws = Workspace::open(root).ok()?;
    let store = Store::open(&ws.state_dir()).ok();
    let mut at = ws.version(selected?)?.id.clone();
    for _ in 0..1000 {
        let Some(row) = store.as_ref().and_then(|s| s.version(&at).ok().flatten()) else { return Some(at) };
        if row.status != Status::Rejected {
            return Some(at);
        }
        at = row.parent.filter(|p| ws.version(p).is_some())?;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proposal's record keeps the turn's text cleaned of the conversation's keys, as the
    /// conversation's own file is.
    #[test]
    fn a_record_holds_no_key_the_conversation_guards() {
        let mut conv = crate::Conversation::in_memory("local", "m");
        conv.guard(crate::Secret::new("sk-proj-abcdef0123456789"));
        let r = Record::of_turn(
            &conv,
            "system".into(),
            "use key sk-proj-abcdef0123456789 please".into(),
            "the key was sk-proj-abcdef0123456789".into(),
        );
        let text = serde_json::to_string(&r).unwrap();
        assert!(!text.contains("sk-proj-abcdef0123456789"), "{text}");
        assert!(r.reply.contains("[redacted]"), "{}", r.reply);
    }

    #[test]
    fn the_longest_tagged_block_is_the_proposal() {
        let reply = "Use float4.\n\n```cuda\n__global__ void k() { /* whole file */ }\nint x;\n```\n\nThe key line:\n```cuda\nfloat4 v;\n```\n";
        let c = proposal_code(reply).unwrap();
        assert!(c.source.contains("whole file"), "{c:?}");
        assert_eq!(c.extension(), Some(Extension::Cu));
    }

    #[test]
    fn untagged_counts_only_without_a_tagged_block_and_unclosed_never() {
        assert_eq!(proposal_code("```\nimport triton\n```\n").unwrap().source, "import triton\n");
        assert!(proposal_code("```python\nimport triton\n").is_none(), "a block cut short is not a file");
        let mixed = "```\nlong long long long long long text\n```\n```py\nimport triton\n```\n";
        assert_eq!(proposal_code(mixed).unwrap().lang, "py");
        assert!(proposal_code("no code here").is_none());
        assert!(proposal_code("```bash\nls\n```").is_none(), "a shell snippet is not a version");
    }

    #[test]
    fn tildes_and_longer_fences_close_only_their_own() {
        let r = "~~~python\nx = '```'\n~~~\n";
        assert_eq!(proposal_code(r).unwrap().source, "x = '```'\n");
        let r = "````cuda\n```\ninner\n```\n````\n";
        assert_eq!(proposal_code(r).unwrap().source, "```\ninner\n```\n");
    }

    #[test]
    fn slugs_come_from_a_name_line_or_the_first_words() {
        assert_eq!(slug("Name: Float4 + FMA\n```cuda\n```"), "float4-fma");
        assert_eq!(slug("**name:** `warp shuffle`\n"), "warp-shuffle");
        assert_eq!(slug("## Vectorised loads. They halve the instructions.\n```cuda"), "vectorised-loads");
        assert_eq!(
            slug("Here is a faster version with one block per row and float4 loads"),
            "here-is-a-faster-version"
        );
        assert_eq!(slug("```cuda\nx\n```"), "proposal");
        assert!(slug(&"a".repeat(100)).len() <= SLUG_CHARS || slug(&"a".repeat(100)) == "proposal");
    }
}
