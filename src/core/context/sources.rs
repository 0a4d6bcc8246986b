//! Where `context/` comes from: `rung context add` brings a git repository (a shallow clone,
//! sparse when paths are given) or links a local folder into `context/NAME`, and records it in
//! rung.toml's `[[context.sources]]` so that `rung context update` refreshes it and a fresh copy
//! of the workspace brings it back. `rung context list` shows what is there and how old it is.
//!
//! rung.toml is edited with `toml_edit`, so the user's comments and layout stay; it is written
//! beside and renamed in. A clone goes into a hidden folder first and is renamed into place only
//! when it succeeded, so a failed clone leaves nothing behind. An update never discards a change
//! the user made inside a clone: a clone with local changes is left as it is, with the reason.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::SystemTime;

use serde::Deserialize;

/// A context source as rung.toml records it.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Source {
    /// Its folder under `context/`.
    pub name: String,
    /// A git repository to clone (https://, ssh, git@, file://).
    pub url: Option<String>,
    /// A local folder to link.
    pub folder: Option<PathBuf>,
    /// Only these subfolders (a sparse clone, or links to them alone).
    #[serde(default)]
    pub paths: Vec<String>,
}

impl Source {
    /// The folders a linked source points `context/NAME` (or its paths) at.
    pub fn link_targets(&self) -> Vec<PathBuf> {
        let Some(folder) = &self.folder else { return vec![] };
        if self.paths.is_empty() { vec![folder.clone()] } else { self.paths.iter().map(|p| folder.join(p)).collect() }
    }

    /// `git https://…` or `link /home/…`, with its paths.
    pub fn origin(&self) -> String {
        let base = match (&self.url, &self.folder) {
            (Some(u), _) => format!("git {u}"),
            (None, Some(f)) => format!("link {}", f.display()),
            (None, None) => "nothing".to_string(),
        };
        if self.paths.is_empty() { base } else { format!("{base} ({})", self.paths.join(", ")) }
    }
}

/// rung.toml's `[context]` table.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Section {
    #[serde(default)]
    pub sources: Vec<Source>,
}

/// What is wrong with one source of `[context]`: its index and key, the message and the fix.
pub struct Problem {
    pub index: usize,
    pub key: &'static str,
    pub message: String,
    pub help: String,
}

/// Whether `name` can be a folder under `context/`: one plain path component.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && !name.starts_with('.')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
}

/// Whether `p` is a relative path that stays inside its folder.
fn valid_subpath(p: &str) -> bool {
    let path = Path::new(p);
    !p.is_empty() && path.is_relative() && path.components().all(|c| matches!(c, std::path::Component::Normal(_)))
}

/// The semantic checks of `[context]` (rung.toml's validation reports them at their keys).
pub fn problems(section: &Section) -> Vec<Problem> {
    let mut out = Vec::new();
    let mut names = std::collections::BTreeSet::new();
    for (index, s) in section.sources.iter().enumerate() {
        let mut bad = |key, message: String, help: &str| {
            out.push(Problem { index, key, message, help: help.to_string() });
        };
        if !valid_name(&s.name) {
            bad(
                "name",
                format!("`{}` is not a folder name", s.name),
                "letters, digits, `-`, `_` and `.`, e.g. name = \"cutlass\"",
            );
        } else if !names.insert(s.name.as_str()) {
            bad("name", format!("a second source named `{}`", s.name), "give each source its own name");
        }
        match (&s.url, &s.folder) {
            (Some(_), Some(_)) => {
                bad("folder", "a source is a git URL or a folder, not both".into(), "keep one of url and folder")
            }
            (None, None) => {
                bad("name", "a source needs url or folder".into(), "add url = \"https://…\" or folder = \"/path\"")
            }
            (None, Some(f)) if !f.is_absolute() => bad(
                "folder",
                format!("`{}` is not an absolute path", f.display()),
                "write the folder's whole path (rung context add resolves it for you)",
            ),
            _ => {}
        }
        for p in &s.paths {
            if !valid_subpath(p) {
                bad(
                    "paths",
                    format!("`{p}` is not a path inside the source"),
                    "give folders relative to its top, e.g. \"include/cute\"",
                );
            }
        }
    }
    out
}

