//! The group commit's shape, shared by every engine: what one batch of exchanges writes.

use crate::clock::Timestamp;
use crate::store::{ConversationMessage, Exchange};
use std::collections::HashMap;

/// What one batch writes, shaped so that every multi-row upsert touches each row once:
///
/// - **one row per task**: a later exchange of the same task in the batch replaces an earlier
///   one (a working copy and its final state);
/// - **one row per context**: the batch's latest time for each (peer, context);
/// - **usage pre-aggregated**: tokens and requests summed per (owner, peer, day).
///
/// SQLite would accept repeated keys in one `INSERT … ON CONFLICT`; PostgreSQL refuses to
/// touch a row twice in one statement. Both engines write from this shape.
#[derive(Default)]
pub(crate) struct Batch<'a> {
    /// Each task's latest copy, with the time its first copy was made.
    pub(crate) tasks: Vec<(&'a Exchange, Timestamp)>,
    /// Each context's first and latest time.
    pub(crate) contexts: HashMap<(&'a str, &'a str), (Timestamp, Timestamp)>,
    /// Every conversation message the batch adds, with its exchange.
    pub(crate) messages: Vec<(&'a Exchange, &'a ConversationMessage)>,
    /// Tokens and requests per (owner, peer, day).
    pub(crate) usage: HashMap<(&'a str, &'a str, crate::clock::UtcDay), (u64, u64)>,
}

/// A conversation message's text as its `body` column holds it: U+0000 as U+2400 (␀).
/// PostgreSQL's text cannot hold U+0000 (the whole exchange would fail, and the partner's task
/// with it), so neither engine stores it; the exact text stays in the task and in the
/// message's `parts`, whose JSON escapes it.
pub(crate) fn storable_text(text: &str) -> std::borrow::Cow<'_, str> {
    if text.contains('\0') {
        std::borrow::Cow::Owned(text.replace('\0', "\u{2400}"))
    } else {
        std::borrow::Cow::Borrowed(text)
    }
}

impl<'a> Batch<'a> {
    /// The rows a batch of exchanges writes.
    pub(crate) fn of(exchanges: &[&'a Exchange]) -> Self {
        let mut batch = Self::default();
        let mut task_index: HashMap<&str, usize> = HashMap::new();
        for &e in exchanges {
            match task_index.get(e.task_id.as_str()) {
                Some(&i) => batch.tasks[i].0 = e,
                None => {
                    task_index.insert(&e.task_id, batch.tasks.len());
                    batch.tasks.push((e, e.now));
                }
            }
            if !e.messages.is_empty() {
                let (first, last) = batch
                    .contexts
                    .entry((&e.peer_id, &e.context_id))
                    .or_insert((e.now, e.now));
                *first = (*first).min(e.now);
                *last = (*last).max(e.now);
                batch.messages.extend(e.messages.iter().map(|m| (e, m)));
            }
            if let Some(spent) = &e.usage {
                let entry = batch
                    .usage
                    .entry((&spent.owner_id, &e.peer_id, spent.day))
                    .or_default();
                entry.0 = entry.0.saturating_add(spent.tokens);
                entry.1 += 1;
            }
        }
        batch
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::ConversationRole;

    fn at(millis: i64) -> Timestamp {
        crate::clock::from_millis(millis)
    }

    fn exchange(task: &str, context: &str, now: i64, tokens: Option<u64>) -> Exchange {
        let now = at(now);
        Exchange {
            task_id: task.into(),
            peer_id: "p".into(),
            context_id: context.into(),
            state: crate::protocol::types::TaskState::Completed,
            task_json: "{}".into(),
            now,
            expires_at: crate::clock::later(now, std::time::Duration::from_millis(1)),
            messages: vec![ConversationMessage {
                role: ConversationRole::Peer,
                text: "hi".into(),
                parts: None,
            }],
            usage: tokens.map(|tokens| crate::store::ExchangeUsage {
                owner_id: "a".into(),
                day: crate::clock::UtcDay::parse("2026-11-30").unwrap(),
                tokens,
            }),
            audit: None,
            instance: None,
            notify: false,
            push_config: None,
            upstream_task_id: None,
            receipt: None,
            call_trace: None,
            sealing: None,
        }
    }

    #[test]
    fn a_conversation_text_is_stored_without_u0000() {
        assert_eq!(storable_text("nul \0 here"), "nul \u{2400} here");
        assert!(matches!(
            storable_text("plain"),
            std::borrow::Cow::Borrowed("plain")
        ));
    }

    #[test]
    fn a_batch_touches_each_task_context_and_usage_row_once() {
        let first = exchange("t1", "c", 10, Some(3));
        let second = exchange("t2", "c", 20, Some(4));
        let again = exchange("t1", "c", 30, None);
        let batch = Batch::of(&[&first, &second, &again]);
        assert_eq!(batch.tasks.len(), 2);
        assert_eq!(batch.tasks[0].0.now, at(30), "the later copy of t1 wins");
        assert_eq!(batch.tasks[0].1, at(10), "created when its first copy was");
        assert_eq!(batch.contexts.len(), 1);
        assert_eq!(batch.contexts[&("p", "c")], (at(10), at(30)));
        assert_eq!(batch.messages.len(), 3);
        assert_eq!(batch.usage.len(), 1);
        let day = crate::clock::UtcDay::parse("2026-11-30").unwrap();
        assert_eq!(batch.usage[&("a", "p", day)], (7, 2));
    }
}
