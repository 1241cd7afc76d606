//! Turns that did not end well: the background turns a shutdown waits for, and the tasks left
//! working by a crash, a lost turn or an instance that is gone, failed as interrupted.

use super::build::Ingredients;
use crate::a2a::receipts::Receipts;
use crate::clock::{Clock, Timestamp, rfc3339_millis};
use crate::protocol::ids::TaskId;
use crate::protocol::types::{self as a2a, Role, Task, TaskState};
use crate::shared::events::{TaskEvent, TaskEvents};
use crate::shared::ownership::TaskOwnership;
use crate::store::{IssuedReceipt, TaskStore, WorkingTask};
use std::sync::Arc;
use std::time::Duration;

/// The agent's part that counts the turns running without a request waiting on them
/// (non-blocking sends, streams, subscriptions), so a shutdown can let them store their answers
/// before the store closes.
#[derive(Clone, Default)]
pub(super) struct Background {
    running: Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>,
}

impl Background {
    /// Counts a turn that runs without a request waiting on it, until the guard drops.
    pub(super) fn turn(&self) -> BackgroundTurn {
        self.running
            .0
            .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        BackgroundTurn {
            background: self.running.clone(),
        }
    }

    /// Waits at most `within` for the turns running in the background to store their answers
    /// (a shutdown calls this before closing the store).
    pub(super) async fn settle(&self, within: Duration) {
        let (count, settled) = &*self.running;
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let notified = settled.notified();
            if count.load(std::sync::atomic::Ordering::SeqCst) == 0 {
                return;
            }
            if tokio::time::timeout_at(deadline, notified).await.is_err() {
                tracing::warn!(
                    turns = count.load(std::sync::atomic::Ordering::SeqCst),
                    "turns still running at shutdown are left working; the next start fails them (interrupted)"
                );
                return;
            }
        }
    }
}

/// The agent's part that fails tasks left working: the store and the clock, where a failure is
/// announced, which instance this is (and which are live), and what the backend is ("model" or
/// "agent") for the message.
pub(super) struct Recovery {
    store: Arc<dyn TaskStore>,
    clock: Arc<dyn Clock>,
    events: Arc<dyn TaskEvents>,
    ownership: Arc<dyn TaskOwnership>,
    what: &'static str,
    /// Seals the tasks it fails, when receipts are on and their working state kept what to
    /// state.
    receipts: Option<Arc<Receipts>>,
}

impl Recovery {
    pub(super) fn new(from: &Ingredients) -> Self {
        Self {
            store: from.store.clone(),
            clock: from.clock.clone(),
            events: from.shared.events.clone(),
            ownership: from.shared.ownership.clone(),
            what: from.backend.what(),
            receipts: from.receipts.clone(),
        }
    }

    /// Marks tasks left working as failed (interrupted), so a peer that asks for one learns what
    /// happened instead of "not found" or a turn that never ends: all of them at start-up
    /// (`None`, before serving), or those created before `created_before` while
    /// serving. Returns how many there were.
    pub(super) async fn fail_interrupted_tasks(
        &self,
        created_before: Option<Timestamp>,
    ) -> Result<usize, crate::store::StoreError> {
        let working = self.store.working_tasks(created_before).await?;
        let mut failed = 0;
        for task in &working {
            // Another live instance is still answering it.
            if let Some(instance) = &task.instance
                && instance != self.ownership.instance()
                && self.ownership.is_live(instance).await
            {
                continue;
            }
            self.fail_interrupted(task).await?;
            failed += 1;
        }
        Ok(failed)
    }

    /// Fails (interrupted) the working tasks of instances whose lease lapsed, whatever their
    /// age: nobody is answering them. Returns how many there were.
    pub(super) async fn fail_tasks_of_gone_instances(
        &self,
    ) -> Result<usize, crate::store::StoreError> {
        let working = self.store.working_tasks(None).await?;
        let mut gone = std::collections::HashMap::new();
        let mut failed = 0;
        for task in &working {
            let Some(instance) = task.instance.as_deref() else {
                continue;
            };
            if instance == self.ownership.instance() {
                continue;
            }
            let is_gone = match gone.get(instance) {
                Some(&is_gone) => is_gone,
                None => {
                    let is_gone = !self.ownership.is_live(instance).await;
                    gone.insert(instance.to_owned(), is_gone);
                    is_gone
                }
            };
            if is_gone {
                self.fail_interrupted(task).await?;
                failed += 1;
            }
        }
        Ok(failed)
    }

