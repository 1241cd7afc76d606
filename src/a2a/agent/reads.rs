//! Reading tasks: `GetTask`, and `ListTasks`: the caller's own tasks, newest status first (then
//! by id), a page at a time.
//!
//! Every query is bound to the calling peer in the store, so no parameter can reach another
//! peer's rows; the page token only says where in the caller's own list the next page starts.
//! It is opaque to clients (base64url of the last task's status time and id) and is checked
//! for shape, not trusted: a forged token can only move within the caller's own tasks.

use super::{checked_history_length, internal, invalid};
use crate::clock::{Clock, Timestamp};
use crate::layers::auth::AuthenticatedPeer;
use crate::protocol::error::A2aError;
use crate::protocol::ids::{ContextId, TaskId};
use crate::protocol::types::{
    GetTaskRequest, ListTasksRequest, ListTasksResponse, StoredTask, Task, TaskState,
};
use crate::store::{TaskQuery, TaskStore};
use base64::Engine as _;
use std::sync::Arc;

/// The page size when none is asked for.
const DEFAULT_PAGE_SIZE: u32 = 50;
/// The largest page (the specification's bound).
const MAX_PAGE_SIZE: i64 = 100;

/// The state a `status` filter names: its ProtoJSON name or number; the unspecified state
/// (`""`, its name, 0) filters nothing.
fn state_filter(status: &serde_json::Value) -> Result<Option<TaskState>, A2aError> {
    let refused = || {
        invalid(
            "status",
            "must name a task state, e.g. TASK_STATE_COMPLETED (or its number, 3)",
        )
    };
    match status {
        serde_json::Value::String(name)
            if matches!(name.as_str(), "" | "TASK_STATE_UNSPECIFIED") =>
        {
            Ok(None)
        }
        serde_json::Value::String(name) => TaskState::from_name(name).map(Some).ok_or_else(refused),
        serde_json::Value::Number(n) => match n.as_u64() {
            Some(0) => Ok(None),
            Some(n) => TaskState::from_number(n).map(Some).ok_or_else(refused),
            None => Err(refused()),
        },
        _ => Err(refused()),
    }
}

/// Where the next page starts: the last listed task's status time (epoch milliseconds, as the
/// store orders them) and id.
fn page_token(status_at: Timestamp, id: &str) -> String {
    let millis = status_at.as_millisecond();
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{millis}:{id}"))
}

fn read_page_token(token: &str) -> Option<(Timestamp, TaskId)> {
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(token)
        .ok()?;
    let text = String::from_utf8(bytes).ok()?;
    let (at, id) = text.split_once(':')?;
    (!id.is_empty() && id.len() <= 128).then_some(())?;
    let at = Timestamp::from_millisecond(at.parse().ok()?).ok()?;
    Some((at, TaskId::from(id)))
}

/// The agent's part that reads the caller's own tasks: all it holds is the store and the clock
/// (which task has expired). The other parts read a task through it.
#[derive(Clone)]
pub(super) struct TaskReads {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
}

impl TaskReads {
    pub(super) fn new(store: Arc<dyn TaskStore>, clock: Arc<dyn Clock>) -> Self {
        Self { store, clock }
    }
}

