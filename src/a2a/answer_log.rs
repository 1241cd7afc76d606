//! The answer log: every receipt's entry (SHA-256 of the receipt) appended to an RFC 6962 tree
//! by one integrator at a time, each append signed as a C2SP checkpoint with the log's own key,
//! and read back as `tlog-tiles` resources and per-receipt `tlog-proof` documents.
//!
//! A receipt is queued in the transaction that stores its task's final state; the integrator
//! takes the queue every [`INTEGRATE_EVERY`] and the receipt promises inclusion within
//! [`MAX_MERGE_DELAY`]. The answer never waits for it. In a cluster every instance tries each
//! turn and the store lets one through (PostgreSQL's transaction-scoped advisory lock), so a
//! dead integrator's turn rolls back whole and the next instance takes over.

use crate::clock::Timestamp;
use crate::store::{LogStore, StoreError};
use crate::tlog::note::{Checkpoint, NoteError, NoteSigner, NoteVerifier, TlogProof};
use crate::tlog::tile::{self, TilePath};
use crate::tlog::{Appender, Hash, fold, proof, range_nodes, right_edge};
use serde_json::{Value, json};
use std::sync::Arc;
use std::time::Duration;

/// How often the integrator looks for receipts waiting.
pub const INTEGRATE_EVERY: Duration = Duration::from_secs(1);
/// The delay within which a receipt promises to be in a signed checkpoint (`log.mmd`).
pub const MAX_MERGE_DELAY: Duration = Duration::from_secs(10);
/// Most receipts appended in one turn: a turn's transaction stays short (it holds SQLite's
/// write turn, which every answer's exchange also needs).
pub const MOST_PER_TURN: u32 = 256;
/// The pause between two full turns, so the answers waiting to be written go first.
pub const BETWEEN_TURNS: Duration = Duration::from_millis(20);
/// Where the log is read, under the door's origin.
pub const PREFIX: &str = "/a2a-receipts";

/// Why the log could not answer or append.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LogError {
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// Nothing by that name: a tile past the tree, a receipt the log never had.
    #[error("not in the log")]
    NotFound,
    /// The receipt is queued: it will be in a checkpoint within the promised delay.
    #[error("the receipt is not in a checkpoint yet; it will be within {} seconds", MAX_MERGE_DELAY.as_secs())]
    Pending,
    /// What is stored does not hold together (the last checkpoint is not the log key's, the
    /// stored right edge does not hash to it, a hash is missing): the integrator stops rather
    /// than sign over it.
    #[error("the stored log does not match its last checkpoint: {0}")]
    Broken(String),
}

impl From<NoteError> for LogError {
    fn from(e: NoteError) -> Self {
        Self::Broken(e.to_string())
    }
}

/// The answer log of one gateway: its store, name and key.
#[derive(Debug, Clone)]
pub struct AnswerLog {
    store: Arc<dyn LogStore>,
    signer: NoteSigner,
    /// The signing key's verifier first, then the retired keys': a checkpoint signed by any of
    /// them is the log's.
    verifiers: Vec<NoteVerifier>,
    url: String,
}

impl AnswerLog {
    /// The log of the gateway at `door_url`, kept in `store`, signed with `key`.
    pub fn new(
        store: Arc<dyn LogStore>,
        door_url: &str,
        key: ed25519_dalek::SigningKey,
    ) -> Result<Self, NoteError> {
        let (origin, url) = names(door_url);
        let signer = NoteSigner::new(&origin, key)?;
        Ok(Self {
            store,
            verifiers: vec![signer.verifier()],
            signer,
            url,
        })
    }

    /// The log also takes checkpoints signed by the `retired` keys (verify-only, published in
    /// the card while receipts whose checkpoints they signed are kept).
    pub fn retiring(mut self, retired: &[ed25519_dalek::VerifyingKey]) -> Result<Self, NoteError> {
        for key in retired {
            let verifier = NoteVerifier::new(self.origin(), *key)?;
            if !self.verifiers.contains(&verifier) {
                self.verifiers.push(verifier);
            }
        }
        Ok(self)
    }