    /// Stores a working task as failed (interrupted), sealed when its working state kept what
    /// its receipt states, unless it finished meanwhile.
    async fn fail_interrupted(&self, task: &WorkingTask) -> Result<(), crate::store::StoreError> {
        let WorkingTask {
            id,
            peer_id,
            body,
            sealing,
            ..
        } = task;
        let Ok(mut task) = serde_json::from_str::<Task>(body) else {
            tracing::error!(task_id = %id, "an interrupted task could not be read");
            return Ok(());
        };
        let now = self.clock.now();
        task.status.state = TaskState::Failed;
        task.status.timestamp = rfc3339_millis(now);
        task.status.message.parts = vec![a2a::Part::text(interrupted_text(self.what))];
        if let Some(last) = task.history.last_mut()
            && last.role == Role::Agent
        {
            *last = task.status.message.clone();
        }
        let sealed = (self.receipts.as_deref()).zip(sealing.as_deref());
        let receipt = sealed.and_then(|(receipts, kept)| {
            receipts.seal_kept(kept, peer_id.as_str(), &mut task, now)
        });
        let body = serde_json::to_string(&task).unwrap_or_else(|_| body.clone());
        let finished = self
            .store
            .finish_working_task(
                id,
                (TaskState::Failed, &body),
                receipt.as_ref().map(|r| (peer_id, r)),
                now,
            )
            .await?;
        // Announced like every other final state, so a subscription ends on the event and
        // need not look at the store for it.
        if finished {
            announce_failed(self.events.as_ref(), peer_id.clone(), id, body);
        }
        Ok(())
    }
}

/// Publishes that a working task was stored failed, if anyone listens: a subscription ends on
/// this event, as on every other final state.
fn announce_failed(
    events: &dyn TaskEvents,
    peer_id: crate::store::PeerId,
    id: &TaskId,
    body: String,
) {
    if events.listening() {
        events.publish(TaskEvent {
            peer_id,
            task_id: id.as_str().into(),
            state: TaskState::Failed,
            task_json: body.into(),
        });
    }
}

/// A task stored as working whose turn is not over: dropped before [`UnfinishedTask::finished`]
/// (an error, a panic, the turn's future dropped), it marks the stored task failed.
pub(super) struct UnfinishedTask {
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) task_id: String,
    pub(super) failed_json: String,
    /// Where its failure is announced, and whose task it is.
    pub(super) events: Arc<dyn crate::shared::events::TaskEvents>,
    pub(super) peer_id: crate::store::PeerId,
    /// What seals its failure, when it gets a receipt.
    pub(super) sealed: Option<Sealed>,
}

/// What seals a task failed without its turn: the receipts, and what its call states of
/// itself, as kept with its working state ([`Receipts::kept`]).
pub(super) struct Sealed {
    receipts: Arc<Receipts>,
    pub(super) kept: String,
}

impl Sealed {
    pub(super) fn new(receipts: Arc<Receipts>, kept: String) -> Self {
        Self { receipts, kept }
    }

    /// `failed` (a task's JSON) sealed for `peer_id` at `now`: its JSON and its receipt
    /// (`None`, and `failed` as it was, when either cannot be made).
    fn seal(
        &self,
        peer_id: &str,
        failed: String,
        now: Timestamp,
    ) -> (String, Option<IssuedReceipt>) {
        let Ok(mut task) = serde_json::from_str::<Task>(&failed) else {
            return (failed, None);
        };
        let receipt = self.receipts.seal_kept(&self.kept, peer_id, &mut task, now);
        match serde_json::to_string(&task) {
            Ok(sealed) if receipt.is_some() => (sealed, receipt),
            _ => (failed, None),
        }
    }
}

impl UnfinishedTask {
    /// The final state is stored: nothing left to do.
    pub(super) fn finished(&mut self) {
        self.task_id.clear();
    }
}

impl Drop for UnfinishedTask {
    fn drop(&mut self) {
        if self.task_id.is_empty() {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let (store, id) = (
            self.store.clone(),
            TaskId::from(std::mem::take(&mut self.task_id)),
        );
        let (events, peer_id) = (self.events.clone(), self.peer_id.clone());
        let now = self.clock.now();
        let failed = std::mem::take(&mut self.failed_json);
        let (body, receipt) = match &self.sealed {
            Some(sealed) => sealed.seal(peer_id.as_str(), failed, now),
            None => (failed, None),
        };
        runtime.spawn(async move {
            let receipt = receipt.as_ref().map(|r| (&peer_id, r));
            match store
                .finish_working_task(&id, (TaskState::Failed, &body), receipt, now)
                .await
            {
                Ok(true) => announce_failed(events.as_ref(), peer_id, &id, body),
                Ok(false) => {}
                Err(e) => {
                    tracing::error!(task_id = %id, error = %e, "an unfinished task stays working until the next sweep");
                }
            }
        });
    }
}

/// The agent's message of a task that was under way when peergate stopped, before the
/// backend (`what`: "model" or "agent") answered.
pub fn interrupted_text(what: &str) -> String {
    format!("The gateway stopped before the {what} answered (interrupted); send the message again.")
}

/// The agent's message of a task whose turn ended without an answer being stored.
pub(super) const UNFINISHED_TEXT: &str =
    "The gateway could not finish this task (an internal error); send the message again.";

/// A turn running in the background, counted until it drops.
pub(super) struct BackgroundTurn {
    background: Arc<(std::sync::atomic::AtomicUsize, tokio::sync::Notify)>,
}

impl Drop for BackgroundTurn {
    fn drop(&mut self) {
        let (count, settled) = &*self.background;
        if count.fetch_sub(1, std::sync::atomic::Ordering::SeqCst) == 1 {
            settled.notify_waiters();
        }
    }
}
