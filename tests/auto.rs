//! Auto mode against a scripted provider: the loopback server answers three times, with a
//! version that is wrong, then one that is correct but slower than the parent, then a faster
//! one. Each proposal is written as `vNNN-agent-<slug>.py` and climbs the real rungs here
//! (build, run and check in Triton's interpreter); the test asserts which parent each next
//! request carries, that each rejection's reason is in the next request's body, and that auto
//! mode stops on its speedup target after the third.
//!
//! CI has no GPU, so the bench rung does not run here: the medians that rank the slower and the
//! faster version are given by the test (the climb adds them to the real check's measure). On a
//! GPU the same loop ranks by the bench rung itself: `rung selftest --gpu --only auto`.

use std::collections::HashMap;
use std::path::Path;

use rung::agent::auto::{self, Measure, Target};
use rung::agent::config::AgentConfig;
use rung::agent::{Agent, Cancel, ChatStore, NoTools};
use rung::check::{CheckOptions, Machine};
use rung::store::{Status, Store};
use rung::workspace::Workspace;

mod common;

use common::loopback::{Reply, Server, openai_text};

/// A Triton vector add whose stored value is `expr` and whose block is `block`.
fn triton(expr: &str, block: u32) -> String {
    format!(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef vector_add_kernel(a_ptr, b_ptr, out_ptr, n, BLOCK: tl.constexpr):\n    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    mask = offs < n\n    a = tl.load(a_ptr + offs, mask=mask)\n    b = tl.load(b_ptr + offs, mask=mask)\n    tl.store(out_ptr + offs, {expr}, mask=mask)\n\n\ndef run(a, b, out, n):\n    BLOCK = {block}\n    vector_add_kernel[(triton.cdiv(n, BLOCK),)](a, b, out, n, BLOCK=BLOCK)\n"
    )
}

fn reply(name: &str, why: &str, source: &str) -> Reply {
    let text = format!("name: {name}\n\n{why}\n\n```python\n{source}```\n\nThis should help.");
    Reply::stream(&openai_text(&text), &[])
}

/// The options of every climb here: a fixed seed, no bench (CI has no GPU).
fn interpreter_only() -> CheckOptions {
    CheckOptions { versions: vec![], seed: Some(7), no_bench: true }
}

fn agent(ws: &Path, server: &Server) -> Agent {
    let text = format!(
        "[agent]\nprovider = \"local\"\n\n[agent.providers.local]\nkind = \"openai\"\nbase_url = \"{}/v1\"\nmodel = \"m\"\nretries = 0\n",
        server.url
    );
    let cfg = AgentConfig::parse(&text, &ws.join("agent.toml")).unwrap();
    Agent::new(cfg, None, None).unwrap()
}

#[test]
fn auto_mode_rejects_the_wrong_and_the_slower_builds_on_the_faster_and_stops_at_its_target() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = common::new_workspace("vector-add");
    let server = Server::start(vec![
        reply("subtract", "A first try.", &triton("a - b", 1024)),
        reply("small blocks", "Smaller blocks for more parallelism.", &triton("a + b", 256)),
        reply("big blocks", "Bigger blocks, fewer programs.", &triton("a + b", 4096)),
    ]);
    let agent = agent(&ws, &server);
    let machine = Machine::discover();
    // The GPU's part, which CI lacks: medians by the proposal's name (ms).
    let medians: HashMap<&str, f64> = [("v003-triton", 0.010), ("small-blocks", 0.012), ("big-blocks", 0.006)].into();
    let mut climbed = Vec::new();
    let mut runners = None;
    let mut climb = |id: &str| -> Result<Measure, auto::ClimbError> {
        let (mut m, v) = auto::climb_here(&ws, id, &interpreter_only(), &machine, &mut runners)?;
        let name = v.path.file_stem().unwrap().to_string_lossy().to_string();
        m.median_ms = medians.iter().find(|(k, _)| name.ends_with(*k)).map(|(_, t)| *t).filter(|_| m.checked);
        climbed.push((id.to_string(), name));
        Ok(m)
    };
    let mut start = climb("v003").unwrap();
    assert!(start.checked, "the template's Triton version passes in the interpreter: {start:?}");
    start.median_ms = Some(0.010);
    let mut conv = agent.conversation(Some(&ChatStore::for_workspace(&ws))).unwrap();
    let mut log = Vec::new();
    let end = auto::run(
        auto::Session { root: &ws, agent: &agent, conv: &mut conv, tools: &NoTools },
        Target { speedup: Some(1.5), max_versions: Some(10), ..Target::default() },
        (Some(start), "v003 as given".into()),
        &Cancel::new(),
        &mut climb,
        &mut |ev| {
            if let auto::AutoEvent::Log(l) = ev {
                log.push(l.to_string());
            }
        },
    );
    assert_eq!(
        climbed.iter().map(|(id, n)| format!("{id} {n}")).collect::<Vec<_>>(),
        ["v003 v003-triton", "v004 v004-agent-subtract", "v005 v005-agent-small-blocks", "v006 v006-agent-big-blocks"]
    );
    assert_eq!(end.why, "target reached: v006 is 1.67x faster than v003 (target 1.5x)", "{log:#?}");
    assert_eq!(end.parent.as_deref(), Some("v006"));

    // Which parent each request carried, and the rejection reasons that reached the next one.
    let reqs = server.requests();
    assert_eq!(reqs.len(), 3, "it stops once the target is reached: no fourth request");
    let system = |i: usize| reqs[i].body["messages"][0]["content"].as_str().unwrap().to_string();
    let last_user = |i: usize| {
        let msgs = reqs[i].body["messages"].as_array().unwrap();
        msgs.iter().rev().find(|m| m["role"] == "user").unwrap()["content"].as_str().unwrap().to_string()
    };
    for i in 0..3 {
        assert!(
            system(i).contains("## The version in focus: v003 (versions/v003-triton.py"),
            "request {i}: {}",
            system(i)
        );
    }
    assert!(!system(0).contains("Rejected versions"), "nothing is rejected before the first reply");
    assert!(last_user(0).starts_with("Propose a faster version of v003"), "{}", last_user(0));
    let body1 = reqs[1].body.to_string();
    assert!(body1.contains("- v004: auto: check fail"), "v004's reason in the second request: {}", system(1));
    assert!(last_user(1).starts_with("v004 was rejected: check fail"), "{}", last_user(1));
    assert!(
        system(2).contains("- v005: auto: passes but is not faster than v003: 12.00 µs against 10.00 µs"),
        "{}",
        system(2)
    );
    assert!(system(2).contains("- v004: auto: check fail"), "earlier reasons stay");

    // The history: parents, statuses, the prompt and reply beside each proposal.
    let w = Workspace::open(&ws).unwrap();
    let store = Store::open(&w.state_dir()).unwrap();
    let row = |id: &str| store.version(id).unwrap().unwrap();
    assert_eq!((row("v004").status, row("v004").parent.as_deref()), (Status::Rejected, Some("v003")));
    assert_eq!((row("v005").status, row("v005").parent.as_deref()), (Status::Rejected, Some("v003")));
    assert_eq!((row("v006").status, row("v006").parent.as_deref()), (Status::Proposed, Some("v003")));
    let record = rung::agent::propose::record_of(&w.state_dir(), "v006").unwrap();
    assert!(record.reply.starts_with("name: big blocks") && record.request.contains("v005 was rejected"));
    assert!(record.system.contains("The version in focus: v003"));
    assert_eq!(
        std::fs::read_to_string(ws.join("versions/v006-agent-big-blocks.py")).unwrap(),
        triton("a + b", 4096),
        "the file is the reply's block, byte for byte"
    );
    // The log says why at every step, and the conversation keeps it.
    assert!(log[1].starts_with("v004: check fail") && log[1].ends_with("rejected; the parent stays v003"), "{log:#?}");
    assert!(log[2].contains("not faster than v003"), "{log:#?}");
    assert!(log[3].starts_with("v006: passes at 6.00 µs, 1.67x faster than v003"), "{log:#?}");
    let saved = std::fs::read_to_string(conv.path.as_ref().unwrap()).unwrap();
    assert!(saved.contains("auto: stopped: target reached"), "the log is in the saved conversation");
}

