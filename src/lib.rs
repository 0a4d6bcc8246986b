//! rung's shells over the core (`rung-core`): the MCP server that offers the agent crate's verbs,
//! and the self-test.
//! The CLI is the binary's (`main.rs`), the TUI the crate `rung-tui`. Every core module is
//! re-exported here at its own name (`rung::check`, `rung::store`), and the agent crate as
//! `rung::agent` and `rung::verbs`, so the shells and the tests name one crate.

pub use rung_core::*;

pub use rung_agent as agent;
pub use rung_agent::verbs;
pub mod mcp;
pub mod selftest;
