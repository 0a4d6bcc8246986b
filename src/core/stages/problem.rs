//! What the GPU MODE and KernelBench paths of the run and bench stages share: task.yml, and the
//! seeds rung draws for a problem's tests.

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use crate::diag::{Diagnostic, Pos};

/// The tests of a GPU MODE task.yml (`tests:` and `benchmarks:` lists of argument maps).
#[derive(Debug, Clone, Default, Deserialize)]
pub struct TaskYml {
    #[serde(default)]
    pub tests: Vec<BTreeMap<String, serde_json::Value>>,
    #[serde(default)]
    pub benchmarks: Vec<BTreeMap<String, serde_json::Value>>,
}

/// Reads a GPU MODE task.yml. Errors name the file, the line and the fix.
pub fn read_task_yml(path: &Path) -> Result<TaskYml, Diagnostic> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| Diagnostic::error(path, Pos::WHOLE_FILE, format!("cannot read: {e}")))?;
    serde_norway::from_str::<TaskYml>(&text).map_err(|e| {
        let pos = e.location().map(|l| Pos::new(l.line() as u32, l.column() as u32)).unwrap_or(Pos::WHOLE_FILE);
        Diagnostic::error(path, pos, format!("task.yml does not parse: {e}")).with_help(
            "tests and benchmarks are lists of argument maps, e.g. `tests:\\n  - {\"size\": 1024, \"seed\": 4242}`",
        )
    })
}

/// Seeds for a problem's tests are drawn below this: ten times the largest seed its file names,
/// at least 2^16, at most 2^31.
pub fn problem_seed_range(tests: &[(BTreeMap<String, serde_json::Value>, usize, bool)]) -> u64 {
    let largest = tests.iter().filter_map(|(a, _, _)| a.get("seed").and_then(|s| s.as_u64())).max().unwrap_or(0);
    largest.saturating_mul(10).clamp(1 << 16, 1 << 31)
}

/// Distinct seeds in `1..range`, drawn from the check's seed (splitmix64), so a check's seed
/// reproduces them.
pub struct SeedDraw {
    state: u64,
    range: u64,
    used: std::collections::BTreeSet<u64>,
}

impl SeedDraw {
    pub fn new(seed: u64, range: u64) -> SeedDraw {
        SeedDraw { state: seed, range: range.max(2), used: Default::default() }
    }

    pub fn draw(&mut self) -> u64 {
        loop {
            self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = self.state;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^= z >> 31;
            let s = 1 + z % (self.range - 1);
            if self.used.insert(s) || self.used.len() as u64 >= self.range - 1 {
                return s;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn problem_seeds_are_distinct_reproducible_and_in_the_files_range() {
        let tests = vec![(BTreeMap::from([("seed".to_string(), serde_json::json!(4242))]), 2, false)];
        assert_eq!(problem_seed_range(&tests), 65_536, "at least 2^16");
        let big = vec![(BTreeMap::from([("seed".to_string(), serde_json::json!(93_246))]), 2, false)];
        assert_eq!(problem_seed_range(&big), 932_460);
        let draw = |seed| {
            let mut d = SeedDraw::new(seed, 65_536);
            (0..200).map(|_| d.draw()).collect::<Vec<_>>()
        };
        let a = draw(7);
        assert_eq!(a, draw(7), "the check's seed reproduces its inputs");
        assert_ne!(a, draw(8));
        assert!(a.iter().all(|s| (1..65_536).contains(s)));
        let unique: std::collections::BTreeSet<_> = a.iter().collect();
        assert_eq!(unique.len(), a.len());
    }
}
