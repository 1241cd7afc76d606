//! Model budgets: each administrator's switch and token allowance, and a peer's own daily
//! allowance, checked before the model is asked.
//!
//! A peer's turn runs as its owning administrator. Before the backend is called, [`Budgets`]
//! answers whether that administrator may use the model now: not disabled, the model allowed,
//! and the tokens spent this UTC day (and, when a monthly budget is set, this UTC month) below
//! the budget; and, when the peer has a daily budget of its own, whether the peer spent less
//! than that today. Both are counted from the usage the backend reports, the same way; a
//! peer's spending is kept under the key `peer:ID`, which no administrator's id can be.
//!
//! The hot path reads no store: the settings are cached for `auth.credential_cache_seconds` (by
//! the gateway's clock, and dropped at once when changed through the running gateway's account
//! service; the command line's changes arrive within the cache time), and the tokens spent are
//! kept in memory, seeded from the store the first time an administrator is seen each day.
//! Requests already in flight when a budget runs out still finish, and so do those in flight at
//! midnight UTC (their tokens are stored but may miss the new day's seed), so a budget can be
//! overshot by what those requests spend.
//!
//! Several instances count in one place instead ([`Budgets::with_shared_spend`], Redis), so a
//! budget is not overshot once per instance; while the shared counters cannot be read, each
//! instance counts on its own as above.

use crate::clock::{Clock, Timestamp, UtcDay, UtcMonth, UtcPeriod, elapsed};
use crate::locks::Locked;
use crate::shared::admission::SpendAsk;
use crate::shared::spend::{SharedSpend, SpendUnavailable};
use crate::shared::turns::{SpendingAfter, Spent as TurnSpent};
use crate::store::{AdminId, ExchangeUsage, PeerId, StoreError, UsageStore};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Budgets for administrators who have none of their own (the policy's `[budgets]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BudgetDefaults {
    /// Tokens per UTC day.
    pub tokens_per_day: u64,
    /// Tokens per UTC month, if months are budgeted.
    pub tokens_per_month: Option<u64>,
}

/// One administrator's effective budget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Budget {
    /// False for a disabled administrator.
    pub owner_active: bool,
    /// The switch that allows or forbids the model.
    pub model_allowed: bool,
    /// Tokens per UTC day.
    pub tokens_per_day: u64,
    /// Tokens per UTC month.
    pub tokens_per_month: Option<u64>,
}

/// Why a turn was refused. Each says why in one sentence, which the peer reads in the task.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BudgetRefusal {
    /// The owning administrator was disabled.
    #[error(
        "The administrator responsible for this peer is disabled, so the model cannot be used."
    )]
    OwnerDisabled,
    /// The owning administrator may not use the model.
    #[error("The administrator responsible for this peer is not allowed to use the model.")]
    ModelForbidden,
    /// Today's tokens are spent.
    #[error("The daily model budget of {0} tokens is spent; it renews at 00:00 UTC.")]
    DailyBudgetSpent(u64),
    /// The peer's own daily tokens are spent.
    #[error("This peer's daily model budget of {0} tokens is spent; it renews at 00:00 UTC.")]
    PeerDailyBudgetSpent(u64),
    /// This month's tokens are spent.
    #[error(
        "The monthly model budget of {0} tokens is spent; it renews on the first day of next month (UTC)."
    )]
    MonthlyBudgetSpent(u64),
}

impl BudgetRefusal {
    /// A short stable name, for the audit log and metrics.
    pub fn reason(self) -> &'static str {
        match self {
            Self::OwnerDisabled => "owner_disabled",
            Self::ModelForbidden => "model_forbidden",
            Self::DailyBudgetSpent(_) => "daily_budget_spent",
            Self::MonthlyBudgetSpent(_) => "monthly_budget_spent",
            Self::PeerDailyBudgetSpent(_) => "peer_daily_budget_spent",
        }
    }
}

