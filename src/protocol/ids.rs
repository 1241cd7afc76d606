//! The protocol's identifiers as types of their own: a task id cannot be passed where a
//! context id belongs. Each is the text the peer or the gateway chose, unchanged on the wire
//! (`#[serde(transparent)]`), and read as `&str` at the store and log seams.

use serde::{Deserialize, Serialize};
use std::fmt;

macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The id's text, owned.
            pub fn into_string(self) -> String {
                self.0
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                Self(text)
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                Self(text.to_owned())
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }

        impl std::ops::Deref for $name {
            type Target = str;
            fn deref(&self) -> &str {
                &self.0
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl PartialEq<str> for $name {
            fn eq(&self, other: &str) -> bool {
                self.0 == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.0 == *other
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}

text_id! {
    /// A task's id (`Task.id`, `taskId`): the gateway's own, never the agent's behind it.
    TaskId
}

text_id! {
    /// A conversation's id (`contextId`).
    ContextId
}

text_id! {
    /// A message's id (`messageId`), chosen by its sender.
    MessageId
}

impl MessageId {
    /// A fresh id for a message the gateway writes (a random UUID).
    pub fn new_random() -> Self {
        Self(uuid::Uuid::new_v4().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_their_text_on_the_wire() {
        let id: TaskId = serde_json::from_str(r#""t-1""#).unwrap();
        assert_eq!(id, "t-1");
        assert_eq!(serde_json::to_string(&id).unwrap(), r#""t-1""#);
        assert!(serde_json::from_str::<ContextId>("7").is_err());
    }
}
