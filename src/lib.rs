//! clef: a decision appliance for edge boxes.
//!
//! A table of rules (SPEC §4) is loaded and compiled once; each decision
//! parses a JSON object, evaluates rules first-match (pruned by an index), and
//! returns the action with the rule that chose it. See `SPEC.md` for the contract.

#![warn(missing_docs)]

pub mod authz;
pub mod cli;
pub mod config;
pub mod decide;
pub mod diagnostic;
pub mod diff;
pub mod expr;
pub mod files;
pub mod input;
pub mod logging;
pub mod memory;
pub mod metrics;
pub mod per_core;
pub mod registry;
pub mod render;
pub mod router;
pub mod server;
pub mod snapshot;
pub mod state_file;
pub mod suggest;
pub mod table;
pub mod tuning;
pub mod yaml;