/// Whose spending is counted: an administrator's, or a peer's own.
#[derive(Debug, Clone, Copy)]
enum Spender<'a> {
    Owner(&'a AdminId),
    Peer(&'a PeerId),
}

impl Spender<'_> {
    /// The key its spending is counted under, here and in the shared counters.
    fn key(self) -> std::borrow::Cow<'static, str> {
        match self {
            Self::Owner(id) => std::borrow::Cow::Owned(id.as_str().to_owned()),
            Self::Peer(id) => std::borrow::Cow::Owned(format!("peer:{}", id.as_str())),
        }
    }
}

/// What a request's admission call read of the shared counters (see [`Budgets::ask`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SharedReading {
    /// Not read with the admission: the check asks for itself.
    NotRead,
    /// The counters in [`SpendAsk::caps`]'s order (`None`: not started yet), read for `day`.
    Read {
        /// The counters.
        counters: [Option<u64>; 4],
        /// The UTC day they were read for (a reading from before midnight is not today's).
        day: UtcDay,
    },
    /// Redis did not answer: counted here.
    Unavailable,
}

impl SharedReading {
    /// The (day, month) counters of the owner (`first` 0) or the peer (2), as
    /// [`SharedSpend::spent`] answers them; `None` when not read.
    fn pair(&self, first: usize) -> Option<Result<Option<(u64, u64)>, SpendUnavailable>> {
        match self {
            Self::NotRead => None,
            Self::Unavailable => Some(Err(SpendUnavailable)),
            Self::Read { counters, .. } => Some(Ok(counters[first].zip(counters[first + 1]))),
        }
    }
}

#[derive(Debug, Clone)]
struct CachedBudget {
    budget: Budget,
    at: Timestamp,
}

#[derive(Debug, Clone)]
struct Spent {
    /// Days since the epoch (UTC), compared on the hot path instead of formatted dates.
    day_index: i64,
    day: UtcDay,
    day_tokens: u64,
    month_tokens: u64,
}

/// Days since the epoch (UTC) of an instant.
fn day_index(at: Timestamp) -> i64 {
    at.as_second().div_euclid(86_400)
}

/// The budgets of every administrator, as the running gateway sees them.
pub struct Budgets {
    store: Arc<dyn UsageStore>,
    clock: Arc<dyn Clock>,
    /// The policy's; a reload may change them ([`Self::set_defaults`]).
    defaults: Mutex<BudgetDefaults>,
    ttl: Duration,
    /// Settings by administrator, bounded in number; fresh for `ttl` by the gateway's
    /// clock (so tests move time), and dropped by the cache itself some time after.
    settings: moka::sync::Cache<String, CachedBudget>,
    /// Peers' own daily budgets, cached as the settings are.
    peer_settings: moka::sync::Cache<PeerId, (Option<u64>, Timestamp)>,
    spent: Mutex<HashMap<String, Spent>>,
    /// Where every instance counts, when there are several.
    shared: Option<Arc<dyn SharedSpend>>,
}

impl std::fmt::Debug for Budgets {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Budgets")
            .field("defaults", &*self.defaults.locked())
            .finish_non_exhaustive()
    }
}

/// The UTC day and month of an instant.
pub fn day_and_month(at: Timestamp) -> (UtcDay, UtcMonth) {
    let day = UtcDay::of(at);
    (day, day.month())
}

impl Budgets {
    /// Budgets over `store`; settings are trusted for `cache` before being read again.
    pub fn new(
        store: Arc<dyn UsageStore>,
        clock: Arc<dyn Clock>,
        defaults: BudgetDefaults,
        cache: Duration,
    ) -> Self {
        Self {
            store,
            clock,
            defaults: Mutex::new(defaults),
            ttl: cache,
            settings: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(cache.max(Duration::from_secs(1)))
                .build(),
            peer_settings: moka::sync::Cache::builder()
                .max_capacity(100_000)
                .time_to_live(cache.max(Duration::from_secs(1)))
                .build(),
            spent: Mutex::default(),
            shared: None,
        }
    }

