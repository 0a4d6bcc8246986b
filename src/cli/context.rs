//! `rung context`: bring repositories, folders and manuals into the workspace's `context/`,
//! refresh them, list what is indexed and search it as the agent does.

use std::path::{Path, PathBuf};
use std::time::Instant;

use clap::{Args, Subcommand};

use rung::context::{self, ptxdoc, sources};
use rung::exit;

#[derive(Debug, Args)]
pub struct ContextArgs {
    #[command(subcommand)]
    pub command: ContextCommand,
}

#[derive(Debug, Subcommand)]
pub enum ContextCommand {
    /// Clone a git repository (shallow; sparse with --path) or link a local folder into
    /// context/NAME, record it in rung.toml's [[context.sources]] and index it.
    Add {
        /// A git URL (https://, ssh://, git@, file://) or a folder.
        source: String,
        /// Only this subfolder (repeatable): a sparse clone, or a link to it alone.
        #[arg(long = "path", value_name = "SUBDIR")]
        paths: Vec<String>,
        /// The folder under context/ (default: the URL's or folder's last part).
        #[arg(long)]
        name: Option<String>,
    },
    /// Fetch every recorded git source's newest commit (or these), clone the missing ones,
    /// remake missing links, and index what changed. A clone with local changes is left alone.
    Update { names: Vec<String> },
    /// Split a manual (the PTX ISA's HTML page, or its PDF with pdftotext installed) into one
    /// file per section under context/NAME, e.g. `rung context add-docs ptx ptx-isa.html`.
    AddDocs { name: String, file: PathBuf },
    /// What context/ holds and the index has of it: origin, commit, age, files, size, passages.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Search context/ and rung's notes as the agent's search_context does.
    Search {
        query: String,
        #[arg(long, default_value_t = 5)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
}

fn size(bytes: u64) -> String {
    match bytes {
        b if b >= 1 << 30 => format!("{:.1} GB", b as f64 / f64::from(1u32 << 30)),
        b if b >= 1 << 20 => format!("{:.1} MB", b as f64 / f64::from(1u32 << 20)),
        b if b >= 1 << 10 => format!("{:.1} kB", b as f64 / 1024.0),
        b => format!("{b} B"),
    }
}

fn age(s: u64) -> String {
    match s {
        s if s < 60 => format!("{s} s"),
        s if s < 3600 => format!("{} min", s / 60),
        s if s < 86_400 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// Brings the index up to date and says what that took.
fn index(dir: &Path) -> i32 {
    let state = dir.join(rung::workspace::STATE_DIR);
    let t = Instant::now();
    let done = context::Index::open(&state).and_then(|mut i| {
        let u = i.update(dir)?;
        let took = t.elapsed().as_secs_f64();
        Ok((u, took, i.holdings()?))
    });
    match done {
        Ok((u, took, (held, db))) => {
            let ours = || held.iter().filter(|h| h.top != "rung");
            let (files, passages) = (ours().map(|h| h.files).sum::<usize>(), ours().map(|h| h.passages).sum::<usize>());
            println!(
                "indexed in {took:.2} s: {} files read, {} unchanged, {} dropped; context/ has {files} files, {passages} passages; index {}",
                u.read,
                u.kept,
                u.dropped,
                size(db)
            );
            exit::OK
        }
        Err(e) => {
            eprintln!("rung context: {e}");
            exit::INTERNAL
        }
    }
}

fn source_error(e: &sources::SourceError) -> i32 {
    eprintln!("rung context: {e}");
    match e {
        sources::SourceError::Usage(_) => exit::USAGE,
        sources::SourceError::Spec { .. } => exit::WORKSPACE_INVALID,
        _ => exit::INTERNAL,
    }
}

pub fn context_cmd(dir: &Path, args: &ContextArgs) -> i32 {
    if !dir.join("rung.toml").is_file() {
        eprintln!("rung context: no rung.toml in {}: run it in a workspace, or pass -C DIR", dir.display());
        return exit::USAGE;
    }
    match &args.command {
        ContextCommand::Add { source, paths, name } => match sources::add(dir, source, paths, name.as_deref()) {
            Ok(a) => {
                let sparse = if paths.is_empty() { String::new() } else { format!(" (only {})", paths.join(", ")) };
                match &a.commit {
                    Some(c) => println!("cloned {source} into {} at {c}{sparse}", a.dir.display()),
                    None => println!("linked {} to {}{sparse}", a.dir.display(), source),
                }
                println!("recorded in rung.toml: [[context.sources]] name = \"{}\"", a.source.name);
                index(dir)
            }
            Err(e) => source_error(&e),
        },
        ContextCommand::Update { names } => match sources::update(dir, names) {
            Ok(done) => {
                let mut code = exit::OK;
                for (s, r) in &done {
                    match r {
                        Ok(sources::Refreshed::Fetched { from, to }) if from == to => {
                            println!("{}: up to date at {to}", s.name)
                        }
                        Ok(sources::Refreshed::Fetched { from, to }) => println!("{}: {from} → {to}", s.name),
                        Ok(sources::Refreshed::Cloned { commit }) => println!("{}: cloned at {commit}", s.name),
                        Ok(sources::Refreshed::Linked { remade: 0 }) => println!("{}: linked", s.name),
                        Ok(sources::Refreshed::Linked { remade }) => println!("{}: {remade} links made again", s.name),
                        Ok(sources::Refreshed::Kept { why }) => println!("{}: left as it is: {why}", s.name),
                        Err(e) => {
                            eprintln!("{}: {e}", s.name);
                            code = exit::INTERNAL;
                        }
                    }
                }
                if done.is_empty() {
                    println!("rung.toml records no context sources (`rung context add` adds one)");
                }
                let indexed = index(dir);
                if code == exit::OK { indexed } else { code }
            }
            Err(e) => source_error(&e),
        },
        ContextCommand::AddDocs { name, file } => match ptxdoc::add_docs(dir, name, file) {
            Ok(w) => {
                println!(
                    "split {} into {} sections in {}{}",
                    file.display(),
                    w.sections,
                    w.dir.display(),
                    if w.empty > 0 {
                        format!(" ({} headings without text of their own left out)", w.empty)
                    } else {
                        String::new()
                    }
                );
                index(dir)
            }
            Err(e) => source_error(&e),
        },
        ContextCommand::List { json } => {
            let state = dir.join(rung::workspace::STATE_DIR);
            match sources::list(dir, &state) {
                Ok((rows, db)) if *json => {
                    let v = serde_json::json!({ "entries": rows, "index_bytes": db });
                    println!("{v}");
                    exit::OK
                }
                Ok((mut rows, db)) => {
                    for r in rows.iter_mut().filter(|r| r.origin == "files") {
                        if let Some(m) = ptxdoc::split_from(&dir.join("context").join(&r.name)) {
                            r.origin = format!("manual {m}");
                        }
                    }
                    let w = rows.iter().map(|r| r.name.chars().count()).max().unwrap_or(4).max(4);
                    let o = rows.iter().map(|r| r.origin.chars().count()).max().unwrap_or(6).clamp(6, 60);
                    println!(
                        "{:w$}  {:o$}  {:18}  {:>7}  {:>7}  {:>9}  {:>8}",
                        "NAME", "ORIGIN", "COMMIT", "AGE", "FILES", "SIZE", "PASSAGES"
                    );
                    for r in &rows {
                        let origin: String = r.origin.chars().take(o).collect();
                        println!(
                            "{:w$}  {origin:o$}  {:18}  {:>7}  {:>7}  {:>9}  {:>8}",
                            r.name,
                            r.commit.as_deref().unwrap_or(""),
                            r.age_s.map(age).unwrap_or_default(),
                            r.files,
                            size(r.bytes),
                            r.passages
                        );
                        if let Some(p) = &r.problem {
                            println!("{:w$}  ! {p}", "");
                        }
                    }
                    println!("index: {} ({})", state.join(context::INDEX_FILE).display(), size(db));
                    exit::OK
                }
                Err(e) => source_error(&e),
            }
        }
        ContextCommand::Search { query, limit, json } => {
            let state = dir.join(rung::workspace::STATE_DIR);
            let t = Instant::now();
            match context::search(dir, &state, query, *limit, usize::MAX / 8) {
                Ok(found) if *json => {
                    let v: Vec<_> = found
                        .iter()
                        .map(|p| {
                            serde_json::json!({
                                "path": p.path, "line": p.line, "section": p.section, "score": p.score, "text": p.text
                            })
                        })
                        .collect();
                    println!("{}", serde_json::Value::Array(v));
                    exit::OK
                }
                Ok(found) => {
                    if found.is_empty() {
                        println!("nothing in context/ or rung's notes matches `{query}`");
                    }
                    for p in &found {
                        println!("── {}  ({:.2})\n{}\n", p.place(), p.score, p.text);
                    }
                    eprintln!("[{} passages in {:.0} ms]", found.len(), t.elapsed().as_secs_f64() * 1000.0);
                    exit::OK
                }
                Err(e) => {
                    eprintln!("rung context: {e}");
                    exit::INTERNAL
                }
            }
        }
    }
}
