//! clef's engine: a table of rules (SPEC §4) loaded and compiled once, and decisions made with
//! it. A decision parses a JSON object ([`input`]), evaluates the table's compiled conditions
//! ([`expr`]) first-match, pruned by an index ([`table::index`]), and answers with data: the
//! rule that chose, its action, warnings and, when asked, the trace ([`table::Decision`]).
//!
//! This crate knows nothing of serving: no HTTP, snapshots, router, metrics or configuration.
//! The `clef` crate renders its answers and serves them; an import the other way does not
//! compile.

#![warn(missing_docs)]

pub mod authz;
pub mod diagnostic;
pub mod diff;
pub mod expr;
pub mod files;
pub mod input;
pub mod suggest;
pub mod table;
pub mod yaml;