/// A reply without code is logged and asked again; the version budget stops it.
#[test]
fn auto_mode_stops_when_its_version_budget_is_spent() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = common::new_workspace("vector-add");
    let server = Server::start(vec![
        Reply::stream(&openai_text("I would need to see the profile first."), &[]),
        reply("same", "Same again.", &triton("a + b", 1024)),
    ]);
    let agent = agent(&ws, &server);
    let machine = Machine::discover();
    let mut runners = None;
    let mut climb = |id: &str| auto::climb_here(&ws, id, &interpreter_only(), &machine, &mut runners).map(|(m, _)| m);
    let mut conv = agent.conversation(None).unwrap();
    let mut log = Vec::new();
    let end = auto::run(
        auto::Session { root: &ws, agent: &agent, conv: &mut conv, tools: &NoTools },
        Target { max_versions: Some(1), ..Target::default() },
        (None, "nothing".into()),
        &Cancel::new(),
        &mut climb,
        &mut |ev| {
            if let auto::AutoEvent::Log(l) = ev {
                log.push(l.to_string());
            }
        },
    );
    assert_eq!(end.why, "budget spent: 1 versions proposed (limit 1)", "{log:#?}");
    assert_eq!(log[1], "the reply has no code block (1 in a row)");
    assert!(
        log[2].starts_with("v004: passes (passes its check, no timing here); there is no parent to beat"),
        "{log:#?}"
    );
    assert_eq!(server.requests().len(), 2);
    // With nothing to beat and no GPU to time it, a passing version is the next parent.
    assert_eq!(end.parent.as_deref(), Some("v004"));
    let first = server.requests()[1].body["messages"][0]["content"].as_str().unwrap().to_string();
    assert!(first.contains("No version in focus"), "the first proposal starts from the task: {first}");
}

/// The parent's results in the prompt include what its build left: each kernel's ptxas
/// resources and the first instructions of its SASS.
#[test]
fn the_prompt_carries_the_parent_s_resources_and_a_sass_excerpt() {
    if !common::toolchain_here() {
        return;
    }
    let (_tmp, ws) = common::new_workspace("vector-add");
    let w = Workspace::open(&ws).unwrap();
    let mut store = Store::open(&w.state_dir()).unwrap();
    let opts = CheckOptions { versions: vec!["v001".into()], seed: Some(1), no_bench: true };
    let report = rung::check::check_on(&w, &mut store, &opts, &Machine::discover()).unwrap();
    assert_eq!(
        report.versions[0].stage(rung::model::report::Stage::Build).unwrap().verdict,
        rung::model::report::Verdict::Pass
    );
    let prompt = rung::agent::prompt::workspace_context(&ws, Some("v001"), "");
    let res = prompt.find("### Its kernels' resources (ptxas)").expect("resources");
    assert!(prompt[res..].contains("- vector_add: ") && prompt[res..].contains(" registers, "), "{prompt}");
    let sass = prompt.find("### Its SASS, kernel vector_add").expect("a SASS excerpt");
    let block = &prompt[sass..];
    assert!(block.contains("```sass\n") && block.contains("EXIT"), "{block}");
}
