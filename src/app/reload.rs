//! Reloading the policy while serving (`SIGHUP`, or the admin API): the file is read and
//! checked as at start-up, compared key by key with the policy in force, and what can change
//! safely is applied — identity providers, the cards' text, the per-address limit, the budgets
//! and new peers' defaults, who may reload through the API, the log level ([`reloadable`]).
//! Every new part is built before any is put in place, so a file that does not check, or
//! describes a part that cannot be built, changes nothing and says why. A key that needs a
//! restart (listeners, the store, the backend, …) is named, and its old value stays in force.
//!
//! A reload reaches the other instances through the change notifier ([`ReloadOnChange`]): each
//! reads its own file again, at once and for two minutes after while its text has not changed,
//! so a removed identity provider's tokens stop on every instance within the revocation bound
//! when the files change together, and soon after a late file arrives.

use super::documents::{CardInputs, SignedCards};
use super::identity::{issuer_cards, issuer_tables, providers};
use crate::a2a::agent::Agent;
use crate::a2a::card;
use crate::admin::budget::{BudgetDefaults, Budgets};
use crate::admin::reload::{PolicyReload, ReloadRefused, ReloadTrigger, Reloaded};
use crate::admin::{AccountDefaults, AccountService, Actor, Caller};
use crate::clock::Clock;
use crate::config::{Policy, PolicySource};
use crate::http::door::CardDocuments;
use crate::layers::auth::PeerAuthenticator;
use crate::layers::auth::jwt::IdentityProviders;
use crate::layers::limit::{PerIpLimitLayer, Quota};
use crate::locks::ReadWriteLocked;
use crate::shared::changes::{Change, ChangeListener, ChangeNotifier};
use crate::store::Store;
use crate::telemetry::level::{self, LevelSet};
use sha2::{Digest, Sha256};
use std::sync::{Arc, RwLock};

/// Whether the dotted `key` can change while serving. The card's extensions are also the
/// protocol gate's, built once; `card.name` also names the service in exported traces, which
/// keeps its start-up name until a restart.
fn reloadable(key: &str) -> bool {
    matches!(
        key,
        "auth.issuers"
            | "limits.per_ip_per_minute"
            | "log.level"
            | "budgets.tokens_per_day"
            | "budgets.tokens_per_month"
            | "peers.default_rate_per_minute"
            | "peers.default_owner"
            | "admin.reloaders"
            | "authorization.policies"
            | "authorization.schema"
    ) || (key.starts_with("card.") && key != "card.extensions")
}

/// What a reload replaces, and what it rebuilds them from.
pub(super) struct Parts {
    /// `None` when the door started without identity providers (no `"jwt"` scheme).
    pub(super) identity: Option<Arc<IdentityProviders>>,
    pub(super) authenticator: Arc<PeerAuthenticator>,
    pub(super) accounts: AccountService,
    pub(super) budgets: Arc<Budgets>,
    pub(super) per_ip: PerIpLimitLayer,
    pub(super) cards: Arc<RwLock<Arc<CardDocuments>>>,
    pub(super) agent: Arc<Agent>,
    pub(super) store: Store,
    pub(super) clock: Arc<dyn Clock>,
    /// The keys that sign the cards, as start-up loaded them: the key set publishes these.
    pub(super) signing_keys: Vec<crate::jose::sign::CardSigningKey>,
    pub(super) door_url: String,
    pub(super) client_ca_sha256: Option<String>,
    pub(super) changes: Arc<dyn ChangeNotifier>,
    /// `None` when the door started without `[authorization]`.
    pub(super) authorization: Option<Arc<crate::authz::Authorization>>,
    /// The receipts the cards declare, when they are on (restart to change).
    pub(super) receipts: Option<Arc<crate::a2a::receipts::Receipts>>,
}

/// The policy in force, and the digest of the file text it was last read from.
struct InForce {
    policy: Policy,
    digest: Option<[u8; 32]>,
}

/// Reloads the policy of a running gateway: see the [module docs](self).
pub(crate) struct Reloader {
    source: PolicySource,
    in_force: tokio::sync::Mutex<InForce>,
    parts: Parts,
}

/// The parts a new policy describes, built and not yet in place.
#[derive(Default)]
struct Built {
    identity: Option<IdentityProviders>,
    cards: Option<SignedCards>,
    per_ip: Option<Quota>,
    level: Option<String>,
    budgets: Option<BudgetDefaults>,
    accounts: Option<AccountDefaults>,
    authorization: Option<crate::authz::Loaded>,
}

impl Reloader {
    pub(super) fn new(policy: Policy, source: PolicySource, parts: Parts) -> Self {
        Self {
            source,
            in_force: tokio::sync::Mutex::new(InForce {
                policy,
                digest: None,
            }),
            parts,
        }
    }