impl TaskReads {
    /// `ListTasks`: a page of the caller's tasks.
    pub(super) async fn list_tasks(
        &self,
        peer: &AuthenticatedPeer,
        params: ListTasksRequest,
    ) -> Result<ListTasksResponse, A2aError> {
        let page_size = match params.page_size {
            None => DEFAULT_PAGE_SIZE,
            Some(n) if (1..=MAX_PAGE_SIZE).contains(&n) => u32::try_from(n).unwrap_or(1),
            Some(_) => return Err(invalid("pageSize", "must be between 1 and 100")),
        };
        // Protobuf's defaults (an empty id, the unspecified state) mean "no filter", as some
        // clients send every field.
        let context_id = params
            .context_id
            .as_deref()
            .filter(|c| !c.is_empty())
            .map(ContextId::from);
        let status = params
            .status
            .as_ref()
            .map(state_filter)
            .transpose()?
            .flatten();
        let history_length = params
            .history_length
            .map(|n| checked_history_length(n, "historyLength"))
            .transpose()?;
        let status_since =
            match params.status_timestamp_after.as_deref() {
                None => None,
                Some(text) => Some(crate::clock::parse_rfc3339(text).ok_or_else(|| {
                    invalid("statusTimestampAfter", "must be an RFC 3339 timestamp")
                })?),
            };
        let after = match params.page_token.as_deref() {
            None | Some("") => None,
            Some(token) => Some(
                read_page_token(token)
                    .ok_or_else(|| invalid("pageToken", "is not a token this agent issued"))?,
            ),
        };
        let query = TaskQuery {
            peer_id: peer.id(),
            context_id: context_id.as_ref(),
            state: status,
            status_since,
            after: after.as_ref().map(|(at, id)| (*at, id)),
            // One more than the page: whether it came says whether another page follows.
            limit: page_size + 1,
        };
        let mut page = self
            .store
            .list_tasks(&query, self.clock.now())
            .await
            .map_err(internal)?;
        let more = page.tasks.len() > page_size as usize;
        page.tasks.truncate(page_size as usize);
        let next_page_token = match page.tasks.last() {
            Some(last) if more => page_token(last.status_at, last.id.as_str()),
            _ => String::new(),
        };
        let include_artifacts = params.include_artifacts.unwrap_or(false);
        let mut tasks = Vec::with_capacity(page.tasks.len());
        for listed in &page.tasks {
            let mut task: Task = serde_json::from_str(&listed.body).map_err(internal)?;
            if !include_artifacts {
                task.artifacts.clear();
            }
            if let Some(n) = history_length {
                task.limit_history(n);
            }
            tasks.push(task);
        }
        // `nextPageToken` is always present ("" on the last page), as the specification asks.
        Ok(ListTasksResponse {
            tasks,
            next_page_token,
            page_size,
            total_size: page.total,
        })
    }
}

impl TaskReads {
    pub(super) async fn get_task(
        &self,
        peer: &AuthenticatedPeer,
        params: GetTaskRequest,
    ) -> Result<StoredTask, A2aError> {
        let history_length = params
            .history_length
            .map(|n| checked_history_length(n, "historyLength"))
            .transpose()?;
        let stored = self.load_stored_task(peer, &params.id).await?;
        stored.with_history(history_length).map_err(internal)
    }

    pub(super) async fn load_task(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &TaskId,
    ) -> Result<Task, A2aError> {
        let stored = self.load_task_json(peer, task_id).await?;
        serde_json::from_str(&stored).map_err(internal)
    }

    /// The caller's own task, decoded once, with the text it is stored as.
    pub(super) async fn load_stored_task(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &TaskId,
    ) -> Result<StoredTask, A2aError> {
        let stored = self.load_task_json(peer, task_id).await?;
        StoredTask::read(&stored).map_err(internal)
    }

    /// The caller's own unexpired task as stored, or `TaskNotFound` for anything else.
    pub(super) async fn load_task_json(
        &self,
        peer: &AuthenticatedPeer,
        task_id: &TaskId,
    ) -> Result<String, A2aError> {
        self.store
            .find_task(peer.id(), task_id, self.clock.now())
            .await
            .map_err(internal)?
            .ok_or(A2aError::TaskNotFound)
    }
}

#[cfg(test)]
mod tests {
    use super::{Timestamp, page_token, read_page_token};
    use base64::Engine as _;

    #[test]
    fn a_page_token_reads_back_and_junk_is_refused() {
        let at = Timestamp::from_millisecond(1_700_000_000_123).unwrap();
        let token = page_token(at, "019a-task");
        assert_eq!(
            token, "MTcwMDAwMDAwMDEyMzowMTlhLXRhc2s",
            "the same text as before"
        );
        assert_eq!(read_page_token(&token), Some((at, "019a-task".into())));
        let out_of_range =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(format!("{}:t1", i64::MAX));
        for junk in [
            "",
            "!!",
            "bm90LWEtdG9rZW4",
            &page_token(at, ""),
            &out_of_range,
        ] {
            assert_eq!(read_page_token(junk), None, "{junk}");
        }
    }
}