    /// The log's origin (its checkpoints' first line, and its key's name).
    pub fn origin(&self) -> &str {
        self.signer.name()
    }

    /// What a receipt promises (`log`): the origin and the delay, in seconds.
    pub fn promise(&self) -> Value {
        json!({"origin": self.origin(), "mmd": MAX_MERGE_DELAY.as_secs()})
    }

    /// What the card declares of the log: its origin, verifier key (and the retired ones'),
    /// where it is read, and the delay.
    pub fn card_params(&self) -> Value {
        let mut params = json!({
            "origin": self.origin(),
            "vkey": self.verifiers[0].to_string(),
            "url": self.url,
            "mmd": MAX_MERGE_DELAY.as_secs(),
        });
        if self.verifiers.len() > 1 {
            let retired: Vec<String> = self.verifiers[1..]
                .iter()
                .map(ToString::to_string)
                .collect();
            params["retiredVkeys"] = json!(retired);
        }
        params
    }

    /// Refuses a store whose log has another origin (the door's host or port changed): its
    /// checkpoints name the log they belong to, and this gateway would sign under another
    /// name. What the refusal says names the origins, never a secret.
    pub async fn check_origin(&self) -> Result<(), String> {
        let Some((_, note)) = self
            .store
            .latest_checkpoint()
            .await
            .map_err(|e| e.to_string())?
        else {
            return Ok(());
        };
        let stored = note.split('\n').next().unwrap_or_default();
        if stored == self.origin() {
            return Ok(());
        }
        Err(format!(
            "the answer log in this store is {stored:?}, and this door would sign it as {:?}: serve it at the same host and port (server.public_base_url)",
            self.origin()
        ))
    }

    /// One integrator's turn: appends what waits and signs the new checkpoint. How many were
    /// appended (0 when another process holds the turn, or nothing waits).
    pub async fn integrate(&self, now: Timestamp) -> Result<u64, LogError> {
        // Idle: nothing waits and the log has its first checkpoint. Asked of a reader, so an
        // idle gateway does not take the write turn every second.
        if self.store.pending_receipts(1).await? == 0
            && self.store.latest_checkpoint().await?.is_some()
        {
            return Ok(0);
        }
        let Some(mut turn) = self.store.begin_integration().await? else {
            return Ok(0);
        };
        let size = match turn.latest_checkpoint().await? {
            Some((size, note)) => {
                let signed = Checkpoint::open_any(&note, &self.verifiers)?;
                if signed.size != size {
                    return Err(LogError::Broken(format!(
                        "checkpoint row {size} says {}",
                        signed.size
                    )));
                }
                let edge = turn.log_hashes(&right_edge(size)).await?.ok_or_else(|| {
                    LogError::Broken("a hash of the right edge is missing".into())
                })?;
                if fold(&edge).unwrap_or_else(crate::tlog::empty_tree_hash) != signed.root {
                    return Err(LogError::Broken(format!(
                        "the stored tree of {size} does not hash to its checkpoint"
                    )));
                }
                Some((size, edge))
            }
            None => None,
        };
        let pending = turn.pending(MOST_PER_TURN).await?;
        if pending.is_empty() && size.is_some() {
            return Ok(0);
        }
        let (size, edge) = size.unwrap_or((0, Vec::new()));
        let mut tree = Appender::new(size, edge).map_err(|e| LogError::Broken(e.to_string()))?;
        for entry in &pending {
            tree.append(&entry.entry);
        }
        let checkpoint = Checkpoint {
            origin: self.origin().to_owned(),
            size: tree.size(),
            root: tree.root(),
        };
        let note = self.signer.sign(&checkpoint.text())?;
        turn.append(size, &pending, tree.written(), (tree.size(), &note, now))
            .await?;
        turn.commit().await?;
        Ok(tree.size() - size)
    }

    /// The latest signed checkpoint.
    pub async fn checkpoint(&self) -> Result<String, LogError> {
        Ok(self.latest().await?.1)
    }

    async fn latest(&self) -> Result<(u64, String), LogError> {
        self.store
            .latest_checkpoint()
            .await?
            .ok_or(LogError::NotFound)
    }