    /// Reads the file again and applies what it changes that can change while serving.
    async fn reload_file(&self, trigger: &ReloadTrigger) -> Result<Reloaded, ReloadRefused> {
        let PolicySource::File(path) = &self.source else {
            return Ok(Reloaded {
                notes: vec![
                    "the policy is the one built in: there is no file to read again".into(),
                ],
                ..Reloaded::default()
            });
        };
        let refused = |e: crate::config::PolicyError| ReloadRefused(e.without_source());
        // Serialized, and the file read under the lock: two reloads at once would each build
        // from the same policy in force, and an older text read first could be applied last.
        let mut in_force = self.in_force.lock().await;
        let text = crate::config::read_policy_file(path).map_err(refused)?;
        let digest: [u8; 32] = Sha256::digest(text.as_bytes()).into();
        if matches!(trigger, ReloadTrigger::Heard) {
            if in_force.digest == Some(digest) {
                // The policy file is the same; its Cedar files may not be.
                return self.reload_authorization(&in_force.policy);
            }
            if !settled(path, &digest).await {
                // Being written as it was read: the next check reads it whole.
                return Ok(Reloaded::default());
            }
        }
        let new = Policy::parse(&text, &self.source).map_err(refused)?;
        let (mut applied, mut restart_needed) = (Vec::new(), Vec::new());
        for key in in_force.policy.differing_keys(&new) {
            let started_without = match key.split('.').next() {
                Some("auth") => self.parts.identity.is_none(),
                Some("authorization") => {
                    self.parts.authorization.is_none() || new.authorization.is_none()
                }
                _ => false,
            };
            match reloadable(&key) && !started_without {
                true => applied.push(key),
                false => restart_needed.push(key),
            }
        }
        let next = in_force
            .policy
            .with_keys_of(&new, &applied)
            .map_err(refused)?;
        let mut built = self.build(&next, &applied).await?;
        built.authorization = self.changed_authorization(&next)?;
        if built.authorization.is_some() && !applied.iter().any(|k| k.starts_with("authorization"))
        {
            applied.push("authorization.policies".to_owned());
        }
        let notes = self.put_in_place(built);
        in_force.policy = next;
        in_force.digest = Some(digest);
        Ok(Reloaded {
            applied,
            restart_needed,
            notes,
        })
    }

    /// The parts `policy` describes for the changed `keys`, or why one cannot be built.
    async fn build(&self, policy: &Policy, keys: &[String]) -> Result<Built, ReloadRefused> {
        let refused = |e: super::StartError| ReloadRefused(e.to_string());
        let changed = |wanted: &dyn Fn(&str) -> bool| keys.iter().any(|key| wanted(key));
        let mut built = Built::default();
        if changed(&|key| key == "auth.issuers") {
            built.identity = Some(self.identity_providers(policy)?);
        }
        if changed(&|key| key == "limits.per_ip_per_minute") {
            let quota = Quota::per_minute(policy.limits.per_ip_per_minute.u32());
            crate::layers::limit::check_config(quota, 1)
                .map_err(|e| ReloadRefused(format!("limits.per_ip_per_minute: {e}")))?;
            built.per_ip = Some(quota);
        }
        if changed(&|key| key == "log.level") {
            built.level = Some(policy.log.level.clone());
        }
        if changed(&|key| key.starts_with("budgets.")) {
            built.budgets = Some(super::budget_defaults(policy));
        }
        if changed(&|key| key.starts_with("peers.")) {
            built.accounts = Some(super::account_defaults(policy));
        }
        if changed(&|key| key == "auth.issuers" || key.starts_with("card.")) {
            let providers = built.identity.as_ref().or(self.parts.identity.as_deref());
            let identities = card::CardIdentities {
                issuers: issuer_cards(policy, providers).await,
                client_ca_sha256: self.parts.client_ca_sha256.clone(),
            };
            let backend = self.parts.agent.backend();
            let inputs = CardInputs {
                door_url: &self.parts.door_url,
                identities: &identities,
                agent: backend.description(),
                receipts: self.parts.receipts.as_ref(),
            };
            let (store, now) = (&self.parts.store, self.parts.clock.now());
            let keys = &self.parts.signing_keys;
            let cards = SignedCards::build(policy, keys, store, &inputs, now)
                .await
                .map_err(refused)?;
            // Checked here, so putting them in place cannot fail.
            cards.answered().map_err(refused)?;
            built.cards = Some(cards);
        }
        Ok(built)
    }

