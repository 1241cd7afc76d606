//! `[tasks]`: how long tasks are kept and how much of a context the model sees.

use crate::units::Bounded;
use serde::Deserialize;

/// `[tasks]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksPolicy {
    /// How long a task stays readable with `GetTask`.
    #[serde(default = "default_retention_hours")]
    pub retention_hours: Bounded<1, 8760>,
    /// How many earlier messages of a context go to the model.
    #[serde(default = "default_context_messages")]
    pub context_messages: Bounded<0, 200>,
    /// Longest message text passed on; longer text is cut and marked.
    #[serde(default = "default_max_text_bytes")]
    pub max_text_bytes: Bounded<1024, 1_048_576>,
    /// What a model backend does with file and URL parts, which it does not read.
    #[serde(default)]
    pub unread_parts: UnreadParts,
}

/// `tasks.unread_parts`: what a model backend does with the parts of a message it does not
/// read (files and URLs; an agent behind the door gets every part).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UnreadParts {
    /// Answers what it read, and says which parts it did not read (the task's metadata, the
    /// access log).
    #[default]
    Tell,
    /// Refuses the message with -32005, naming the first part it would not read.
    Refuse,
}

impl Default for TasksPolicy {
    fn default() -> Self {
        Self {
            retention_hours: default_retention_hours(),
            context_messages: default_context_messages(),
            max_text_bytes: default_max_text_bytes(),
            unread_parts: UnreadParts::default(),
        }
    }
}

fn default_retention_hours() -> Bounded<1, 8760> {
    const { Bounded::of(24) }
}
fn default_context_messages() -> Bounded<0, 200> {
    const { Bounded::of(20) }
}
fn default_max_text_bytes() -> Bounded<1024, 1_048_576> {
    const { Bounded::of(65_536) }
}