    /// A tile or entry bundle by its path after `tile/`.
    pub async fn tile(&self, path: &str) -> Result<Vec<u8>, LogError> {
        let tile = TilePath::parse(path).ok_or(LogError::NotFound)?;
        let (size, _) = self.latest().await?;
        if !tile.within(size) {
            return Err(LogError::NotFound);
        }
        let (first, last) = {
            let mut nodes = tile.nodes();
            let first = nodes.next().ok_or(LogError::NotFound)?;
            (first, nodes.last().unwrap_or(first))
        };
        match tile {
            TilePath::Hashes { .. } => {
                let hashes = (self.store)
                    .log_level(first.level, first.index, last.index + 1)
                    .await?;
                if hashes.len() as u64 != last.index + 1 - first.index {
                    return Err(LogError::Broken("a tile's hash is missing".into()));
                }
                Ok(hashes.concat())
            }
            TilePath::Entries { width, .. } => {
                let count = u32::try_from(width).unwrap_or(u32::MAX);
                let receipts = self.store.logged_receipts(first.index, count).await?;
                let in_order = (first.index..)
                    .zip(&receipts)
                    .all(|(i, r)| r.index == Some(i));
                if receipts.len() as u64 != width || !in_order {
                    return Err(LogError::Broken("an entry is missing".into()));
                }
                Ok(tile::bundle(receipts.iter().map(|r| r.entry.as_slice())))
            }
        }
    }

    /// The `tlog-proof` of the receipt `jti` against the latest checkpoint.
    pub async fn proof(&self, jti: &str) -> Result<String, LogError> {
        let receipt = self
            .store
            .logged_receipt(jti)
            .await?
            .ok_or(LogError::NotFound)?;
        let index = receipt.index.ok_or(LogError::Pending)?;
        let (size, note) = self.latest().await?;
        if index >= size {
            return Err(LogError::Pending);
        }
        let hashes = self
            .proof_hashes(proof::inclusion_ranges(index, size))
            .await?;
        Ok(TlogProof {
            index,
            hashes,
            checkpoint: note,
        }
        .text())
    }

    /// The hash of each range, from the stored nodes that cover it.
    async fn proof_hashes(
        &self,
        ranges: Result<Vec<(u64, u64)>, proof::ProofError>,
    ) -> Result<Vec<Hash>, LogError> {
        let ranges = ranges.map_err(|e| LogError::Broken(e.to_string()))?;
        let mut hashes = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            let nodes = range_nodes(start, end);
            let stored = (self.store.log_hashes(&nodes).await?)
                .ok_or_else(|| LogError::Broken("a proof's hash is missing".into()))?;
            hashes.push(fold(&stored).ok_or_else(|| LogError::Broken("an empty range".into()))?);
        }
        Ok(hashes)
    }
}

/// The log's origin (`host[:port]/a2a-receipts`, as C2SP names logs) and the URL it is read at.
fn names(door_url: &str) -> (String, String) {
    let base = door_url.trim_end_matches('/');
    let host = reqwest::Url::parse(base)
        .ok()
        .and_then(|url| {
            let host = url.host_str()?.to_owned();
            Some(match url.port() {
                Some(port) => format!("{host}:{port}"),
                None => host,
            })
        })
        .unwrap_or_else(|| base.to_owned());
    let origin_url = reqwest::Url::parse(base)
        .map(|url| url.origin().ascii_serialization())
        .unwrap_or_else(|_| base.to_owned());
    (format!("{host}{PREFIX}"), format!("{origin_url}{PREFIX}/"))
}

/// Runs the integrator until the process stops; a failed turn is logged and tried again.
pub async fn run_integrator(log: AnswerLog, clock: Arc<dyn crate::clock::Clock>) {
    let mut every = tokio::time::interval(INTEGRATE_EVERY);
    every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        every.tick().await;
        loop {
            match log.integrate(clock.now()).await {
                Ok(n) if u64::from(MOST_PER_TURN) == n => {
                    tokio::time::sleep(BETWEEN_TURNS).await;
                }
                Ok(_) => break,
                Err(error) => {
                    tracing::error!(%error, "the answer log's integrator could not append");
                    break;
                }
            }
        }
    }
}