    /// The Cedar files `policy` names, read and checked again, when their text differs from
    /// the policies' in force (a file that does not check refuses the whole reload).
    fn changed_authorization(
        &self,
        policy: &Policy,
    ) -> Result<Option<crate::authz::Loaded>, ReloadRefused> {
        let (Some(running), Some(section)) = (&self.parts.authorization, &policy.authorization)
        else {
            return Ok(None);
        };
        let loaded = crate::authz::Loaded::read(&super::policy_files(section))
            .map_err(|e| ReloadRefused(e.to_string()))?;
        Ok((loaded.digest() != running.current().digest()).then_some(loaded))
    }

    /// A reload heard from another instance when this instance's policy file has not
    /// changed: its Cedar files alone, when they did.
    fn reload_authorization(&self, policy: &Policy) -> Result<Reloaded, ReloadRefused> {
        let Some(loaded) = self.changed_authorization(policy)? else {
            return Ok(Reloaded::default());
        };
        let notes = self.put_in_place(Built {
            authorization: Some(loaded),
            ..Built::default()
        });
        Ok(Reloaded {
            applied: vec!["authorization.policies".to_owned()],
            restart_needed: Vec::new(),
            notes,
        })
    }

    /// The identity providers of `policy` (none left is an empty set: every provider's
    /// tokens are refused from now on).
    fn identity_providers(&self, policy: &Policy) -> Result<IdentityProviders, ReloadRefused> {
        providers(&issuer_tables(policy), &self.parts.clock)
            .map_err(|e| ReloadRefused(e.to_string()))
    }

    /// Puts every built part in place; what to know about them.
    fn put_in_place(&self, built: Built) -> Vec<String> {
        let mut notes = Vec::new();
        if let (Some(new), Some(running)) = (built.identity, &self.parts.identity) {
            running.replace_with(&new);
            self.parts.accounts.now_knowing(&running.names());
            // Verdicts remembered for a token of a provider removed or changed go too.
            self.parts.authenticator.forget_everyone();
        }
        if let Some(defaults) = built.budgets {
            self.parts.budgets.set_defaults(defaults);
        }
        if let Some(defaults) = built.accounts {
            self.parts.accounts.now_defaulting(defaults);
        }
        if let Some(quota) = built.per_ip {
            // Checked when built.
            let _ = self.parts.per_ip.set_quota(quota);
        }
        if let Some(cards) = built.cards {
            if let Ok(answered) = cards.answered() {
                self.parts.agent.replace_extended_cards(answered);
            }
            *self.parts.cards.write_locked() = Arc::new(cards.served());
            // Receipts name the card served from now on, and only once it is.
            if let Some(receipts) = &self.parts.receipts {
                receipts.card_served(cards.card.bytes());
            }
        }
        if let (Some(loaded), Some(running)) = (built.authorization, &self.parts.authorization) {
            notes.push(format!(
                "authorization: {} Cedar policies in force",
                loaded.policy_count()
            ));
            running.replace(loaded);
        }
        if let Some(directives) = built.level {
            match level::set(&directives) {
                Ok(LevelSet::EnvironmentDecides) => notes.push(
                    "log.level: RUST_LOG is set and decides which lines are written".to_owned(),
                ),
                Ok(_) => {}
                Err(why) => notes.push(why),
            }
        }
        notes
    }
}

#[async_trait::async_trait]
impl PolicyReload for Reloader {
    async fn reload(&self, trigger: ReloadTrigger) -> Result<Reloaded, ReloadRefused> {
        let outcome = self.reload_file(&trigger).await;
        // Audited before it is logged: whoever reads the line finds the record.
        self.audit(&trigger, &outcome).await;
        log(&trigger, &outcome);
        // The others read their own files again; a reload they hear is not told on, and this
        // instance does not hear its own (it would read its file again for two minutes).
        if let (Ok(reloaded), false) = (&outcome, matches!(trigger, ReloadTrigger::Heard))
            && !reloaded.applied.is_empty()
        {
            self.parts.changes.tell_others(Change::Policy);
        }
        outcome
    }

    async fn may_reload(&self, admin_name: &str) -> bool {
        let in_force = self.in_force.lock().await;
        in_force
            .policy
            .admin
            .reloaders
            .iter()
            .any(|name| name == admin_name)
    }
}

