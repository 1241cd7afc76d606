//! The documents served from memory, built at start-up: the signed cards and the key set.

use super::{GatewayOptions, StartError, config};
use crate::a2a::agent::ExtendedCards;
use crate::a2a::card;
use crate::a2a::receipts::Receipts;
use crate::clock::Timestamp;
use crate::guard::scheme::Scheme;
use crate::http::document::{self, CachedDocument};
use crate::http::door::CardDocuments;
use crate::jose::{keys, sign};
use crate::store::{Store, StoreError};
use axum::body::Bytes;
use serde_json::value::RawValue;
use std::sync::Arc;

/// The documents served from memory: the signed cards and the key set.
pub(super) struct Documents {
    pub(super) cards: SignedCards,
    /// The keys that sign the cards, as start-up loaded them (and the key set publishes).
    pub(super) signing_keys: Vec<sign::CardSigningKey>,
    /// The cards as the door serves them, replaced whole by a reload.
    pub(super) served: Arc<std::sync::RwLock<Arc<CardDocuments>>>,
    pub(super) jwks: Arc<std::sync::RwLock<Arc<CachedDocument>>>,
    /// The key that signs the callers' assertions (taken by start-up).
    pub(super) caller_key: Option<crate::jose::sign::CardSigningKey>,
    /// What housekeeping needs to rebuild the key set when a day passes.
    pub(super) refresh: JwksRefresh,
    /// The receipts finished tasks are sealed with, when they are on.
    pub(super) receipts: Option<Arc<Receipts>>,
}

/// The signed cards, as the door serves them and as `GetExtendedAgentCard` answers.
pub(super) struct SignedCards {
    pub(super) card: CachedDocument,
    pub(super) extended: CachedDocument,
    /// The extended card, signed, for `GetExtendedAgentCard`.
    pub(super) extended_json: String,
    /// The extended card of peers signed in with an identity provider the public card does
    /// not list, by the provider's name: served, and signed for `GetExtendedAgentCard`.
    pub(super) issuer_extended: IssuerExtended,
    /// The extended cards narrowed to a limited peer's operations, made when asked.
    pub(super) peer_cards: Arc<crate::a2a::peer_card::PeerCards>,
    /// The door's RFC 9728 metadata, built with the cards from the same providers.
    pub(super) resource_metadata: Option<CachedDocument>,
}

/// What the cards are made of besides the policy: where the door is, who signs in, and what
/// answers behind it.
pub(super) struct CardInputs<'a> {
    pub(super) door_url: &'a str,
    pub(super) identities: &'a card::CardIdentities,
    pub(super) agent: Option<&'a crate::backend::AgentDescription>,
    /// The receipts the card declares, when they are on (told each card it signs).
    pub(super) receipts: Option<&'a Arc<Receipts>>,
}

/// The receipts, and the keys the key set publishes for them.
pub(super) type SealingKeys = (Arc<Receipts>, Vec<keys::PublishedKey>);

/// The gateway's receipts when `receipts.mode` is not off: signed with the first signing
/// receipt key (a shared secret refused), issued as the door's origin; with the keys the key
/// set publishes for them (retiring ones too, while receipts they signed are kept).
pub(super) fn receipts(
    options: &GatewayOptions,
    door_url: &str,
    store: &Store,
) -> Result<Option<SealingKeys>, StartError> {
    let policy = &options.policy;
    if !super::settings::receipts_on(policy) {
        return Ok(None);
    }
    let keys = (policy.signing)
        .load_receipt_keys(&options.data_dir)
        .map_err(|e| config(&e))?;
    let refused =
        |e: &dyn std::fmt::Display| StartError::Config(format!("signing.receipt_keys: {e}"));
    let key = keys
        .signing
        .into_iter()
        .next()
        .ok_or_else(|| refused(&"no key signs"))?;
    let published = (keys.published.iter())
        .filter_map(|key| {
            let kid = key.jwk["kid"].as_str()?.to_owned();
            let alg = crate::jose::receipt::ALGORITHMS
                .into_iter()
                .find(|alg| key.jwk["alg"].as_str() == Some(*alg))?;
            Some((kid, alg))
        })
        .collect();
    tracing::info!(kid = key.kid(), alg = key.alg(), mode = ?policy.receipts.mode, "finished tasks are sealed with receipts");
    let signer =
        crate::jose::receipt::ReceiptSigner::new(key, origin(door_url)).map_err(|e| refused(&e))?;
    let log_key = (policy.receipts)
        .load_log_key(&options.data_dir)
        .map_err(|e| config(&e))?;
    let retired = (policy.receipts)
        .retired_log_keys()
        .map_err(|e| config(&e))?;
    let log = crate::a2a::answer_log::AnswerLog::new(store.log(), door_url, log_key)
        .and_then(|log| log.retiring(&retired))
        .map_err(|e| StartError::Config(format!("receipts.log_key_file: {e}")))?;
    tracing::info!(
        origin = log.origin(),
        "receipts are appended to the answer log"
    );
    let receipts = Receipts::new(signer, policy.receipts.mode, published).with_log(log);
    Ok(Some((Arc::new(receipts), keys.published)))
}

