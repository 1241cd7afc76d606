//! `receipt verify`'s check of the answer log: the receipt's inclusion proof against a
//! checkpoint signed with the log key the verified card names, and, with `--checkpoints DIR`,
//! that checkpoint's consistency with the last one remembered for that log (the Go sumdb
//! client's model): a log that forked or rewrote its past is refused, and both checkpoints are
//! kept as evidence.

use super::CliError;
use super::fetching::document;
use crate::jose::fetch::Fetcher;
use crate::tlog::note::{Checkpoint, NoteVerifier, TlogProof};
use crate::tlog::{self, Hash, proof, range_nodes, tile};
use serde_json::Value;
use sha2::{Digest, Sha256};
use std::path::Path;

/// The log a card declares for its receipts: the key that signs its checkpoints, and where it
/// is read.
pub(super) struct DeclaredLog {
    /// The log's key first, then the keys it retired (the card names them all).
    verifiers: Vec<NoteVerifier>,
    url: String,
}

impl DeclaredLog {
    /// The log in the receipts extension's parameters, if the card declares one.
    pub(super) fn of(params: &Value) -> Result<Option<Self>, CliError> {
        let Some(log) = params.get("log") else {
            return Ok(None);
        };
        let verifier = (log["vkey"].as_str())
            .and_then(|vkey| NoteVerifier::parse(vkey).ok())
            .filter(|v| Some(v.name()) == log["origin"].as_str())
            .ok_or_else(|| {
                CliError::new("the card's answer log names no valid key for its origin".to_owned())
            })?;
        let retired = (log["retiredVkeys"].as_array().into_iter().flatten())
            .filter_map(|vkey| NoteVerifier::parse(vkey.as_str()?).ok())
            .filter(|v| v.name() == verifier.name());
        let verifiers = std::iter::once(verifier.clone()).chain(retired).collect();
        let url = log["url"].as_str().unwrap_or_default().to_owned();
        Ok(Some(Self { verifiers, url }))
    }

    /// Where the receipt `jti`'s proof is read.
    pub(super) fn proof_url(&self, jti: &str) -> String {
        format!("{}proof/{jti}", self.url)
    }

    /// Checks `receipt`'s proof (a file or URL), and with `remembered`, the consistency of its
    /// checkpoint with the last one kept there.
    pub(super) async fn check(
        &self,
        fetcher: &Fetcher,
        (receipt, source): (&str, &str),
        remembered: Option<&Path>,
    ) -> Result<(), CliError> {
        let failed = |why: String| CliError::new(format!("log: {why}"));
        let proof = TlogProof::parse(&document(fetcher, source).await?)
            .map_err(|e| failed(e.to_string()))?;
        let checkpoint = Checkpoint::open_any(&proof.checkpoint, &self.verifiers).map_err(|e| {
            failed(format!(
                "checkpoint not verified with the card's log key: {e}"
            ))
        })?;
        let leaf = tlog::leaf_hash(&Sha256::digest(receipt.as_bytes()));
        proof::verify_inclusion(
            proof.index,
            checkpoint.size,
            &leaf,
            &proof.hashes,
            &checkpoint.root,
        )
        .map_err(|e| failed(format!("the receipt is not in the checkpoint: {e}")))?;
        println!(
            "log: receipt included at index {} of {} (checkpoint signed by {})",
            proof.index,
            checkpoint.size,
            self.verifiers[0].name()
        );
        if let Some(dir) = remembered {
            self.against_remembered(fetcher, dir, (&checkpoint, &proof.checkpoint))
                .await?;
        }
        Ok(())
    }

    /// Compares `checkpoint` with the one kept in `dir` for this log, proving the smaller a
    /// prefix of the larger from the log's tiles; keeps the larger.
    async fn against_remembered(
        &self,
        fetcher: &Fetcher,
        dir: &Path,
        (checkpoint, note): (&Checkpoint, &str),
    ) -> Result<(), CliError> {
        // Named by a hash of the log's origin, exactly: no two origins share a file, and a
        // rotated key keeps it (another key claiming the origin finds a checkpoint it cannot
        // verify, and is refused).
        let name: String = Sha256::digest(self.verifiers[0].name().as_bytes())
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        let kept_path = dir.join(format!("{name}.checkpoint"));
        let kept_note = match std::fs::read_to_string(&kept_path) {
            Ok(text) => Some(text),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => None,
            Err(e) => {
                return Err(CliError::new(format!(
                    "log: cannot read the remembered checkpoint {}: {}",
                    kept_path.display(),
                    e.kind()
                )));
            }
        };
        let kept = match &kept_note {
            Some(text) => Some(Checkpoint::open_any(text, &self.verifiers).map_err(|e| {
                CliError::new(format!(
                    "log: the remembered checkpoint does not verify: {e}"
                ))
            })?),
            None => None,
        };
        if let Some(kept) = &kept {
            let (old, new) = if kept.size <= checkpoint.size {
                (kept, checkpoint)
            } else {
                (checkpoint, kept)
            };
            if let Err(why) = self.consistent(fetcher, old, new).await {
                let evidence = dir.join(format!("{name}.inconsistent-{}", checkpoint.size));
                let both = format!("{}\n{note}", kept_note.as_deref().unwrap_or_default());
                let _ = std::fs::write(&evidence, both);
                return Err(CliError::new(format!(
                    "log: the checkpoint of {} entries is not consistent with the one remembered ({} entries): {why}; both kept in {}",
                    checkpoint.size,
                    kept.size,
                    evidence.display()
                )));
            }
            println!(
                "log: consistent with the remembered checkpoint of {} entries",
                kept.size
            );
        }
        if kept.as_ref().is_none_or(|kept| kept.size < checkpoint.size) {
            std::fs::create_dir_all(dir)
                .and_then(|()| std::fs::write(&kept_path, note))
                .map_err(|e| {
                    CliError::new(format!("log: cannot keep the checkpoint: {}", e.kind()))
                })?;
        }
        Ok(())
    }

    /// Proves `old` a prefix of `new` with hashes read from the log's tiles.
    async fn consistent(
        &self,
        fetcher: &Fetcher,
        old: &Checkpoint,
        new: &Checkpoint,
    ) -> Result<(), String> {
        let ranges = proof::consistency_ranges(old.size, new.size).map_err(|e| e.to_string())?;
        let mut hashes = Vec::with_capacity(ranges.len());
        for (start, end) in ranges {
            let mut nodes = Vec::new();
            for node in range_nodes(start, end) {
                nodes.push(self.node_hash(fetcher, node, new.size).await?);
            }
            hashes.push(tlog::fold(&nodes).ok_or("an empty range")?);
        }
        proof::verify_consistency((old.size, &old.root), (new.size, &new.root), &hashes)
            .map_err(|e| e.to_string())
    }

    /// A node's hash from the tile that holds it in a tree of `size`.
    async fn node_hash(
        &self,
        fetcher: &Fetcher,
        node: tlog::Node,
        size: u64,
    ) -> Result<Hash, String> {
        let (tile, offset, count) = tile::tile_of(node, size).ok_or("a node past the tree")?;
        let bytes = fetcher
            .bytes(&format!("{}{}", self.url, tile.path()))
            .await
            .map_err(|e| e.to_string())?;
        let hashes: Vec<Hash> = bytes
            .chunks_exact(32)
            .map(|chunk| chunk.try_into().unwrap_or([0; 32]))
            .collect();
        let run = hashes
            .get(offset..offset + count)
            .ok_or("a tile shorter than its width")?;
        Ok(tlog::tree_hash(run))
    }
}
