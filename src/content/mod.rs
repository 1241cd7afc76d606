//! The content guard's rules (docs/content-guard.md), pure: what a partner sends and what the
//! agent answers, read as A2A (text, data's strings, a file's name, type, size and, within a
//! bound, its text), against named, versioned rule packs: patterns on the `regex` crate's
//! linear-time engines within size limits, literal sets on Aho-Corasick, checksummed
//! detectors, and part rules. A rule's match passes, records, masks (`[masked:<rule>]`) or
//! denies; the verdict names rules, never what matched. The call pipeline's *inspect*
//! stages and the agent apply it (`crate::a2a::inspect`).

mod a2a;
mod compile;
pub mod detectors;
mod scan;
pub mod settings;
mod starter;
pub mod stream;
#[cfg(test)]
mod tests;

pub use compile::{ContentRules, RuleError};
pub use scan::{Collected, Finding, Inspection, Replacements, Verdict, marker};
pub use settings::{Action, ContentGuardSettings, Direction, FailureMode};