/// The origin of `url` (scheme, host and port), as receipts and assertions name the gateway.
pub(super) fn origin(url: &str) -> String {
    reqwest::Url::parse(url)
        .map(|url| url.origin().ascii_serialization())
        .unwrap_or_else(|_| url.to_owned())
}

impl Documents {
    /// What the background work keeps once start-up is done: the key set's refresh, and the
    /// answer log its integrator appends to (when receipts are on).
    pub(super) fn kept(self) -> (JwksRefresh, Option<crate::a2a::answer_log::AnswerLog>) {
        let log = (self.receipts.as_ref()).and_then(|receipts| receipts.log().cloned());
        (self.refresh, log)
    }

    pub(super) async fn build(
        options: &GatewayOptions,
        store: &Store,
        inputs: &CardInputs<'_>,
        receipt_keys: Vec<keys::PublishedKey>,
    ) -> Result<Self, StartError> {
        let policy = &options.policy;
        let now = options.clock.now();
        let today = crate::clock::UtcDay::of(now);
        let policy_keys = policy
            .signing
            .load_keys(&options.data_dir)
            .map_err(|e| config(&e))?;
        let cards = SignedCards::build(policy, &policy_keys.signing, store, inputs, now).await?;
        if let Some(receipts) = inputs.receipts {
            receipts.card_served(cards.card.bytes());
        }
        // The callers' assertions' keys are published beside the card's, when an agent behind
        // the door is sent them.
        let asserts = policy.model.a2a.as_ref().is_some_and(|a2a| {
            policy.model.backend == crate::backend::settings::BackendKind::A2a
                && a2a.caller_assertion
        });
        let caller_keys = match asserts {
            true => policy
                .signing
                .load_caller_keys(&options.data_dir)
                .map_err(|e| config(&e))?,
            false => crate::jose::keys::PolicyKeys {
                signing: Vec::new(),
                published: Vec::new(),
            },
        };
        let mut published = policy_keys.published;
        published.extend(caller_keys.published);
        published.extend(receipt_keys);
        let published = Arc::new(published);
        let jwks = Arc::new(std::sync::RwLock::new(Arc::new(
            build_jwks(store, &published, today, now).await?,
        )));
        for key in &policy_keys.signing {
            tracing::info!(kid = key.kid(), alg = key.alg(), "the Agent Card is signed");
        }
        Ok(Self {
            served: Arc::new(std::sync::RwLock::new(Arc::new(cards.served()))),
            cards,
            signing_keys: policy_keys.signing,
            jwks: jwks.clone(),
            caller_key: caller_keys.signing.into_iter().next(),
            receipts: inputs.receipts.cloned(),
            refresh: JwksRefresh {
                published,
                document: jwks,
                day: today,
            },
        })
    }
}

