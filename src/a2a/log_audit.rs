//! `peergate log audit`: the operator's check that the answer log is what its checkpoints
//! signed. It recomputes the tree from the stored receipts alone (each entry from its receipt,
//! each hash from the entries), compares every hash the store keeps and every signed
//! checkpoint with what it recomputed, and names the first index that does not hold.

use crate::store::LogStore;
use crate::tlog::note::{Checkpoint, NoteVerifier};
use crate::tlog::{Appender, Hash, Node};
use sha2::{Digest, Sha256};
use std::collections::BTreeMap;

/// Receipts read per page.
const PAGE: u32 = 4096;

/// What an audit found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AuditOutcome {
    /// Every stored receipt, hash and checkpoint holds.
    Consistent {
        /// Receipts in the log.
        receipts: u64,
        /// Checkpoints checked.
        checkpoints: usize,
    },
    /// The first place the log does not hold: the index of the first entry concerned, and why.
    Broken {
        /// The first index that does not match.
        index: u64,
        /// What does not hold there.
        why: String,
    },
}

/// Audits the log in `store` against checkpoints signed by `keys` (the log's key and the ones
/// it retired).
pub async fn audit(
    store: &dyn LogStore,
    keys: &[NoteVerifier],
) -> Result<AuditOutcome, crate::store::StoreError> {
    let mut signed = BTreeMap::new();
    for (size, note) in store.checkpoints().await? {
        match Checkpoint::open_any(&note, keys) {
            Ok(checkpoint) if checkpoint.size == size => {
                signed.insert(size, checkpoint.root);
            }
            Ok(_) | Err(_) => {
                return Ok(broken(size, "its checkpoint is not signed by the log key"));
            }
        }
    }
    let mut tree = Appender::new(0, Vec::new()).expect("an empty tree has an empty edge");
    let mut written = 0;
    if let Some(root) = signed.get(&0)
        && *root != tree.root()
    {
        return Ok(broken(0, "the empty tree's checkpoint is another tree's"));
    }
    loop {
        let page = store.logged_receipts(tree.size(), PAGE).await?;
        if page.is_empty() {
            break;
        }
        for receipt in &page {
            let index = tree.size();
            if receipt.index != Some(index) {
                return Ok(broken(index, "no receipt holds this index"));
            }
            let entry: [u8; 32] = Sha256::digest(receipt.jws.as_bytes()).into();
            if receipt.entry != entry {
                return Ok(broken(
                    index,
                    "the stored receipt is not the one its entry commits to",
                ));
            }
            tree.append(&entry);
            if let Some(root) = signed.get(&tree.size())
                && *root != tree.root()
            {
                return Ok(broken(
                    index,
                    "the receipts do not hash to the checkpoint signed at this size",
                ));
            }
        }
        if let Some((index, why)) = compare_stored(store, &tree.written()[written..]).await? {
            return Ok(broken(index, &why));
        }
        written = tree.written().len();
    }
    if let Some((&size, _)) = signed.range(tree.size() + 1..).next() {
        return Ok(broken(
            tree.size(),
            &format!(
                "a checkpoint signs {size} entries and the store holds {}",
                tree.size()
            ),
        ));
    }
    Ok(AuditOutcome::Consistent {
        receipts: tree.size(),
        checkpoints: signed.len(),
    })
}

fn broken(index: u64, why: &str) -> AuditOutcome {
    AuditOutcome::Broken {
        index,
        why: why.to_owned(),
    }
}

/// Compares recomputed hashes with the store's, a level at a time: the first leaf of the first
/// one that differs, and why.
async fn compare_stored(
    store: &dyn LogStore,
    recomputed: &[(Node, Hash)],
) -> Result<Option<(u64, String)>, crate::store::StoreError> {
    let mut by_level: BTreeMap<u8, Vec<(Node, Hash)>> = BTreeMap::new();
    for (node, hash) in recomputed {
        by_level.entry(node.level).or_default().push((*node, *hash));
    }
    let mut first: Option<(u64, String)> = None;
    for (level, nodes) in by_level {
        let (start, end) = (nodes[0].0.index, nodes[nodes.len() - 1].0.index + 1);
        let stored = store.log_level(level, start, end).await?;
        for (i, (node, hash)) in nodes.iter().enumerate() {
            if stored.get(i) != Some(hash) {
                let leaf = node.leaves().0;
                if first.as_ref().is_none_or(|(at, _)| leaf < *at) {
                    let why = format!(
                        "the stored tree hash at level {level}, node {} differs from the receipts'",
                        node.index
                    );
                    first = Some((leaf, why));
                }
                break;
            }
        }
    }
    Ok(first)
}
