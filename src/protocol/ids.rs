//! The protocol's identifiers as types of their own: a task id cannot be passed where a
//! context id belongs. Each is the text the peer or the gateway chose, unchanged on the wire
//! (`#[serde(transparent)]`), and read as `&str` at the store and log seams.

/// A text id as a type of its own, held in `$inner` (`String`, or `Arc<str>` for an id many
/// requests share). Used here for the protocol's ids and by the store for a peer's.
macro_rules! text_id {
    ($(#[$doc:meta])* $name:ident($inner:ty)) => {
        $(#[$doc])*
        #[derive(
            Clone, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord,
            serde::Serialize, serde::Deserialize,
        )]
        #[serde(transparent)]
        pub struct $name($inner);

        impl $name {
            /// The id as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl From<String> for $name {
            fn from(text: String) -> Self {
                Self(text.into())
            }
        }

        impl From<&str> for $name {
            fn from(text: &str) -> Self {
                Self(text.into())
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
                self.as_str() == other
            }
        }

        impl PartialEq<&str> for $name {
            fn eq(&self, other: &&str) -> bool {
                self.as_str() == *other
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(&self.0)
            }
        }
    };
}
pub(crate) use text_id;

text_id! {
    /// A task's id (`Task.id`, `taskId`): the gateway's own, never the agent's behind it.
    TaskId(String)
}

text_id! {
    /// A conversation's id (`contextId`).
    ContextId(String)
}

text_id! {
    /// A message's id (`messageId`), chosen by its sender.
    MessageId(String)
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