impl SignedCards {
    /// The cards `policy` describes, signed with `signing_keys`; at start-up, and again when
    /// the policy is reloaded (with the keys start-up loaded: the key set publishes those).
    pub(super) async fn build(
        policy: &crate::config::Policy,
        signing_keys: &[sign::CardSigningKey],
        store: &Store,
        inputs: &CardInputs<'_>,
        now: Timestamp,
    ) -> Result<Self, StartError> {
        let jku = policy.signing.jwks_url.as_deref();
        let mut settings = super::settings::card(policy);
        if let Some(receipts) = inputs.receipts {
            let jwks_uri = jku.map_or_else(
                || format!("{}/.well-known/jwks.json", origin(inputs.door_url)),
                str::to_owned,
            );
            settings
                .own_extensions
                .push(receipts.card_extension(&jwks_uri));
        }
        let public_card =
            card::public_card(&settings, inputs.door_url, inputs.identities, inputs.agent);
        // What answers behind the door, as the extended card's own skill names it.
        let what = if inputs.agent.is_some() {
            "agent"
        } else {
            "model"
        };
        // Fail closed: a card holding values the SDKs drop would verify in some clients only.
        if sign::holds_droppable_values(&public_card) {
            return Err(StartError::Config(
                "the Agent Card would hold an empty value (check the [card] keys: no empty strings or lists)"
                    .to_owned(),
            ));
        }
        let vary = card_vary(policy);
        let signed_card =
            sign::sign_card(&public_card, signing_keys, jku).map_err(|e| config(&e))?;
        let card_bytes = Bytes::from(serde_json::to_vec(&signed_card).unwrap_or_default());
        let extended = card::extended_card(&public_card, None, what);
        let signed_extended =
            sign::sign_card(&extended, signing_keys, jku).map_err(|e| config(&e))?;
        let issuers = &inputs.identities.issuers;
        let (issuer_extended, unsigned_by_issuer) =
            issuer_extended_cards((&public_card, what), issuers, (signing_keys, jku), now)?;
        let extended_json = serde_json::to_string(&signed_extended).unwrap_or_default();
        within_what_clients_read(&card_bytes, extended_json.as_bytes())?;
        let extended_bytes = Bytes::from(extended_json.clone());
        let documents = store.documents();
        let extended_changed = documents
            .document_modified_at("extended-card", &document::etag_for(&extended_bytes), now)
            .await?;
        let card_changed = documents
            .document_modified_at("public-card", &document::etag_for(&card_bytes), now)
            .await?;
        let peer_cards = Arc::new(crate::a2a::peer_card::PeerCards::new(
            extended,
            unsigned_by_issuer,
            signing_keys.to_vec(),
            jku.map(str::to_owned),
        ));
        let resource_metadata = match policy.auth_schemes().contains(&Scheme::Jwt) {
            true => {
                Some(resource_metadata(inputs.door_url, &public_card, issuers, store, now).await?)
            }
            false => None,
        };
        Ok(Self {
            resource_metadata,
            peer_cards,
            // The same URL serves the extended card to authenticated peers.
            card: CachedDocument::new(card_bytes, card_changed, "public, max-age=60")
                .varying_on(&vary),
            extended: CachedDocument::new(extended_bytes, extended_changed, "private, max-age=60")
                .varying_on(&vary),
            extended_json,
            issuer_extended,
        })
    }

    /// The cards as the door serves them.
    pub(super) fn served(&self) -> CardDocuments {
        CardDocuments {
            resource_metadata: self.resource_metadata.clone(),
            peer_cards: self.peer_cards.clone(),
            card: self.card.clone(),
            extended: self.extended.clone(),
            issuer_extended: self
                .issuer_extended
                .iter()
                .map(|(name, (document, _))| (name.clone(), document.clone()))
                .collect(),
        }
    }

    /// The cards as `GetExtendedAgentCard` answers.
    pub(super) fn answered(&self) -> Result<ExtendedCards, StartError> {
        let raw = |json: &String| RawValue::from_string(json.clone()).map_err(|e| config(&e));
        let mut by_issuer = std::collections::HashMap::new();
        for (issuer, (_, json)) in &self.issuer_extended {
            by_issuer.insert(issuer.clone(), raw(json)?);
        }
        Ok(ExtendedCards {
            extended: raw(&self.extended_json)?,
            by_issuer,
            peer_cards: self.peer_cards.clone(),
        })
    }
}

