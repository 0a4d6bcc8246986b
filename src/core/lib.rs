//! rung's core: workspace, stages, runners, workers' host side, store and watcher. Nothing here
//! depends on a terminal UI or a command line: the CLI, the TUI, the MCP server and the agent are
//! shells over it (the `rung` crate), and it stands on the model (`rung-model`), never the
//! other way round.

pub mod asm;
pub mod assets;
pub mod check;
pub mod context;
pub mod cupti;
pub mod devstate;
pub use model::diag;
pub use model::dtype;
pub mod exit;
pub mod expr;
pub mod gpu;
pub mod gpulock;
pub mod highlight;
pub mod hostentry;
pub mod inputs;
pub mod kept;
pub mod launch;
pub mod metrics;
pub use rung_model as model;
pub mod nvrtc;
pub mod parsers;
pub mod profile;
pub mod pyprobe;
pub mod remote;
pub mod runners;
pub mod sandbox;
pub mod service;
pub mod setup;
pub mod slurm;
pub mod spec;
pub mod stages;
pub mod stats;
pub mod store;
pub mod templates;
pub mod tomlfile;
pub mod toolchain;
pub mod trace;
pub mod userconfig;
pub mod watch;
pub mod worker;
pub mod workspace;
