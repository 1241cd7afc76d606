//! Putting the agent together: what it is given, then its parts made once from that, each
//! taking only what it uses.

use super::cancel::{Cancels, RunningTurns};
use super::news::TaskNews;
use super::push::PushConfigs;
use super::reads::TaskReads;
use super::recovery::{Background, Recovery};
use super::stream::StreamPlaces;
use super::subscriptions::Subscriptions;
use super::turn::Turns;
use super::{Agent, AgentSettings, ExtendedCards, SharedState};
use crate::admin::budget::Budgets;
use crate::backend::ModelBackend;
use crate::clock::Clock;
use crate::layers::metrics::Metrics;
use crate::store::TaskStore;
use std::sync::Arc;

/// An agent being put together ([`Agent::builder`]): the shared state, the extended cards and push
/// notifications are given before [`AgentBuilder::build`] makes the parts, which keep them.
pub struct AgentBuilder {
    store: Arc<dyn TaskStore>,
    backend: Arc<dyn ModelBackend>,
    budgets: Arc<Budgets>,
    metrics: Arc<Metrics>,
    clock: Arc<dyn Clock>,
    settings: AgentSettings,
    shared: SharedState,
    cards: ExtendedCards,
    push: Option<Arc<crate::push::Push>>,
    receipts: Option<Arc<crate::a2a::receipts::Receipts>>,
    content: Option<Arc<crate::a2a::inspect::ContentGuard>>,
}

impl std::fmt::Debug for AgentBuilder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AgentBuilder")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl AgentBuilder {
    pub(super) fn new(
        store: Arc<dyn TaskStore>,
        backend: Arc<dyn ModelBackend>,
        budgets: Arc<Budgets>,
        metrics: Arc<Metrics>,
        clock: Arc<dyn Clock>,
        settings: AgentSettings,
    ) -> Self {
        Self {
            store,
            backend,
            budgets,
            metrics,
            clock,
            settings,
            shared: SharedState::default(),
            cards: ExtendedCards::default(),
            push: None,
            receipts: None,
            content: None,
        }
    }

    /// Inspects every answer with `content`'s outbound rules before it is sealed and stored.
    pub fn with_content_guard(mut self, content: Arc<crate::a2a::inspect::ContentGuard>) -> Self {
        self.content = Some(content);
        self
    }

    /// Seals finished tasks with `receipts`.
    pub fn with_receipts(mut self, receipts: Arc<crate::a2a::receipts::Receipts>) -> Self {
        self.receipts = Some(receipts);
        self
    }

    /// Serves the push-notification methods through `push` and queues every stored state for
    /// the task's configs.
    pub fn with_push(mut self, push: Arc<crate::push::Push>) -> Self {
        self.push = Some(push);
        self
    }

    /// Shares turns, task events and ownership through `shared` instead of the in-process
    /// engines.
    pub fn with_shared_state(mut self, shared: SharedState) -> Self {
        self.shared = shared;
        self
    }

    /// The extended Agent Cards `GetExtendedAgentCard` answers with (signed, as served).
    pub fn with_extended_cards(mut self, cards: ExtendedCards) -> Self {
        self.cards = cards;
        self
    }

    /// The agent, its parts made.
    pub fn build(self) -> Agent {
        let reads = TaskReads::new(self.store.clone(), self.clock.clone());
        let from = Ingredients {
            push_configs: PushConfigs::new(self.push.clone(), reads.clone(), self.clock.clone()),
            news: TaskNews::new(self.shared.events.clone(), self.push),
            places: StreamPlaces::new(self.shared.streams.clone(), self.settings.streams_per_peer),
            running: RunningTurns::default(),
            background: Background::default(),
            reads,
            store: self.store,
            backend: self.backend,
            budgets: self.budgets,
            metrics: self.metrics,
            clock: self.clock,
            settings: self.settings,
            shared: self.shared,
            receipts: self.receipts,
            content: self.content,
        };
        Agent {
            turns: Arc::new(Turns::new(&from)),
            cancels: Cancels::new(&from),
            subscriptions: Arc::new(Subscriptions::new(&from)),
            recovery: Recovery::new(&from),
            cards: std::sync::RwLock::new(Arc::new(self.cards)),
            backend: from.backend,
            news: from.news,
            reads: from.reads,
            push_configs: from.push_configs,
            background: from.background,
            settings: from.settings,
        }
    }
}

/// What the parts are made from: what the agent was given, and the parts several others hold
/// (each a handle on the same state).
pub(super) struct Ingredients {
    pub(super) store: Arc<dyn TaskStore>,
    pub(super) backend: Arc<dyn ModelBackend>,
    pub(super) budgets: Arc<Budgets>,
    pub(super) metrics: Arc<Metrics>,
    pub(super) clock: Arc<dyn Clock>,
    pub(super) settings: AgentSettings,
    pub(super) shared: SharedState,
    pub(super) reads: TaskReads,
    pub(super) news: TaskNews,
    pub(super) push_configs: PushConfigs,
    pub(super) running: RunningTurns,
    pub(super) background: Background,
    pub(super) places: StreamPlaces,
    pub(super) receipts: Option<Arc<crate::a2a::receipts::Receipts>>,
    /// The content guard every answer passes, with outbound rules.
    pub(super) content: Option<Arc<crate::a2a::inspect::ContentGuard>>,
}