/// What the card URL's answer varies on: it answers differently to requests carrying
/// credentials.
fn card_vary(policy: &crate::config::Policy) -> String {
    if policy.auth_schemes().contains(&Scheme::ApiKey) {
        format!("Authorization, {}", policy.auth.api_key_header)
    } else {
        "Authorization".to_owned()
    }
}

/// The extended card each non-public issuer's peers read, signed, by issuer name; and the
/// same cards unsigned, for narrowing to a peer's operations.
fn issuer_extended_cards(
    (public_card, what): (&serde_json::Value, &str),
    issuers: &[card::IssuerCard],
    (signing_keys, jku): (&[sign::CardSigningKey], Option<&str>),
    now: Timestamp,
) -> Result<
    (
        IssuerExtended,
        std::collections::HashMap<String, serde_json::Value>,
    ),
    StartError,
> {
    let mut issuer_extended = std::collections::HashMap::new();
    let mut unsigned = std::collections::HashMap::new();
    for issuer in issuers.iter().filter(|i| !i.public) {
        let extended = card::extended_card(public_card, Some(issuer), what);
        let signed = sign::sign_card(&extended, signing_keys, jku).map_err(|e| config(&e))?;
        let json = serde_json::to_string(&signed).unwrap_or_default();
        let bytes = Bytes::from(json.clone());
        let document =
            CachedDocument::new(bytes, now, "private, max-age=60").varying_on("Authorization");
        issuer_extended.insert(issuer.name.clone(), (document, json));
        unsigned.insert(issuer.name.clone(), extended);
    }
    Ok((issuer_extended, unsigned))
}

/// Each non-public issuer's extended card, as served and as text, by issuer name.
type IssuerExtended = std::collections::HashMap<String, (CachedDocument, String)>;

/// What housekeeping needs to rebuild the key set when the day changes.
pub(super) struct JwksRefresh {
    pub(super) published: Arc<Vec<keys::PublishedKey>>,
    pub(super) document: Arc<std::sync::RwLock<Arc<CachedDocument>>>,
    pub(super) day: crate::clock::UtcDay,
}

/// The JWKS of `published` on `today`, with its validators.
pub(super) async fn build_jwks(
    store: &Store,
    published: &[keys::PublishedKey],
    today: crate::clock::UtcDay,
    now: Timestamp,
) -> Result<CachedDocument, StoreError> {
    let bytes = Bytes::from(keys::jwks_on(published, today).to_string());
    let changed = store
        .documents()
        .document_modified_at("jwks", &document::etag_for(&bytes), now)
        .await?;
    Ok(CachedDocument::new(bytes, changed, "public, max-age=300"))
}

/// The door's RFC 9728 metadata document.
async fn resource_metadata(
    door_url: &str,
    card: &serde_json::Value,
    issuers: &[card::IssuerCard],
    store: &Store,
    now: Timestamp,
) -> Result<CachedDocument, StartError> {
    let document = crate::a2a::resource_metadata::document(door_url, card, issuers);
    let bytes = Bytes::from(document.to_string());
    let changed = store
        .documents()
        .document_modified_at("resource-metadata", &document::etag_for(&bytes), now)
        .await?;
    Ok(CachedDocument::new(bytes, changed, "public, max-age=300"))
}

/// Fails closed when a signed card is larger than what peergate's own client reads (and the
/// fetch limits of other verifiers are likely no larger): a card nobody can fetch.
fn within_what_clients_read(public: &[u8], extended: &[u8]) -> Result<(), StartError> {
    let limit = crate::jose::fetch::MAX_DOCUMENT_BYTES;
    for (which, bytes) in [("public", public), ("extended", extended)] {
        if bytes.len() > limit {
            return Err(StartError::Config(format!(
                "the {which} Agent Card would be {} bytes signed, more than the {limit} a client reads; shorten [card] or the agent's card (model.a2a.url)",
                bytes.len()
            )));
        }
    }
    Ok(())
}
