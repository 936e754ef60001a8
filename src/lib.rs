//! clef: a decision appliance for edge boxes.
//!
//! A table of rules (SPEC §4) is loaded and compiled once; each decision
//! parses a JSON object, evaluates rules first-match (pruned by an index), and
//! returns the action with the rule that chose it. See `SPEC.md` for the contract.

#![warn(missing_docs)]

// The engine's modules, under the names the rest of clef (and its tests, benches and fuzz
// targets) use for them.
pub use clef_engine::{authz, diagnostic, diff, expr, files, input, suggest, table, yaml};

pub mod cli;
pub mod config;
pub mod decide;
pub mod http1;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod per_core;
pub mod registry;
pub mod render;
pub mod replay;
pub mod router;
pub mod server;
pub mod snapshot;
pub mod state_file;
pub mod tuning;
