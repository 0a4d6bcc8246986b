//! rung's shells over the core (`rung-core`): the verbs an agent calls, the chat agent and the MCP
//! server that offer them, and the self-test.
//! The CLI and the TUI are the binary's (`main.rs`). Every core module is re-exported here at
//! its own name (`rung::check`, `rung::store`), so the shells and the tests name one crate.

pub use rung_core::*;

pub mod agent;
pub mod mcp;
pub mod selftest;
pub mod verbs;
