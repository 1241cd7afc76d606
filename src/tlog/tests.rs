//! The tree, its proofs and its notes against independent implementations: `ct-merkle` (an
//! in-memory RFC 6962 tree) and the recorded vectors of Go's `golang.org/x/mod/sumdb/note`.

use super::note::{Checkpoint, NoteSigner, NoteVerifier, TlogProof};
use super::proof::{self, ProofError};
use super::tile::{self, TilePath};
use super::*;
use ct_merkle::mem_backed_tree::MemoryBackedTree;
use std::collections::HashMap;

fn entry(i: u64) -> [u8; 32] {
    Sha256::digest(i.to_be_bytes()).into()
}

/// This crate's tree of `size` entries, as the stored hashes its appends wrote.
fn stored(size: u64) -> (Appender, HashMap<Node, Hash>) {
    let mut tree = Appender::new(0, Vec::new()).unwrap();
    for i in 0..size {
        assert_eq!(tree.append(&entry(i)), i);
    }
    let hashes = tree.written().iter().copied().collect();
    (tree, hashes)
}

fn range_hashes(ranges: &[(u64, u64)], stored: &HashMap<Node, Hash>) -> Vec<Hash> {
    ranges
        .iter()
        .map(|&(start, end)| {
            let hashes: Vec<Hash> = range_nodes(start, end).iter().map(|n| stored[n]).collect();
            fold(&hashes).unwrap()
        })
        .collect()
}

fn oracle(size: u64) -> MemoryBackedTree<Sha256, [u8; 32]> {
    let mut tree = MemoryBackedTree::new();
    for i in 0..size {
        tree.push(entry(i));
    }
    tree
}

fn flat(hashes: &[Hash]) -> Vec<u8> {
    hashes.concat()
}

#[test]
fn tree_hashes_and_inclusion_proofs_match_an_independent_rfc6962_tree() {
    for size in (1..=70).chain([255, 256, 257, 1000]) {
        let (tree, stored) = stored(size);
        let theirs = oracle(size);
        let root = tree.root();
        assert_eq!(
            root.as_slice(),
            theirs.root().as_bytes().as_slice(),
            "size {size}"
        );
        let leaves: Vec<Hash> = (0..size).map(|i| leaf_hash(&entry(i))).collect();
        assert_eq!(tree_hash(&leaves), root, "MTH over the leaves in memory");
        let edge: Vec<Hash> = right_edge(size).iter().map(|n| stored[n]).collect();
        assert_eq!(
            fold(&edge).unwrap(),
            root,
            "the right edge folds to the root"
        );
        for index in (0..size).step_by(if size > 100 { 37 } else { 1 }) {
            let ranges = proof::inclusion_ranges(index, size).unwrap();
            let ours = range_hashes(&ranges, &stored);
            let expected = theirs.prove_inclusion(index as usize);
            assert_eq!(
                flat(&ours),
                expected.as_bytes(),
                "size {size} index {index}"
            );
            let leaf = leaf_hash(&entry(index));
            proof::verify_inclusion(index, size, &leaf, &ours, &root).unwrap();
            let mut bent = ours.clone();
            if let Some(first) = bent.first_mut() {
                first[0] ^= 1;
                assert_eq!(
                    proof::verify_inclusion(index, size, &leaf, &bent, &root),
                    Err(ProofError::Mismatch)
                );
            }
            let other = leaf_hash(&entry(size + 1));
            assert!(proof::verify_inclusion(index, size, &other, &ours, &root).is_err());
        }
    }
}

#[test]
fn consistency_proofs_match_an_independent_rfc6962_tree() {
    let mut roots = vec![empty_tree_hash()];
    let (_, stored) = stored(40);
    for size in 1..=40 {
        roots.push(
            oracle(size)
                .root()
                .as_bytes()
                .as_slice()
                .try_into()
                .unwrap(),
        );
    }
    for new in 1..=40u64 {
        let theirs = oracle(new);
        for old in 1..new {
            let ranges = proof::consistency_ranges(old, new).unwrap();
            let ours = range_hashes(&ranges, &stored);
            let expected = theirs.prove_consistency((new - old) as usize);
            assert_eq!(flat(&ours), expected.as_bytes(), "{old} -> {new}");
            let (a, b) = (&roots[old as usize], &roots[new as usize]);
            proof::verify_consistency((old, a), (new, b), &ours).unwrap();
            assert!(proof::verify_consistency((old, b), (new, b), &ours).is_err());
            if !ours.is_empty() {
                assert!(proof::verify_consistency((old, a), (new, b), &ours[1..]).is_err());
            }
        }
        proof::verify_consistency(
            (new, &roots[new as usize]),
            (new, &roots[new as usize]),
            &[],
        )
        .unwrap();
    }
    assert_eq!(proof::consistency_ranges(5, 4), Err(ProofError::Range));
}

