//! What each stage reports: the detail types of the check report's stage results, apart from
//! the stages that fill them, so that the report (and everything that reads it: the CLI, the
//! TUI, the MCP server) depends on data only, never on a stage.

pub mod aot;
pub mod bench;
pub mod build;
pub mod diag;
pub mod dtype;
pub mod judged;
pub mod metrics;
pub mod profile;
pub mod protocol;
pub mod report;
pub mod run;
pub mod sizes;
pub mod trace;
pub mod verdict;
pub mod version;
