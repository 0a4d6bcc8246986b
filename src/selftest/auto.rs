//! The GPU suite's auto-mode rows: a scripted agent climbing the demo.

use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::check::{CheckOptions, Machine, check_with};
use crate::store::Store;
use crate::workspace::Workspace;

/// The scripted agent behind `rung internal-scripted-agent DIR`: the prompt from standard input
/// kept as `DIR/request-N.txt`, the reply `DIR/reply-N.md` printed, N counting from 1.
pub fn scripted_agent(dir: &Path) -> i32 {
    use std::io::Read;
    let mut prompt = String::new();
    if let Err(e) = std::io::stdin().read_to_string(&mut prompt) {
        eprintln!("rung internal-scripted-agent: reading the prompt: {e}");
        return crate::exit::INTERNAL;
    }
    let n = (1..).find(|n| !dir.join(format!("request-{n}.txt")).exists()).unwrap_or(1);
    if let Err(e) = std::fs::write(dir.join(format!("request-{n}.txt")), &prompt) {
        eprintln!("rung internal-scripted-agent: {}: {e}", dir.display());
        return crate::exit::INTERNAL;
    }
    match std::fs::read_to_string(dir.join(format!("reply-{n}.md"))) {
        Ok(reply) => {
            print!("{reply}");
            crate::exit::OK
        }
        Err(e) => {
            eprintln!("rung internal-scripted-agent: no reply-{n}.md in {}: {e}", dir.display());
            crate::exit::INTERNAL
        }
    }
}

/// One step of auto mode on the GPU.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct AutoStepRun {
    /// The proposal's id, and what the script sent (`wrong`, `slower`, `faster`).
    pub version: String,
    pub script: String,
    /// The version the request for it put in focus.
    pub parent_in_request: Option<String>,
    /// What its rungs measured, and what auto mode made of it.
    pub measured: String,
    pub decision: String,
    pub ok: bool,
    pub expected: String,
}

/// Auto mode with real rungs: the demo's v002 checked and benched as the start, then a scripted
/// agent (this binary as a `command` provider) that proposes a wrong version (v003 off by 1%),
/// a slower one (v001's one thread per row) and a faster one (v005); the bench ranks them. It
/// must reject the first two with their reasons, build on the third and stop at its 1.5x target.
pub fn run_auto(dir: &Path, exe: &Path) -> anyhow::Result<(Vec<AutoStepRun>, String)> {
    use crate::agent::auto::{self, Measure, Target};
    let machine = Machine::discover();
    let demo = dir.join("demo");
    crate::templates::write("rmsnorm", &demo)?;
    let script = dir.join("script");
    std::fs::create_dir_all(&script)?;
    let read = |name: &str| std::fs::read_to_string(demo.join("versions").join(name));
    let wrong = read("v003-float4-registers.cu")?.replace("inv_cols + eps)", "inv_cols + eps) * 1.01f");
    let replies = [
        ("wrong", "scaled rsqrt", wrong),
        ("slower", "one thread per row", read("v001-naive.cu")?),
        ("faster", "float4 loads no cache hints", read("v005-float4-no-cache-hints.cu")?),
    ];
    for (i, (_, name, src)) in replies.iter().enumerate() {
        std::fs::write(script.join(format!("reply-{}.md", i + 1)), format!("name: {name}\n\n```cuda\n{src}```\n"))?;
    }
    let ws = Workspace::open(&demo)?;
    let mut store = Store::open(&ws.state_dir())?;
    let mut runners = None;
    let opts = CheckOptions { versions: vec!["v002".into()], ..Default::default() };
    let report = check_with(&ws, &mut store, &opts, &machine, &mut runners)?;
    let start = Measure::of_report(&report.versions[0]);
    anyhow::ensure!(start.median_ms.is_some(), "v002 did not bench: {}", start.describe());
    drop(store);
    let cfg = format!(
        "[agent]\nprovider = \"script\"\n\n[agent.providers.script]\nkind = \"command\"\ncommand = [{:?}, \"internal-scripted-agent\", {:?}]\n",
        exe.display().to_string(),
        script.display().to_string()
    );
    let cfg = crate::agent::config::AgentConfig::parse(&cfg, &dir.join("agent.toml"))?;
    let agent = crate::agent::Agent::new(cfg, None, None)?;
    let mut conv = agent.conversation(Some(&crate::agent::ChatStore::for_workspace(&demo)))?;
    let mut climb =
        |id: &str| auto::climb_here(&demo, id, &CheckOptions::default(), &machine, &mut runners).map(|(m, _)| m);
    let why = format!("v002 ({})", start.describe());
    let end = auto::run(
        auto::Session { root: &demo, agent: &agent, conv: &mut conv, tools: &crate::agent::NoTools },
        Target { speedup: Some(1.5), max_versions: Some(6), ..Target::default() },
        (Some(start), why),
        &crate::agent::Cancel::new(),
        &mut climb,
        &mut |_| {},
    );
    let focus_of = |n: usize| {
        let text = std::fs::read_to_string(script.join(format!("request-{n}.txt"))).unwrap_or_default();
        let at = text.find("## The version in focus: ")?;
        text[at + 25..].split_whitespace().next().map(str::to_string)
    };
    let expected_parent = ["v002", "v002", "v002"];
    let mut out = Vec::new();
    for (i, (step, j)) in end.steps.iter().enumerate() {
        let kind = replies.get(i).map_or("extra", |r| r.0);
        let rec = Workspace::open(&demo)
            .ok()
            .and_then(|ws| Store::open(&ws.state_dir()).ok().and_then(|s| Measure::recorded(&ws, &s, step)));
        let parent = focus_of(i + 1);
        let (want, expected) = match kind {
            "wrong" => (j.reject.as_deref().is_some_and(|r| r.starts_with("auto: check fail")), "rejected: check fail"),
            "slower" => {
                (j.reject.as_deref().is_some_and(|r| r.contains("not faster than v002")), "rejected: not faster")
            }
            "faster" => (j.parent && end.why.starts_with("target reached"), "the next parent; target reached"),
            _ => (false, "no fourth proposal"),
        };
        out.push(AutoStepRun {
            version: step.clone(),
            script: kind.into(),
            parent_in_request: parent.clone(),
            measured: rec.map_or_else(|| "-".into(), |m| m.describe()),
            decision: j.why.clone(),
            ok: want && parent.as_deref() == expected_parent.get(i).copied(),
            expected: format!("{expected}; request carried {}", expected_parent.get(i).unwrap_or(&"-")),
        });
    }
    Ok((out, end.why))
}