#[test]
fn an_append_resumes_from_the_stored_right_edge_alone() {
    let (whole, stored) = stored(300);
    let (_, start) = self::stored(123);
    let edge = right_edge(123).iter().map(|n| start[n]).collect();
    let mut resumed = Appender::new(123, edge).unwrap();
    for i in 123..300 {
        resumed.append(&entry(i));
    }
    assert_eq!(resumed.root(), whole.root());
    for (node, hash) in resumed.written() {
        assert_eq!(stored[node], *hash, "{node:?} is written once, the same");
    }
    assert_eq!(
        Appender::new(5, vec![[0; 32]]).unwrap_err(),
        ProofError::Shape,
        "an edge of the wrong length is refused"
    );
    assert_eq!(
        Appender::new(0, Vec::new()).unwrap().root(),
        empty_tree_hash()
    );
}

/// Go's `golang.org/x/mod/sumdb/note` `TestSign` and `TestNewVerifier` vectors.
#[test]
fn notes_are_signed_and_keys_named_as_go_sumdb_note_does() {
    use base64::Engine;
    let skey = base64::engine::general_purpose::STANDARD
        .decode("AYEKFALVFGyNhPJEMzD1QIDr+Y7hfZx09iUvxdXHKDFz")
        .unwrap();
    let seed: [u8; 32] = skey[1..].try_into().unwrap();
    let signer =
        NoteSigner::new("PeterNeumann", ed25519_dalek::SigningKey::from_bytes(&seed)).unwrap();
    let vkey = "PeterNeumann+c74f20a3+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW";
    assert_eq!(signer.verifier().to_string(), vkey);
    let text = "If you think cryptography is the answer to your problem,\n\
                then you don't know what your problem is.\n";
    let want = "If you think cryptography is the answer to your problem,\n\
                then you don't know what your problem is.\n\n\
                \u{2014} PeterNeumann x08go/ZJkuBS9UG/SffcvIAQxVBtiFupLLr8pAcElZInNIuGUgYN1FFYC2pZSNXgKvqfqdngotpRZb6KE6RyyBwJnAM=\n";
    assert_eq!(signer.sign(text).unwrap(), want);
    let verifier = NoteVerifier::parse(vkey).unwrap();
    assert_eq!(verifier.open(want).unwrap(), text);
    let forged = want.replace("the answer", "an answer");
    assert!(verifier.open(&forged).is_err());
    let other =
        NoteVerifier::parse("EnochRoot+af0cfe78+ATtqJ7zOtqQtYqOo0CpvDXNlMhV3HeJDpjrASKGLWdop")
            .unwrap();
    assert!(
        other.open(want).is_err(),
        "another key's note is not signed"
    );
    for bad in [
        "PeterNeumann+cc469956+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TWBADKEY==",
        "PeterNeumann+173116ae+ZRpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
        "PeterNeumann+c74f20a4+ARpc2QcUPDhMQegwxbzhKqiBfsVkmqq/LDE4izWy10TW",
    ] {
        assert!(NoteVerifier::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn checkpoints_and_proofs_read_back_what_they_wrote() {
    let key = ed25519_dalek::SigningKey::from_bytes(&[7; 32]);
    let signer = NoteSigner::new("example.com/a2a-receipts", key).unwrap();
    let (tree, stored) = stored(21);
    let checkpoint = Checkpoint {
        origin: "example.com/a2a-receipts".into(),
        size: 21,
        root: tree.root(),
    };
    let note = signer.sign(&checkpoint.text()).unwrap();
    assert!(note.starts_with("example.com/a2a-receipts\n21\n"));
    let verifier = signer.verifier();
    assert_eq!(Checkpoint::open(&note, &verifier).unwrap(), checkpoint);
    let elsewhere = NoteSigner::new(
        "elsewhere.example/log",
        ed25519_dalek::SigningKey::from_bytes(&[7; 32]),
    )
    .unwrap();
    let foreign = elsewhere
        .sign(
            &Checkpoint {
                origin: "example.com/a2a-receipts".into(),
                ..checkpoint.clone()
            }
            .text(),
        )
        .unwrap();
    assert!(
        Checkpoint::open(&foreign, &verifier).is_err(),
        "signed by a key of another name"
    );
    let hashes = range_hashes(&proof::inclusion_ranges(6, 21).unwrap(), &stored);
    let document = TlogProof {
        index: 6,
        hashes,
        checkpoint: note,
    };
    let text = document.text();
    assert!(text.starts_with("c2sp.org/tlog-proof@v1\nindex 6\n"));
    assert_eq!(TlogProof::parse(&text).unwrap(), document);
    assert!(TlogProof::parse(&text.replace("index 6", "index 06")).is_err());
    assert!(TlogProof::parse(&text.replace("index 6", "index +6")).is_err());
    assert!(Checkpoint::parse("example.com/a2a-receipts\n+21\nAAAA\n").is_err());
}

#[test]
fn tile_paths_are_read_and_written_as_tlog_tiles_names_them() {
    assert_eq!(tile::path("0", 1_234_067, 256), "tile/0/x001/x234/067");
    assert_eq!(tile::path("entries", 5, 17), "tile/entries/005.p/17");
    assert_eq!(
        TilePath::parse("0/x001/x234/067"),
        Some(TilePath::Hashes {
            level: 0,
            index: 1_234_067,
            width: 256
        })
    );
    assert_eq!(
        TilePath::parse("entries/005.p/17"),
        Some(TilePath::Entries {
            index: 5,
            width: 17
        })
    );
    assert_eq!(
        TilePath::parse("2/000.p/1"),
        Some(TilePath::Hashes {
            level: 2,
            index: 0,
            width: 1
        })
    );
    for bad in [
        "0/1234",
        "0/x001/234/067",
        "0/001/x234",
        "0/005.p/0",
        "0/005.p/256",
        "0/005.p/07",
        "8/000",
        "01/000",
        "-1/000",
        "data/000",
        "0/x000/001",
        "0/00a",
    ] {
        assert_eq!(TilePath::parse(bad), None, "{bad}");
    }
    assert!(
        TilePath::parse("6/127").is_some() && TilePath::parse("6/128").is_none(),
        "the last tile of level 6"
    );
    assert!(
        TilePath::parse("0/x036/x028/x797/x018/x963/967").is_some(),
        "2^55 - 1"
    );
    let partial = TilePath::parse("1/000.p/3").unwrap();
    assert!(partial.within(3 * 256) && !partial.within(3 * 256 - 1));
    assert_eq!(partial.nodes().collect::<Vec<_>>()[2], Node::new(8, 2));
    let entries: Vec<&[u8]> = vec![b"a", b"", &[7u8; 300]];
    let bundle = tile::bundle(entries.clone());
    assert_eq!(&bundle[..3], &[0, 1, b'a']);
    assert_eq!(tile::unbundle(&bundle).unwrap(), entries);
    assert_eq!(tile::unbundle(&bundle[..bundle.len() - 1]), None);
}

#[test]
fn any_node_is_found_in_the_tiles_of_a_tree_that_holds_it() {
    let size = 70_000;
    let (_, stored) = stored(size);
    let tile_hashes = |tile: TilePath| -> Vec<Hash> { tile.nodes().map(|n| stored[&n]).collect() };
    for node in [
        Node::new(0, 0),
        Node::new(0, 69_999),
        Node::new(3, 17),
        Node::new(7, 300),
        Node::new(8, 1),
        Node::new(8, 272),
        Node::new(11, 33),
        Node::new(15, 1),
        Node::new(16, 0),
    ] {
        let Some((tile, offset, count)) = tile::tile_of(node, size) else {
            assert!(node.leaves().1 > size, "{node:?}");
            continue;
        };
        assert!(
            tile.within(size),
            "{node:?}: {tile:?} is served for this tree"
        );
        let hashes = tile_hashes(tile);
        assert_eq!(
            tree_hash(&hashes[offset..offset + count]),
            stored[&node],
            "{node:?}"
        );
    }
    assert_eq!(tile::tile_of(Node::new(17, 0), size), None);
    assert_eq!(
        TilePath::Hashes {
            level: 1,
            index: 1_234_067,
            width: 9
        }
        .path(),
        "tile/1/x001/x234/067.p/9"
    );
}
