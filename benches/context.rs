//! The context index at the size of a large checkout: a generated tree of 20,000 source and
//! documentation files (about the size of cutlass), indexed from nothing, then again after one
//! file changes, then searched. Prints one table. `cargo bench --bench context [-- FILES]`.

use std::path::Path;
use std::time::{Duration, Instant};

use rung::context;

/// A small deterministic generator (xorshift), so every run indexes the same tree.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Words of a kernel library: a few very common, many rare (Zipf-like draws).
fn vocabulary(rng: &mut Rng) -> Vec<String> {
    let common = [
        "template",
        "typename",
        "struct",
        "const",
        "auto",
        "return",
        "int",
        "float",
        "layout",
        "tensor",
        "shape",
        "stride",
        "copy",
        "mma",
        "smem",
        "gmem",
        "tile",
        "thread",
        "warp",
        "block",
        "cluster",
        "barrier",
        "pipeline",
        "stage",
        "epilogue",
        "atom",
        "partition",
        "coord",
        "size",
        "make",
        "using",
        "namespace",
        "cute",
        "cutlass",
    ];
    let mut out: Vec<String> = common.iter().map(|s| s.to_string()).collect();
    let parts = ["tma", "load", "store", "async", "bulk", "swizzle", "mode", "rank", "sm90", "gemm", "arrive", "wait"];
    for i in 0..6000 {
        let a = parts[rng.below(parts.len() as u64) as usize];
        let b = parts[rng.below(parts.len() as u64) as usize];
        out.push(format!("{a}_{b}_{i}"));
    }
    out
}

fn word<'a>(rng: &mut Rng, vocab: &'a [String]) -> &'a str {
    // Half the draws from the 34 common words, the rest spread over the long tail.
    if rng.below(2) == 0 { &vocab[rng.below(34) as usize] } else { &vocab[rng.below(vocab.len() as u64) as usize] }
}

fn file_text(rng: &mut Rng, vocab: &[String]) -> String {
    let lines = 40 + rng.below(260);
    let mut s = String::new();
    for l in 0..lines {
        if l % 12 == 11 {
            s.push('\n');
            continue;
        }
        let words = 4 + rng.below(9);
        s.push_str(if rng.below(4) == 0 { "  // " } else { "  " });
        for _ in 0..words {
            s.push_str(word(rng, vocab));
            s.push(' ');
        }
        s.push_str(";\n");
    }
    s
}

/// The tree from a real checkout's text files (`RUNG_BENCH_CONTEXT_FROM=DIR`), copied round
/// until there are `files`, each copy with a line of its own so no two are equal.
fn from_checkout(ws: &Path, from: &Path, files: usize) -> u64 {
    let mut texts = Vec::new();
    for e in ignore::WalkBuilder::new(from).build().flatten() {
        if e.file_type().is_some_and(|t| t.is_file())
            && let Ok(t) = std::fs::read_to_string(e.path())
        {
            let name = e.path().file_name().unwrap().to_string_lossy().into_owned();
            texts.push((name, t));
        }
    }
    assert!(!texts.is_empty(), "no text files in {}", from.display());
    let mut bytes = 0;
    for i in 0..files {
        let (name, text) = &texts[i % texts.len()];
        let dir = ws.join(format!("context/lib/copy{:02}/part{:03}", i / texts.len(), (i % texts.len()) / 50));
        std::fs::create_dir_all(&dir).unwrap();
        let text = format!("{text}\n// copy {i}\n");
        bytes += text.len() as u64;
        std::fs::write(dir.join(format!("{i}-{name}")), text).unwrap();
    }
    bytes
}

