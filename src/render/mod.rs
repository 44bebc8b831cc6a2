//! How agentrun looks to a person: colour (only on a terminal), the `runs list`
//! table, and the `runs show` transcript (text cutting and folding is
//! [`crate::text`], which the layers below use too).
//!
//! Everything here returns strings; the command layer decides where they go, so the
//! renderers are tested without a terminal.

pub mod handover;
pub mod style;
pub mod summary;
pub mod table;
pub mod transcript;

pub use style::Style;
