//! Inclusion and consistency proofs (RFC 6962 §2.1.1–2.1.2), built from stored hashes and
//! checked by RFC 9162 §2.1.3.2 and §2.1.4.2.
//!
//! A proof is a list of subtree hashes. Building one takes two steps, so the hashes can be read
//! in one go: [`inclusion_ranges`] / [`consistency_ranges`] name the leaf ranges whose hashes it
//! holds, [`super::range_nodes`] names the stored nodes of each range, and [`super::fold`] makes
//! each range's hash from them.

use super::{Hash, node_hash};

/// Why a proof does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ProofError {
    /// The index or sizes are out of order (an index past the tree, a tree that shrank).
    #[error("the index or tree sizes are out of range")]
    Range,
    /// The proof has the wrong number of hashes for its sizes, or the hashes read do not fit
    /// the nodes asked for.
    #[error("the proof has the wrong number of hashes")]
    Shape,
    /// The hashes do not lead to the tree hash.
    #[error("the proof does not lead to the tree hash")]
    Mismatch,
}

/// The largest power of two below `n` (for `n > 1`).
fn split(n: u64) -> u64 {
    1 << (63 - (n - 1).leading_zeros())
}

/// The leaf ranges whose hashes make the inclusion proof of leaf `index` in a tree of `size`
/// leaves (RFC 6962's `PATH`), from the leaf's sibling up.
pub fn inclusion_ranges(index: u64, size: u64) -> Result<Vec<(u64, u64)>, ProofError> {
    if index >= size {
        return Err(ProofError::Range);
    }
    let mut ranges = Vec::new();
    path(index, 0, size, &mut ranges);
    Ok(ranges)
}

fn path(index: u64, start: u64, end: u64, out: &mut Vec<(u64, u64)>) {
    if end - start <= 1 {
        return;
    }
    let k = split(end - start);
    if index - start < k {
        path(index, start, start + k, out);
        out.push((start + k, end));
    } else {
        path(index, start + k, end, out);
        out.push((start, start + k));
    }
}

/// The leaf ranges whose hashes prove a tree of `old` leaves a prefix of one of `new` leaves
/// (RFC 6962's `PROOF`). Empty when the sizes are equal or the old tree was empty.
pub fn consistency_ranges(old: u64, new: u64) -> Result<Vec<(u64, u64)>, ProofError> {
    if old > new {
        return Err(ProofError::Range);
    }
    let mut ranges = Vec::new();
    if old > 0 && old < new {
        subproof(old, 0, new, true, &mut ranges);
    }
    Ok(ranges)
}

fn subproof(m: u64, start: u64, end: u64, whole: bool, out: &mut Vec<(u64, u64)>) {
    let n = end - start;
    if m == n {
        if !whole {
            out.push((start, end));
        }
        return;
    }
    let k = split(n);
    if m <= k {
        subproof(m, start, start + k, whole, out);
        out.push((start + k, end));
    } else {
        subproof(m - k, start + k, end, false, out);
        out.push((start, start + k));
    }
}

/// Checks that `leaf` (a leaf hash) is leaf `index` of the tree of `size` leaves whose hash is
/// `root` (RFC 9162 §2.1.3.2).
pub fn verify_inclusion(
    index: u64,
    size: u64,
    leaf: &Hash,
    proof: &[Hash],
    root: &Hash,
) -> Result<(), ProofError> {
    if index >= size {
        return Err(ProofError::Range);
    }
    let (mut f, mut s, mut r) = (index, size - 1, *leaf);
    for p in proof {
        if s == 0 {
            return Err(ProofError::Shape);
        }
        if f & 1 == 1 || f == s {
            r = node_hash(p, &r);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            r = node_hash(&r, p);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::Shape);
    }
    if r != *root {
        return Err(ProofError::Mismatch);
    }
    Ok(())
}

/// Checks that the tree of `old` leaves hashing to `old_root` is a prefix of the tree of `new`
/// leaves hashing to `new_root` (RFC 9162 §2.1.4.2).
pub fn verify_consistency(
    (old, old_root): (u64, &Hash),
    (new, new_root): (u64, &Hash),
    proof: &[Hash],
) -> Result<(), ProofError> {
    if old > new {
        return Err(ProofError::Range);
    }
    if old == new || old == 0 {
        if !proof.is_empty() {
            return Err(ProofError::Shape);
        }
        return if old == 0 || old_root == new_root {
            Ok(())
        } else {
            Err(ProofError::Mismatch)
        };
    }
    let mut hashes: Vec<&Hash> = proof.iter().collect();
    if old.is_power_of_two() {
        hashes.insert(0, old_root);
    }
    let (first, rest) = hashes.split_first().ok_or(ProofError::Shape)?;
    let (mut f, mut s) = (old - 1, new - 1);
    while f & 1 == 1 {
        f >>= 1;
        s >>= 1;
    }
    let (mut fr, mut sr) = (**first, **first);
    for c in rest {
        if s == 0 {
            return Err(ProofError::Shape);
        }
        if f & 1 == 1 || f == s {
            fr = node_hash(c, &fr);
            sr = node_hash(c, &sr);
            while f & 1 == 0 && f != 0 {
                f >>= 1;
                s >>= 1;
            }
        } else {
            sr = node_hash(&sr, c);
        }
        f >>= 1;
        s >>= 1;
    }
    if s != 0 {
        return Err(ProofError::Shape);
    }
    if fr != *old_root || sr != *new_root {
        return Err(ProofError::Mismatch);
    }
    Ok(())
}