fn generate(ws: &Path, files: usize) -> u64 {
    if let Some(from) = std::env::var_os("RUNG_BENCH_CONTEXT_FROM") {
        return from_checkout(ws, Path::new(&from), files);
    }
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let vocab = vocabulary(&mut rng);
    let mut bytes = 0;
    for i in 0..files {
        let dir = ws.join(format!("context/lib/include/part{:03}/sub{:02}", i / 200, (i / 10) % 20));
        std::fs::create_dir_all(&dir).unwrap();
        let ext = if i % 10 == 0 { "md" } else { "hpp" };
        let text = file_text(&mut rng, &vocab);
        bytes += text.len() as u64;
        std::fs::write(dir.join(format!("file{i}.{ext}")), text).unwrap();
    }
    bytes
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn ms(d: Duration) -> String {
    format!("{:.1} ms", d.as_secs_f64() * 1000.0)
}

fn main() {
    let files: usize = std::env::args().skip(1).find_map(|a| a.parse().ok()).unwrap_or(20_000);
    let tmp = tempfile::tempdir().unwrap();
    let ws = tmp.path();
    let state = ws.join(".rung");
    let t = Instant::now();
    let bytes = generate(ws, files);
    eprintln!("generated {files} files ({:.1} MB) in {:.1} s", bytes as f64 / 1e6, t.elapsed().as_secs_f64());

    let t = Instant::now();
    let first = context::refresh(ws, &state).unwrap();
    let build = t.elapsed();
    assert!(first.read > files / 2, "{first:?}");
    let (held, db) = context::Index::open(&state).unwrap().holdings().unwrap();
    let passages: usize = held.iter().filter(|h| h.top != "rung").map(|h| h.passages).sum();

    let t = Instant::now();
    let same = context::refresh(ws, &state).unwrap();
    let nothing = t.elapsed();
    assert_eq!(same.read, 0);

    let mut one = Vec::new();
    let f = ignore::WalkBuilder::new(ws.join("context"))
        .build()
        .flatten()
        .find(|e| e.file_type().is_some_and(|t| t.is_file()))
        .unwrap()
        .into_path();
    for round in 0..5 {
        std::fs::write(&f, format!("  tma_multicast_epilogue_{round} appears here now;\n")).unwrap();
        let t = Instant::now();
        let u = context::refresh(ws, &state).unwrap();
        one.push(t.elapsed());
        assert_eq!((u.read, u.dropped), (1, 0));
    }

    let queries = [
        "tma multicast",
        "swizzle smem layout",
        "epilogue store",
        "gemm pipeline stage barrier",
        "bulk_async_17",
        "arrive wait cluster",
        "partition copy atom",
        "sm90 mma tile",
        "load_store_4242 rank",
        "cute layout stride",
        "use stmatrix in the epilogue and keep the accumulators in registers",
        "template",
    ];
    let index = context::Index::open(&state).unwrap();
    let mut slowest = (Duration::ZERO, "");
    let mut query_only = Vec::new();
    let mut search = Vec::new();
    for _ in 0..5 {
        for q in queries {
            let t = Instant::now();
            let found = index.query(ws, q, 8, 2000).unwrap();
            let took = t.elapsed();
            query_only.push(took);
            if took > slowest.0 {
                slowest = (took, q);
            }
            if found.is_empty() {
                eprintln!("nothing found for `{q}`");
            }
            let t = Instant::now();
            context::search(ws, &state, q, 8, 2000).unwrap();
            search.push(t.elapsed());
        }
    }
    // The champion lists against FTS5 scoring every passage: how many of the exact best 8 the
    // query returns, how their scores compare, and what the exact ranking costs.
    let (mut same, mut of, mut worst) = (0, 0, f64::INFINITY);
    let mut exact_took = Vec::new();
    for q in queries {
        let fast = index.query(ws, q, 8, usize::MAX / 8).unwrap();
        let t = Instant::now();
        let exact = index.query_ranked(ws, q, 8, usize::MAX / 8, true).unwrap();
        exact_took.push(t.elapsed());
        let n = exact.iter().filter(|p| fast.iter().any(|f| (&f.path, f.line) == (&p.path, p.line))).count();
        let sum = |v: &[context::Passage]| v.iter().map(|p| p.score).sum::<f64>();
        let ratio = sum(&fast) / sum(&exact);
        eprintln!(
            "`{q}`: {n} of the exact best {} returned, their scores {:.2}% of the exact best's",
            exact.len(),
            ratio * 100.0
        );
        (same, of, worst) = (same + n, of + exact.len(), worst.min(ratio));
    }
    println!("| what | figure |\n| --- | ---: |");
    println!("| files / text | {files} / {:.1} MB |", bytes as f64 / 1e6);
    println!("| passages | {passages} |");
    println!("| first build (walk, read, cut, insert) | {:.1} s |", build.as_secs_f64());
    println!("| index on disk | {:.1} MB |", db as f64 / 1e6);
    println!("| update, nothing changed (walk and stat) | {} |", ms(nothing));
    println!("| update after one file changed (median of 5) | {} |", ms(median(one)));
    println!("| query, index up to date (median of 60) | {} |", ms(median(query_only)));
    println!("| slowest query | {} (`{}`) |", ms(slowest.0), slowest.1);
    println!("| search as the agent calls it: update, then query (median of 60) | {} |", ms(median(search)));
    println!("| FTS5 scoring every passage instead (median of 12) | {} |", ms(median(exact_took)));
    println!("| the exact best 8 returned (all 12 queries) | {same} of {of} |");
    println!("| returned scores against the exact best's (summed, worst query) | {:.2}% |", worst * 100.0);
}