impl Reloader {
    /// A reload asked for (by an administrator, or `SIGHUP` as the operator) goes into the
    /// audit log, applied or refused; one heard from another instance is that one's.
    async fn audit(&self, trigger: &ReloadTrigger, outcome: &Result<Reloaded, ReloadRefused>) {
        let caller = match trigger {
            ReloadTrigger::Admin(caller) => caller.clone(),
            ReloadTrigger::Signal => Caller {
                actor: Actor::Operator,
                client: "SIGHUP".to_owned(),
            },
            _ => return,
        };
        let (verdict, detail) = match outcome {
            Ok(reloaded) => (
                crate::store::AuditOutcome::Ok,
                format!(
                    "applied: {}; restart needed: {}",
                    reloaded.applied.join(", "),
                    reloaded.restart_needed.join(", ")
                ),
            ),
            Err(refused) => (
                crate::store::AuditOutcome::Refused(String::new()),
                refused.0.clone(),
            ),
        };
        self.parts
            .accounts
            .record_policy_reload(&caller, verdict, detail)
            .await;
    }
}

/// One line for every reload that did something or was refused.
fn log(trigger: &ReloadTrigger, outcome: &Result<Reloaded, ReloadRefused>) {
    let by = match trigger {
        ReloadTrigger::Signal => "SIGHUP",
        ReloadTrigger::Admin(_) => "the admin API",
        _ => "another instance's reload",
    };
    match outcome {
        Ok(reloaded) if reloaded == &Reloaded::default() => {
            tracing::debug!(by, "policy read again: nothing changed");
        }
        Ok(reloaded) if reloaded.applied.is_empty() && reloaded.notes.is_empty() => {
            tracing::info!(
                by,
                restart_needed = %reloaded.restart_needed.join(", "),
                "policy read again: nothing applied, and what changed needs a restart"
            );
        }
        Ok(reloaded) => tracing::info!(
            by,
            applied = %reloaded.applied.join(", "),
            restart_needed = %reloaded.restart_needed.join(", "),
            notes = %reloaded.notes.join("; "),
            "policy reloaded"
        ),
        Err(refused) => tracing::warn!(by, "{refused}"),
    }
}

/// How long a file read for a reload heard from another instance must keep its text.
const SETTLE: std::time::Duration = std::time::Duration::from_millis(200);

/// Whether the file at `path` still has the text of `digest` a moment later. No operator
/// stands behind a reload heard from another instance, and a file rewritten in place (not
/// replaced whole) can be read half-written — possibly still a valid policy, as an empty file
/// is; a `SIGHUP` or the admin API come after the operator's write and read at once.
async fn settled(path: &std::path::Path, digest: &[u8; 32]) -> bool {
    tokio::time::sleep(SETTLE).await;
    crate::config::read_policy_file(path)
        .is_ok_and(|text| <[u8; 32]>::from(Sha256::digest(text.as_bytes())) == *digest)
}

/// After a reload anywhere, how often this instance reads its own file again, and for how long.
const RECHECK_EVERY: std::time::Duration = std::time::Duration::from_secs(5);
const RECHECK_FOR: u32 = 24;

/// Hears that another instance reloaded its policy (or that changes may have been missed) and
/// reads this instance's file again: at once, then every [`RECHECK_EVERY`] for two minutes
/// while its text has not changed, so a file that reaches this host a little after the other's
/// (configuration management, a mounted volume) is still applied without a `SIGHUP`.
pub(super) struct ReloadOnChange(pub(super) Arc<Reloader>);

impl ChangeListener for ReloadOnChange {
    fn changed(&self, change: &Change) {
        if !matches!(change, Change::Policy | Change::Everyone) {
            return;
        }
        let reloader = self.0.clone();
        tokio::spawn(async move {
            for _ in 0..RECHECK_FOR {
                match reloader.reload(ReloadTrigger::Heard).await {
                    Ok(reloaded) if reloaded == Reloaded::default() => {}
                    // Applied, or a file that does not check: said, and done.
                    _ => return,
                }
                tokio::time::sleep(RECHECK_EVERY).await;
            }
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest_of(text: &str) -> [u8; 32] {
        Sha256::digest(text.as_bytes()).into()
    }

    #[tokio::test]
    async fn a_file_read_for_a_heard_reload_is_applied_only_once_its_text_holds() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("policy.toml");
        std::fs::write(&path, "[card]\nname = \"whole\"\n").unwrap();
        assert!(settled(&path, &digest_of("[card]\nname = \"whole\"\n")).await);

        // Read half-written (here: empty, a valid policy), then written on.
        std::fs::write(&path, "").unwrap();
        let writer = {
            let path = path.clone();
            tokio::spawn(async move {
                tokio::time::sleep(SETTLE / 4).await;
                std::fs::write(&path, "[card]\nname = \"later\"\n").unwrap();
            })
        };
        assert!(!settled(&path, &digest_of("")).await);
        writer.await.unwrap();

        // Gone meanwhile: not settled either.
        std::fs::remove_file(&path).unwrap();
        assert!(!settled(&path, &digest_of("")).await);
    }
}