    /// Counts spending in `shared`, seen by every instance.
    pub fn with_shared_spend(mut self, shared: Arc<dyn SharedSpend>) -> Self {
        self.shared = Some(shared);
        self
    }

    /// Whether `peer_id`, acting for `owner_id`, may use the model now.
    pub async fn check(
        &self,
        owner_id: &AdminId,
        peer_id: &PeerId,
    ) -> Result<Result<(), BudgetRefusal>, StoreError> {
        self.check_read(owner_id, peer_id, SharedReading::NotRead)
            .await
    }

    /// The shared counters a check of `peer_id` acting for `owner_id` reads, with their caps,
    /// to be read in the request's admission call (`None` with no shared counters).
    pub async fn ask(
        &self,
        owner_id: &AdminId,
        peer_id: &PeerId,
    ) -> Result<Option<SpendAsk>, StoreError> {
        // Counters left short by an unconfirmed increment are dropped (and seeded again) by the
        // check's own read, not read with the admission.
        if self.shared.as_ref().is_none_or(|s| s.has_short_counters()) {
            return Ok(None);
        }
        let budget = self.budget(owner_id).await?;
        let peer_day = self.peer_budget(peer_id).await?;
        let (day, month) = day_and_month(self.clock.now());
        Ok(Some(SpendAsk {
            spenders: [
                owner_id.as_str().to_owned(),
                Spender::Peer(peer_id).key().into_owned(),
            ],
            day,
            month,
            caps: [
                Some(budget.tokens_per_day),
                budget.tokens_per_month,
                peer_day,
                None,
            ],
        }))
    }

    /// [`Budgets::check`], with the shared counters as the admission call read them.
    pub async fn check_read(
        &self,
        owner_id: &AdminId,
        peer_id: &PeerId,
        reading: SharedReading,
    ) -> Result<Result<(), BudgetRefusal>, StoreError> {
        // Read before midnight: today's counters are asked for again.
        let today = day_and_month(self.clock.now()).0;
        let reading = match reading {
            SharedReading::Read { day, .. } if day != today => SharedReading::NotRead,
            reading => reading,
        };
        let budget = self.budget(owner_id).await?;
        if !budget.owner_active {
            return Ok(Err(BudgetRefusal::OwnerDisabled));
        }
        if !budget.model_allowed {
            return Ok(Err(BudgetRefusal::ModelForbidden));
        }
        let (day_tokens, month_tokens) = self
            .spent(Spender::Owner(owner_id), reading.pair(0))
            .await?;
        if day_tokens >= budget.tokens_per_day {
            return Ok(Err(BudgetRefusal::DailyBudgetSpent(budget.tokens_per_day)));
        }
        if let Some(per_month) = budget.tokens_per_month
            && month_tokens >= per_month
        {
            return Ok(Err(BudgetRefusal::MonthlyBudgetSpent(per_month)));
        }
        if let Some(per_day) = self.peer_budget(peer_id).await? {
            let (day_tokens, _) = self.spent(Spender::Peer(peer_id), reading.pair(2)).await?;
            if day_tokens >= per_day {
                return Ok(Err(BudgetRefusal::PeerDailyBudgetSpent(per_day)));
            }
        }
        Ok(Ok(()))
    }

    /// A peer's own daily budget (cached).
    async fn peer_budget(&self, peer_id: &PeerId) -> Result<Option<u64>, StoreError> {
        let now = self.clock.now();
        if let Some((budget, at)) = self.peer_settings.get(peer_id)
            && elapsed(at, now) < self.ttl
        {
            return Ok(budget);
        }
        let budget = self.store.peer_tokens_per_day(peer_id).await?;
        self.peer_settings.insert(peer_id.clone(), (budget, now));
        Ok(budget)
    }

