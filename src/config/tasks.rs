//! `[tasks]`: how long tasks are kept and how much of a context the model sees.

use super::{Invalid, invalid};
use serde::Deserialize;

/// `[tasks]`
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TasksPolicy {
    /// How long a task stays readable with `GetTask`.
    #[serde(default = "default_retention_hours")]
    pub retention_hours: u32,
    /// How many earlier messages of a context go to the model.
    #[serde(default = "default_context_messages")]
    pub context_messages: u32,
    /// Longest message text passed on; longer text is cut and marked.
    #[serde(default = "default_max_text_bytes")]
    pub max_text_bytes: usize,
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

fn default_retention_hours() -> u32 {
    24
}
fn default_context_messages() -> u32 {
    20
}
fn default_max_text_bytes() -> usize {
    65_536
}

impl TasksPolicy {
    pub(super) fn validate(&self) -> Result<(), Invalid> {
        if !(1..=24 * 365).contains(&self.retention_hours) {
            return Err(invalid(
                "tasks.retention_hours",
                "must be between 1 and 8760",
            ));
        }
        if self.context_messages > 200 {
            return Err(invalid("tasks.context_messages", "must be at most 200"));
        }
        if !(1024..=1024 * 1024).contains(&self.max_text_bytes) {
            return Err(invalid(
                "tasks.max_text_bytes",
                "must be between 1024 and 1048576",
            ));
        }
        Ok(())
    }
}
