//! rung's core: workspace, stages, runners, scheduler, store and agent. Nothing here depends on
//! a terminal UI; the CLI, the TUI and the MCP server are thin shells over it.

pub mod diag;
pub mod dtype;
pub mod expr;
pub mod launch;
pub mod spec;
pub mod workspace;
