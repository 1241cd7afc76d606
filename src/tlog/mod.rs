//! An RFC 6962 (RFC 9162 §2.1) Merkle tree over a transparency log's entries, in the stored-hash
//! model of Go's `sumdb/tlog`: each append writes the leaf's hash and the hash of every subtree it
//! completes, once, and never changes them. Any tree hash, inclusion proof or consistency proof is
//! then a fold over a few stored hashes; nothing is kept in memory but the right edge.
//!
//! The functions here are pure: they name the [`Node`]s they need, the caller reads those (from
//! the store, in one go) and hands them back. [`proof`] builds and checks proofs, [`note`] signs
//! checkpoints as C2SP signed notes, [`tile`] names and frames the C2SP `tlog-tiles` resources.

pub mod note;
pub mod proof;
pub mod tile;

#[cfg(test)]
mod tests;

use sha2::{Digest, Sha256};

/// A SHA-256 hash, as every node of the tree holds.
pub type Hash = [u8; 32];

/// A node of the tree: the root of the complete subtree of `2^level` leaves that starts at leaf
/// `index << level`. Only complete subtrees are nodes, so a node's hash never changes once the
/// tree has grown past it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Node {
    /// Height above the leaves (0: a leaf).
    pub level: u8,
    /// Position among the nodes of its level, from the left.
    pub index: u64,
}

impl Node {
    /// The node of `level` at `index`.
    pub const fn new(level: u8, index: u64) -> Self {
        Self { level, index }
    }

    /// The first leaf it covers and the one past its last.
    pub fn leaves(self) -> (u64, u64) {
        let start = self.index << self.level;
        (start, start + (1 << self.level))
    }
}

/// RFC 6962's leaf hash: `SHA-256(0x00 || entry)`.
pub fn leaf_hash(entry: &[u8]) -> Hash {
    Sha256::new()
        .chain_update([0u8])
        .chain_update(entry)
        .finalize()
        .into()
}

/// RFC 6962's interior hash: `SHA-256(0x01 || left || right)`.
pub fn node_hash(left: &Hash, right: &Hash) -> Hash {
    Sha256::new()
        .chain_update([1u8])
        .chain_update(left)
        .chain_update(right)
        .finalize()
        .into()
}

/// The hash of the empty tree: `SHA-256("")`.
pub fn empty_tree_hash() -> Hash {
    Sha256::digest([]).into()
}

/// The nodes that together cover leaves `[start, end)`, from the left: the largest complete,
/// aligned subtrees that fit. Every range an RFC 6962 proof names is covered this way.
pub fn range_nodes(mut start: u64, end: u64) -> Vec<Node> {
    let mut nodes = Vec::new();
    while start < end {
        let mut level = if start == 0 {
            63
        } else {
            start.trailing_zeros()
        };
        while level > 0 && start.saturating_add(1u64 << level) > end {
            level -= 1;
        }
        nodes.push(Node::new(level as u8, start >> level));
        start += 1u64 << level;
    }
    nodes
}

/// The hash of a range from its [`range_nodes`]' hashes, in the same order: folded from the
/// right, as RFC 6962 hashes a tree whose size is no power of two.
pub fn fold(hashes: &[Hash]) -> Option<Hash> {
    let (last, rest) = hashes.split_last()?;
    Some(
        rest.iter()
            .rev()
            .fold(*last, |right, left| node_hash(left, &right)),
    )
}

/// RFC 6962's `MTH` over leaf hashes held in memory (a tile's, an auditor's): the hash of
/// the tree they make, [`empty_tree_hash`] for none.
pub fn tree_hash(leaves: &[Hash]) -> Hash {
    match leaves {
        [] => empty_tree_hash(),
        [leaf] => *leaf,
        _ => {
            let k = 1usize << (usize::BITS - 1 - (leaves.len() - 1).leading_zeros());
            node_hash(&tree_hash(&leaves[..k]), &tree_hash(&leaves[k..]))
        }
    }
}

/// The right edge of a tree of `size` leaves: the nodes whose hashes are all an append needs,
/// and whose fold is the tree's hash.
pub fn right_edge(size: u64) -> Vec<Node> {
    range_nodes(0, size)
}

/// A tree's right edge with its hashes, grown one entry at a time; what each append wrote.
#[derive(Debug, Clone)]
pub struct Appender {
    size: u64,
    edge: Vec<(Node, Hash)>,
    written: Vec<(Node, Hash)>,
}

impl Appender {
    /// Starts from a tree of `size` leaves whose [`right_edge`] hashes `edge` holds, in order.
    pub fn new(size: u64, edge: Vec<Hash>) -> Result<Self, proof::ProofError> {
        let nodes = right_edge(size);
        if nodes.len() != edge.len() {
            return Err(proof::ProofError::Shape);
        }
        Ok(Self {
            size,
            edge: nodes.into_iter().zip(edge).collect(),
            written: Vec::new(),
        })
    }

    /// Appends `entry` at index [`Self::size`]; the nodes it completes are written too.
    pub fn append(&mut self, entry: &[u8]) -> u64 {
        let index = self.size;
        let mut node = Node::new(0, index);
        let mut hash = leaf_hash(entry);
        self.written.push((node, hash));
        while let Some(&(left, left_hash)) = self.edge.last() {
            if left.level != node.level {
                break;
            }
            self.edge.pop();
            hash = node_hash(&left_hash, &hash);
            node = Node::new(node.level + 1, node.index >> 1);
            self.written.push((node, hash));
        }
        self.edge.push((node, hash));
        self.size += 1;
        index
    }

    /// The number of leaves now.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The tree's hash now.
    pub fn root(&self) -> Hash {
        let hashes: Vec<Hash> = self.edge.iter().map(|(_, h)| *h).collect();
        fold(&hashes).unwrap_or_else(empty_tree_hash)
    }

    /// Every node the appends wrote, in the order they were made.
    pub fn written(&self) -> &[(Node, Hash)] {
        &self.written
    }
}