/// What went wrong adding, updating or listing a source, or splitting a manual.
#[derive(Debug, thiserror::Error)]
pub enum SourceError {
    #[error("{0}")]
    Usage(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
    #[error("{what} failed: {detail}")]
    Git { what: String, detail: String },
    #[error("{}: {message}", file.display())]
    Spec { file: PathBuf, message: String },
}

pub(super) fn io(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SourceError {
    let what = what.into();
    move |source| SourceError::Io { what, source }
}

/// The sources rung.toml records (none when it has no `[context]`). Only `[context]` is read.
pub fn recorded(root: &Path) -> Result<Vec<Source>, SourceError> {
    #[derive(Deserialize)]
    struct File {
        #[serde(default)]
        context: Section,
    }
    let file = root.join("rung.toml");
    let text = std::fs::read_to_string(&file).map_err(io(format!("reading {}", file.display())))?;
    let f: File = toml::from_str(&text)
        .map_err(|e| SourceError::Spec { file: file.clone(), message: e.message().to_string() })?;
    Ok(f.context.sources)
}

/// Runs git; its standard error is the failure's detail.
fn git(args: &[&str], dir: Option<&Path>, what: &str) -> Result<String, SourceError> {
    let mut cmd = Command::new("git");
    if let Some(d) = dir {
        cmd.arg("-C").arg(d);
    }
    // Never ask for a password on a terminal rung's TUI may be drawing on.
    cmd.args(args).env("GIT_TERMINAL_PROMPT", "0").stdin(std::process::Stdio::null());
    let out = cmd.output().map_err(|e| SourceError::Git {
        what: what.to_string(),
        detail: format!("{e} (is git installed and on PATH?)"),
    })?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        let detail = err.lines().filter(|l| !l.trim().is_empty()).collect::<Vec<_>>().join("; ");
        return Err(SourceError::Git { what: what.to_string(), detail });
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// Whether `source` is a git URL rather than a folder.
fn is_url(source: &str) -> bool {
    source.contains("://") || source.starts_with("git@") || source.ends_with(".git")
}

/// The name a source gets by default: the URL's or folder's last part, without `.git`.
fn default_name(source: &str) -> String {
    let last = source.trim_end_matches('/').rsplit(['/', ':']).next().unwrap_or(source);
    last.strip_suffix(".git").unwrap_or(last).to_string()
}

/// A shallow clone of `url` into `dest` (which must not exist), sparse when `paths` are given.
fn clone(url: &str, paths: &[String], dest: &Path) -> Result<String, SourceError> {
    let parent = dest.parent().unwrap_or(Path::new("."));
    let name = dest.file_name().and_then(|n| n.to_str()).unwrap_or("source");
    let tmp = parent.join(format!(".{name}.cloning-{}", crate::store::unique()));
    let tmp_s = tmp.to_string_lossy().into_owned();
    let mut args = vec!["clone", "--quiet", "--depth", "1"];
    if !paths.is_empty() {
        // Only the blobs of the chosen folders are fetched where the server allows it.
        args.extend(["--filter=blob:none", "--sparse"]);
    }
    args.extend(["--", url, tmp_s.as_str()]);
    let result = (|| {
        git(&args, None, &format!("git clone {url}"))?;
        if !paths.is_empty() {
            let mut set = vec!["sparse-checkout", "set", "--"];
            set.extend(paths.iter().map(String::as_str));
            git(&set, Some(&tmp), "git sparse-checkout set")?;
            for p in paths {
                if !tmp.join(p).exists() {
                    return Err(SourceError::Usage(format!("{url} has no `{p}` at its default branch's head")));
                }
            }
        }
        git(&["rev-parse", "--short", "HEAD"], Some(&tmp), "git rev-parse")
    })();
    match result {
        Ok(commit) => {
            std::fs::rename(&tmp, dest).map_err(io(format!("moving the clone to {}", dest.display())))?;
            Ok(commit)
        }
        Err(e) => {
            let _ = std::fs::remove_dir_all(&tmp);
            Err(e)
        }
    }
}

/// Links `context/NAME` (or `context/NAME/<path>` for each path) to the folder.
fn link(folder: &Path, paths: &[String], dest: &Path) -> Result<(), SourceError> {
    if paths.is_empty() {
        return std::os::unix::fs::symlink(folder, dest).map_err(io(format!("linking {}", dest.display())));
    }
    for p in paths {
        let target = folder.join(p);
        if !target.is_dir() {
            return Err(SourceError::Usage(format!("{} has no folder `{p}`", folder.display())));
        }
        let at = dest.join(p);
        if let Some(parent) = at.parent() {
            std::fs::create_dir_all(parent).map_err(io(format!("making {}", parent.display())))?;
        }
        if at.symlink_metadata().is_err() {
            std::os::unix::fs::symlink(&target, &at).map_err(io(format!("linking {}", at.display())))?;
        }
    }
    Ok(())
}

/// Appends a source to rung.toml's `[[context.sources]]`, keeping the rest of the file as it is.
fn record(root: &Path, s: &Source) -> Result<(), SourceError> {
    let file = root.join("rung.toml");
    let text = std::fs::read_to_string(&file).map_err(io(format!("reading {}", file.display())))?;
    let mut doc: toml_edit::DocumentMut = text
        .parse()
        .map_err(|e: toml_edit::TomlError| SourceError::Spec { file: file.clone(), message: e.to_string() })?;
    let context = doc.entry("context").or_insert_with(|| {
        let mut t = toml_edit::Table::new();
        t.set_implicit(true);
        toml_edit::Item::Table(t)
    });
    let Some(context) = context.as_table_mut() else {
        return Err(SourceError::Spec { file, message: "`context` is not a table".into() });
    };
    let sources = context.entry("sources").or_insert_with(|| toml_edit::Item::ArrayOfTables(Default::default()));
    let Some(sources) = sources.as_array_of_tables_mut() else {
        return Err(SourceError::Spec { file, message: "`context.sources` is not an array of tables".into() });
    };
    let mut t = toml_edit::Table::new();
    t["name"] = toml_edit::value(s.name.as_str());
    if let Some(u) = &s.url {
        t["url"] = toml_edit::value(u.as_str());
    }
    if let Some(f) = &s.folder {
        t["folder"] = toml_edit::value(f.to_string_lossy().as_ref());
    }
    if !s.paths.is_empty() {
        t["paths"] = toml_edit::value(s.paths.iter().map(String::as_str).collect::<toml_edit::Array>());
    }
    sources.push(t);
    let tmp = file.with_extension(format!("toml.tmp{}", crate::store::unique()));
    std::fs::write(&tmp, doc.to_string()).map_err(io(format!("writing {}", tmp.display())))?;
    std::fs::rename(&tmp, &file).map_err(io(format!("writing {}", file.display())))
}

/// What `add` did.
#[derive(Debug, Clone)]
pub struct Added {
    pub source: Source,
    /// `context/NAME`.
    pub dir: PathBuf,
    /// The clone's commit (short), for a git source.
    pub commit: Option<String>,
}

/// `rung context add`: clones `source` (a git URL) or links it (a folder, made absolute by the
/// caller) into `context/NAME`, then records it in rung.toml.
pub fn add(root: &Path, source: &str, paths: &[String], name: Option<&str>) -> Result<Added, SourceError> {
    let name = name.map_or_else(|| default_name(source), str::to_string);
    if !valid_name(&name) {
        return Err(SourceError::Usage(format!(
            "`{name}` cannot be a folder under context/: pass --name with letters, digits, `-`, `_` or `.`"
        )));
    }
    if let Some(p) = paths.iter().find(|p| !valid_subpath(p)) {
        return Err(SourceError::Usage(format!(
            "--path `{p}` is not a folder inside the source: give it relative to its top"
        )));
    }
    let known = recorded(root)?;
    if known.iter().any(|s| s.name == name) {
        return Err(SourceError::Usage(format!(
            "rung.toml already has a context source `{name}`: `rung context update {name}` refreshes it, or pass --name"
        )));
    }
    let context = root.join("context");
    let dir = context.join(&name);
    if dir.symlink_metadata().is_ok() {
        return Err(SourceError::Usage(format!("{} exists: pass --name to put the source beside it", dir.display())));
    }
    std::fs::create_dir_all(&context).map_err(io(format!("making {}", context.display())))?;
    let folder = Path::new(source);
    let (s, commit) = if !is_url(source) && folder.is_dir() {
        let folder = folder.canonicalize().map_err(io(format!("resolving {source}")))?;
        if folder.parent().is_none() || root.canonicalize().is_ok_and(|r| r.starts_with(&folder)) {
            return Err(SourceError::Usage(format!(
                "{} holds the workspace (or is the disk): link the folder of documents or code itself",
                folder.display()
            )));
        }
        let s = Source { name: name.clone(), url: None, folder: Some(folder.clone()), paths: paths.to_vec() };
        if let Err(e) = link(&folder, paths, &dir) {
            let _ = if paths.is_empty() { std::fs::remove_file(&dir) } else { std::fs::remove_dir_all(&dir) };
            return Err(e);
        }
        (s, None)
    } else if is_url(source) {
        let commit = clone(source, paths, &dir)?;
        (
            Source { name: name.clone(), url: Some(source.to_string()), folder: None, paths: paths.to_vec() },
            Some(commit),
        )
    } else {
        return Err(SourceError::Usage(format!(
            "`{source}` is neither a folder here nor a git URL (https://…, ssh://…, git@…, file://…)"
        )));
    };
    record(root, &s)?;
    Ok(Added { source: s, dir, commit })
}

/// What `update` did to one source.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refreshed {
    /// A clone fetched: its commit before and after (equal: it was up to date).
    Fetched { from: String, to: String },
    /// A clone that was missing (a fresh copy of the workspace), made again.
    Cloned { commit: String },
    /// A link checked, and made again where it was missing.
    Linked { remade: usize },
    /// Left as it was, and why.
    Kept { why: String },
}

/// One source and what its update did.
pub type Outcome = (Source, Result<Refreshed, SourceError>);

/// `rung context update [NAME...]`: fetches each git source's newest commit of its default
/// branch (shallow), clones the missing ones and remakes missing links. Unknown names are an
/// error that lists the known ones.
pub fn update(root: &Path, names: &[String]) -> Result<Vec<Outcome>, SourceError> {
    let known = recorded(root)?;
    if let Some(n) = names.iter().find(|n| !known.iter().any(|s| &s.name == *n)) {
        let list = known.iter().map(|s| s.name.as_str()).collect::<Vec<_>>().join(", ");
        return Err(SourceError::Usage(if list.is_empty() {
            format!("no context source `{n}`: rung.toml records none (`rung context add` adds one)")
        } else {
            format!("no context source `{n}`: rung.toml records {list}")
        }));
    }
    let chosen: Vec<Source> = known.into_iter().filter(|s| names.is_empty() || names.contains(&s.name)).collect();
    let context = root.join("context");
    let mut out = Vec::new();
    for s in chosen {
        let dir = context.join(&s.name);
        let result = (|| {
            if let Some(url) = &s.url {
                if !dir.exists() {
                    std::fs::create_dir_all(&context).map_err(io(format!("making {}", context.display())))?;
                    return Ok(Refreshed::Cloned { commit: clone(url, &s.paths, &dir)? });
                }
                let dirty = git(&["status", "--porcelain"], Some(&dir), "git status")?;
                if !dirty.is_empty() {
                    return Ok(Refreshed::Kept {
                        why: format!(
                            "it has local changes ({} files): commit or discard them in {}, then update",
                            dirty.lines().count(),
                            dir.display()
                        ),
                    });
                }
                let from = git(&["rev-parse", "--short", "HEAD"], Some(&dir), "git rev-parse")?;
                git(&["fetch", "--quiet", "--depth", "1", "origin", "HEAD"], Some(&dir), &format!("git fetch {url}"))?;
                git(&["reset", "--quiet", "--hard", "FETCH_HEAD"], Some(&dir), "git reset")?;
                if s.paths.is_empty() {
                    let sparse =
                        git(&["config", "--bool", "core.sparseCheckout"], Some(&dir), "git config").unwrap_or_default();
                    if sparse == "true" {
                        git(&["sparse-checkout", "disable"], Some(&dir), "git sparse-checkout disable")?;
                    }
                } else {
                    let mut set = vec!["sparse-checkout", "set", "--"];
                    set.extend(s.paths.iter().map(String::as_str));
                    git(&set, Some(&dir), "git sparse-checkout set")?;
                }
                // The fetch time `list` shows, also when nothing new came.
                let _ = std::fs::write(dir.join(".git/rung-fetched"), b"");
                let to = git(&["rev-parse", "--short", "HEAD"], Some(&dir), "git rev-parse")?;
                Ok(Refreshed::Fetched { from, to })
            } else if let Some(folder) = &s.folder {
                if !folder.is_dir() {
                    return Err(SourceError::Usage(format!(
                        "the folder {} is gone: put it back, or remove the source from rung.toml",
                        folder.display()
                    )));
                }
                let missing = if s.paths.is_empty() {
                    usize::from(dir.symlink_metadata().is_err())
                } else {
                    s.paths.iter().filter(|p| dir.join(p).symlink_metadata().is_err()).count()
                };
                if missing > 0 {
                    std::fs::create_dir_all(&context).map_err(io(format!("making {}", context.display())))?;
                    link(folder, &s.paths, &dir)?;
                }
                Ok(Refreshed::Linked { remade: missing })
            } else {
                Ok(Refreshed::Kept { why: "it has neither url nor folder".into() })
            }
        })();
        out.push((s, result));
    }
    Ok(out)
}

/// One row of `rung context list`.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Listed {
    /// The folder under `context/` (or `rung` for rung's own notes).
    pub name: String,
    /// Where it comes from: `git URL (paths)`, `link FOLDER`, `files` (put there by hand),
    /// `rung's notes`.
    pub origin: String,
    /// The clone's commit and its date, for a git source.
    pub commit: Option<String>,
    /// Seconds since it was fetched, linked or last changed.
    pub age_s: Option<u64>,
    pub files: usize,
    pub bytes: u64,
    pub passages: usize,
    /// Why it is not as recorded (a clone or link missing), if so.
    pub problem: Option<String>,
}

fn age(path: &Path) -> Option<u64> {
    let m = std::fs::symlink_metadata(path).ok()?.modified().ok()?;
    SystemTime::now().duration_since(m).ok().map(|d| d.as_secs())
}

/// `rung context list`: every recorded source and every other entry of `context/`, with what
/// the index holds of it (after bringing the index up to date), and the index's size on disk.
pub fn list(root: &Path, state_dir: &Path) -> Result<(Vec<Listed>, u64), SourceError> {
    let known = recorded(root)?;
    let mut index = super::Index::open(state_dir).map_err(|e| SourceError::Usage(e.to_string()))?;
    index.update(root).map_err(|e| SourceError::Usage(e.to_string()))?;
    let (held, size) = index.holdings().map_err(|e| SourceError::Usage(e.to_string()))?;
    let mut out = Vec::new();
    for s in &known {
        let dir = root.join("context").join(&s.name);
        let h = held.iter().find(|h| h.top == s.name);
        let (commit, when, problem) = if s.url.is_some() {
            let commit = git(&["log", "-1", "--format=%h %cs"], Some(&dir), "git log").ok();
            let marks = [dir.join(".git/rung-fetched"), dir.join(".git/FETCH_HEAD"), dir.join(".git/index")];
            let when = marks.iter().filter_map(|p| age(p)).min();
            let problem = (!dir.exists()).then(|| "not cloned here: `rung context update` clones it".to_string());
            (commit, when, problem)
        } else {
            let problem =
                s.link_targets().iter().find(|t| !t.is_dir()).map(|t| format!("{} is gone", t.display())).or_else(
                    || {
                        (dir.symlink_metadata().is_err())
                            .then(|| "not linked here: `rung context update` links it".into())
                    },
                );
            (None, age(&dir), problem)
        };
        out.push(Listed {
            name: s.name.clone(),
            origin: s.origin(),
            commit,
            age_s: when,
            files: h.map_or(0, |h| h.files),
            bytes: h.map_or(0, |h| h.bytes),
            passages: h.map_or(0, |h| h.passages),
            problem,
        });
    }
    for h in held.iter().filter(|h| !known.iter().any(|s| s.name == h.top)) {
        let (origin, when) = if h.top == "rung" {
            ("rung's notes".to_string(), None)
        } else {
            ("files".to_string(), age(&root.join("context").join(&h.top)))
        };
        out.push(Listed {
            name: h.top.clone(),
            origin,
            commit: None,
            age_s: when,
            files: h.files,
            bytes: h.bytes,
            passages: h.passages,
            problem: None,
        });
    }
    Ok((out, size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_come_from_the_url_or_folder_and_must_be_one_folder() {
        assert_eq!(default_name("https://github.com/NVIDIA/cutlass.git"), "cutlass");
        assert_eq!(default_name("git@github.com:NVIDIA/cutlass"), "cutlass");
        assert_eq!(default_name("/home/me/src/tilelang/"), "tilelang");
        assert!(valid_name("cutlass-3.9") && !valid_name("..") && !valid_name("a/b") && !valid_name(".hidden"));
        assert!(valid_subpath("include/cute") && !valid_subpath("../x") && !valid_subpath("/etc"));
    }

    #[test]
    fn the_section_s_problems_name_their_key() {
        let s = |name: &str, url: Option<&str>, folder: Option<&str>, paths: &[&str]| Source {
            name: name.into(),
            url: url.map(Into::into),
            folder: folder.map(PathBuf::from),
            paths: paths.iter().map(|p| p.to_string()).collect(),
        };
        let section = Section {
            sources: vec![
                s("ok", Some("https://x/y"), None, &["include"]),
                s("ok", None, Some("/data"), &[]),
                s("both", Some("u"), Some("/f"), &[]),
                s("rel", None, Some("docs"), &["../up"]),
            ],
        };
        let p: Vec<(usize, &str)> = problems(&section).iter().map(|p| (p.index, p.key)).collect();
        assert_eq!(p, [(1, "name"), (2, "folder"), (3, "folder"), (3, "paths")]);
    }
}