    /// Counts `tokens` against `owner_id` and `peer_id` and returns what the store must
    /// record. The shared counters get them with the turn's release when `after` is given (one
    /// call after the answer), else at once.
    pub fn record(
        &self,
        owner_id: &AdminId,
        peer_id: &PeerId,
        tokens: u64,
        after: Option<&SpendingAfter>,
    ) -> ExchangeUsage {
        let day = self.count(owner_id.as_str(), tokens);
        // Every peer is counted, budget or not: whether it has one may have changed, or left
        // the cache, while the turn ran. The count moves only once a check has seeded it here
        // (or in the shared counters); until then the store, which records every exchange's
        // tokens with its peer, is where a first check reads it from.
        let peer_key = Spender::Peer(peer_id).key();
        self.count(&peer_key, tokens);
        // Both shared counters in one call; nothing to add for a turn that spent nothing.
        match (&self.shared, after) {
            (Some(_), _) if tokens == 0 => {}
            (Some(_), Some(after)) => after.add(TurnSpent {
                spenders: vec![owner_id.as_str().to_owned(), peer_key.into_owned()],
                day,
                tokens,
            }),
            (Some(shared), None) => {
                shared.add(&[owner_id.as_str(), &peer_key], day, day.month(), tokens);
            }
            (None, _) => {}
        }
        ExchangeUsage {
            owner_id: owner_id.clone(),
            day,
            tokens,
        }
    }

    /// Adds `tokens` to what `key` spent today here; returns the day they count for.
    fn count(&self, key: &str, tokens: u64) -> UtcDay {
        let now = self.clock.now();
        let today = day_index(now);
        let mut spent = self.spent.locked();
        let day = match spent.get_mut(key) {
            Some(entry) if entry.day_index == today => {
                entry.day_tokens = entry.day_tokens.saturating_add(tokens);
                entry.month_tokens = entry.month_tokens.saturating_add(tokens);
                entry.day
            }
            // Midnight passed during the turn: the next check reloads from the store.
            _ => UtcDay::of(now),
        };
        drop(spent);
        day
    }

    /// Drops the cached settings of an administrator, so a change applies to the next request.
    pub fn forget(&self, owner_id: &AdminId) {
        self.settings.invalidate(owner_id.as_str());
    }

    /// Drops the cached budget of a peer, so a change applies to the next request.
    pub fn forget_peer(&self, peer_id: &PeerId) {
        self.peer_settings.invalidate(peer_id);
    }

    /// Drops every cached setting (changes may have been missed).
    pub fn forget_everyone(&self) {
        self.settings.invalidate_all();
        self.peer_settings.invalidate_all();
    }

    /// Budgets administrators without their own get from now on (a policy reload); what each
    /// spent is kept.
    pub fn set_defaults(&self, defaults: BudgetDefaults) {
        *self.defaults.locked() = defaults;
        self.settings.invalidate_all();
    }

    /// Forgets everything cached (call periodically to bound memory).
    pub fn purge(&self) {
        let today = day_index(self.clock.now());
        self.spent.locked().retain(|_, s| s.day_index == today);
        self.settings.run_pending_tasks();
        self.peer_settings.run_pending_tasks();
    }

    /// The effective budget of `owner_id` (cached).
    pub async fn budget(&self, owner_id: &AdminId) -> Result<Budget, StoreError> {
        let now = self.clock.now();
        if let Some(cached) = self.settings.get(owner_id.as_str())
            && elapsed(cached.at, now) < self.ttl
        {
            return Ok(cached.budget);
        }
        let defaults = *self.defaults.locked();
        let budget = match self.store.find_admin_by_id(owner_id).await? {
            Some(admin) => Budget {
                owner_active: admin.status == crate::store::AdminStatus::Active,
                model_allowed: admin.model_allowed,
                tokens_per_day: admin.tokens_per_day.unwrap_or(defaults.tokens_per_day),
                tokens_per_month: admin.tokens_per_month.or(defaults.tokens_per_month),
            },
            // A peer whose owner is gone acts for nobody.
            None => Budget {
                owner_active: false,
                model_allowed: false,
                tokens_per_day: 0,
                tokens_per_month: None,
            },
        };
        self.settings.insert(
            owner_id.as_str().to_owned(),
            CachedBudget { budget, at: now },
        );
        Ok(budget)
    }

