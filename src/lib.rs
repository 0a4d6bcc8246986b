//! rung's core: workspace, stages, runners, scheduler, store and agent. Nothing here depends on
//! a terminal UI; the CLI, the TUI and the MCP server are thin shells over it.

pub mod agent;
pub mod asm;
pub mod check;
pub mod context;
pub mod devstate;
pub mod diag;
pub mod dtype;
pub mod exit;
pub mod expr;
pub mod gpu;
pub mod gpulock;
pub mod highlight;
pub mod hostentry;
pub mod inputs;
pub mod launch;
pub mod mcp;
pub mod metrics;
pub mod nvrtc;
pub mod parsers;
pub mod profile;
pub mod protocol;
pub mod remote;
pub mod report;
pub mod runners;
pub mod selftest;
pub mod setup;
pub mod spec;
pub mod stages;
pub mod stats;
pub mod store;
pub mod templates;
pub mod toolchain;
pub mod watch;
pub mod worker;
pub mod workspace;
