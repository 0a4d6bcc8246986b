//! The rungs. Each stage takes a version (and what earlier stages produced) and returns a typed
//! [`crate::report::StageResult`]; later stages run only when earlier ones pass.

pub mod bench;
pub mod build;
pub mod prepare;
pub mod profile;
pub mod run;