    /// Keeps the last shared reading, so that counting here while Redis is away starts from
    /// what every instance had spent, not from an older seed.
    fn remember_shared_reading(
        &self,
        owner_id: &str,
        day: UtcDay,
        (day_tokens, month_tokens): (u64, u64),
    ) {
        let day_index = day_index(self.clock.now());
        let mut spent = self.spent.locked();
        match spent.get_mut(owner_id) {
            Some(entry) if entry.day_index == day_index => {
                entry.day_tokens = day_tokens;
                entry.month_tokens = month_tokens;
            }
            _ => {
                let fresh = Spent {
                    day_index,
                    day,
                    day_tokens,
                    month_tokens,
                };
                spent.insert(owner_id.to_owned(), fresh);
            }
        }
    }

    /// What `spender` spent in `period`, by the store.
    async fn stored_spending(
        &self,
        spender: Spender<'_>,
        period: UtcPeriod,
    ) -> Result<u64, StoreError> {
        match spender {
            Spender::Owner(owner_id) => self.store.tokens_spent(owner_id, period).await,
            Spender::Peer(peer_id) => self.store.peer_tokens_spent(peer_id, period).await,
        }
    }

    /// Tokens spent today and this month: (day, month). `read` is what the admission call
    /// read of the shared counters; `None` asks them here.
    async fn spent(
        &self,
        spender: Spender<'_>,
        read: Option<Result<Option<(u64, u64)>, SpendUnavailable>>,
    ) -> Result<(u64, u64), StoreError> {
        let key = spender.key();
        let owner_id = key.as_ref();
        if let Some(shared) = &self.shared {
            let (day, month) = day_and_month(self.clock.now());
            let read = match read {
                Some(read) => read,
                None => shared.spent(owner_id, day, month).await,
            };
            match read {
                Ok(Some(spent)) => {
                    self.remember_shared_reading(owner_id, day, spent);
                    return Ok(spent);
                }
                Ok(None) => {
                    let spent = (
                        self.stored_spending(spender, day.into()).await?,
                        self.stored_spending(spender, month.into()).await?,
                    );
                    shared.seed(owner_id, day, month, spent).await;
                    self.remember_shared_reading(owner_id, day, spent);
                    return Ok(spent);
                }
                // Counted here until the shared counters answer again.
                Err(_) => {}
            }
        }
        let now = self.clock.now();
        let today = day_index(now);
        if let Some(spent) = self
            .spent
            .locked()
            .get(owner_id)
            .filter(|s| s.day_index == today)
        {
            return Ok((spent.day_tokens, spent.month_tokens));
        }
        // First sight today: the store knows what earlier processes and days spent.
        let (day, month) = day_and_month(now);
        let fresh = Spent {
            day_index: today,
            day_tokens: self.stored_spending(spender, day.into()).await?,
            month_tokens: self.stored_spending(spender, month.into()).await?,
            day,
        };
        let mut spent = self.spent.locked();
        // A concurrent first request may have seeded today's entry (and counted into it) while
        // this one read the store: keep that one.
        let entry = match spent.entry(owner_id.to_owned()) {
            std::collections::hash_map::Entry::Occupied(mut held) => {
                if held.get().day_index != today {
                    held.insert(fresh);
                }
                held.into_mut()
            }
            std::collections::hash_map::Entry::Vacant(empty) => empty.insert(fresh),
        };
        Ok((entry.day_tokens, entry.month_tokens))
    }
}
