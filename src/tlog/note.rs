//! C2SP signed notes (`c2sp.org/signed-note`) with Ed25519 keys, and the checkpoints
//! (`c2sp.org/tlog-checkpoint`) and proofs (`c2sp.org/tlog-proof@v1`) written in them.
//!
//! A note is UTF-8 text ending in a newline, a blank line, then one line per signature:
//! `— <key name> base64(key id || signature)`. The key id is the first four bytes of
//! `SHA-256(key name || 0x0A || 0x01 || public key)`, `0x01` naming Ed25519. A verifier key is
//! published as `<name>+<key id in hex>+base64(0x01 || public key)`.

use super::Hash;
use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use ed25519_dalek::{Signer, Verifier};
use sha2::{Digest, Sha256};

/// The signature type byte of Ed25519 keys.
const ED25519: u8 = 0x01;

/// What the first line of a proof says.
pub const PROOF_HEADER: &str = "c2sp.org/tlog-proof@v1";

/// Why a note, checkpoint, proof or key is refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum NoteError {
    /// The text is not in the format (which part is named).
    #[error("malformed {0}")]
    Malformed(&'static str),
    /// No signature by the expected key.
    #[error("the note carries no valid signature by {0}")]
    Unsigned(String),
    /// The checkpoint is for another log.
    #[error("the checkpoint is for another log ({0})")]
    Origin(String),
}

/// A key that signs notes: a name and an Ed25519 key.
#[derive(Clone)]
pub struct NoteSigner {
    name: String,
    key: ed25519_dalek::SigningKey,
}

impl std::fmt::Debug for NoteSigner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the key material.
        f.debug_struct("NoteSigner")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// A key that checks notes, as read from its published form.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoteVerifier {
    name: String,
    id: [u8; 4],
    key: ed25519_dalek::VerifyingKey,
}

fn key_id(name: &str, key: &ed25519_dalek::VerifyingKey) -> [u8; 4] {
    let digest = Sha256::new()
        .chain_update(name.as_bytes())
        .chain_update([b'\n', ED25519])
        .chain_update(key.as_bytes())
        .finalize();
    [digest[0], digest[1], digest[2], digest[3]]
}

/// Whether `name` can name a key: not empty, no spaces, pluses or newlines.
fn is_key_name(name: &str) -> bool {
    !name.is_empty() && !name.chars().any(|c| c.is_whitespace() || c == '+')
}

impl NoteSigner {
    /// `key` under `name` (a log signs under its origin).
    pub fn new(name: &str, key: ed25519_dalek::SigningKey) -> Result<Self, NoteError> {
        if !is_key_name(name) {
            return Err(NoteError::Malformed("key name"));
        }
        Ok(Self {
            name: name.to_owned(),
            key,
        })
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The verifier key, to publish.
    pub fn verifier(&self) -> NoteVerifier {
        let key = self.key.verifying_key();
        NoteVerifier {
            name: self.name.clone(),
            id: key_id(&self.name, &key),
            key,
        }
    }

    /// `text` (ending in a newline) with this key's signature line.
    pub fn sign(&self, text: &str) -> Result<String, NoteError> {
        if !text.ends_with('\n') || text.contains("\n\n") {
            return Err(NoteError::Malformed("note text"));
        }
        let signature = self.key.sign(text.as_bytes());
        let mut blob = self.verifier().id.to_vec();
        blob.extend_from_slice(&signature.to_bytes());
        Ok(format!(
            "{text}\n\u{2014} {} {}\n",
            self.name,
            STANDARD.encode(blob)
        ))
    }
}

impl NoteVerifier {
    /// The verifier of `key` under `name`.
    pub fn new(name: &str, key: ed25519_dalek::VerifyingKey) -> Result<Self, NoteError> {
        if !is_key_name(name) {
            return Err(NoteError::Malformed("key name"));
        }
        Ok(Self {
            name: name.to_owned(),
            id: key_id(name, &key),
            key,
        })
    }

    /// Reads a published verifier key (`name+hexid+base64`), checking its id.
    pub fn parse(vkey: &str) -> Result<Self, NoteError> {
        let bad = || NoteError::Malformed("verifier key");
        let mut parts = vkey.splitn(3, '+');
        let (name, id, key) = (
            parts.next().ok_or_else(bad)?,
            parts.next().ok_or_else(bad)?,
            parts.next().ok_or_else(bad)?,
        );
        let bytes = STANDARD.decode(key).map_err(|_| bad())?;
        let (&kind, raw) = bytes.split_first().ok_or_else(bad)?;
        let raw: [u8; 32] = raw.try_into().map_err(|_| bad())?;
        let key = ed25519_dalek::VerifyingKey::from_bytes(&raw).map_err(|_| bad())?;
        if kind != ED25519 || !is_key_name(name) || id.len() != 8 {
            return Err(bad());
        }
        let id_value = u32::from_str_radix(id, 16).map_err(|_| bad())?;
        if id_value.to_be_bytes() != key_id(name, &key) {
            return Err(bad());
        }
        Ok(Self {
            name: name.to_owned(),
            id: id_value.to_be_bytes(),
            key,
        })
    }

    /// The key's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Checks `note` for this key's signature; its text when signed.
    pub fn open<'n>(&self, note: &'n str) -> Result<&'n str, NoteError> {
        let bad = NoteError::Malformed("signed note");
        let split = note.find("\n\n").ok_or(bad.clone())?;
        let (text, signatures) = (&note[..=split], &note[split + 2..]);
        if !signatures.ends_with('\n') {
            return Err(bad);
        }
        for line in signatures.lines() {
            let rest = line.strip_prefix("\u{2014} ").ok_or(bad.clone())?;
            let (name, blob) = rest.split_once(' ').ok_or(bad.clone())?;
            let Ok(blob) = STANDARD.decode(blob) else {
                return Err(bad);
            };
            if name != self.name || blob.len() != 68 || blob[..4] != self.id {
                continue;
            }
            let signature =
                ed25519_dalek::Signature::from_slice(&blob[4..]).map_err(|_| bad.clone())?;
            if self.key.verify(text.as_bytes(), &signature).is_ok() {
                return Ok(text);
            }
        }
        Err(NoteError::Unsigned(self.name.clone()))
    }
}

impl std::fmt::Display for NoteVerifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let mut key = vec![ED25519];
        key.extend_from_slice(self.key.as_bytes());
        write!(
            f,
            "{}+{:08x}+{}",
            self.name,
            u32::from_be_bytes(self.id),
            STANDARD.encode(key)
        )
    }
}

/// A decimal as C2SP writes one: ASCII digits, no sign, no leading zero (but `0` itself).
fn canonical_number(text: &str) -> bool {
    !text.is_empty()
        && text.bytes().all(|b| b.is_ascii_digit())
        && (text == "0" || !text.starts_with('0'))
}

/// A log's checkpoint: its origin, size and tree hash.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checkpoint {
    /// The log's name, also the name of the key that signs it.
    pub origin: String,
    /// Leaves in the tree.
    pub size: u64,
    /// The tree's hash.
    pub root: Hash,
}

impl Checkpoint {
    /// The note text (unsigned).
    pub fn text(&self) -> String {
        format!(
            "{}\n{}\n{}\n",
            self.origin,
            self.size,
            STANDARD.encode(self.root)
        )
    }

    /// Reads the checkpoint of a signed `note`, checking the signature of `log` and that it
    /// names `log`'s origin.
    pub fn open(note: &str, log: &NoteVerifier) -> Result<Self, NoteError> {
        let text = log.open(note)?;
        let checkpoint = Self::parse(text)?;
        if checkpoint.origin != log.name() {
            return Err(NoteError::Origin(checkpoint.origin));
        }
        Ok(checkpoint)
    }

    /// [`Self::open`] with any of `keys` (a log's current key and the ones it retired), all
    /// under the log's one name.
    pub fn open_any(note: &str, keys: &[NoteVerifier]) -> Result<Self, NoteError> {
        let mut last = NoteError::Unsigned(String::new());
        for key in keys {
            match Self::open(note, key) {
                Ok(checkpoint) => return Ok(checkpoint),
                Err(e) => last = e,
            }
        }
        Err(last)
    }

    /// Reads a checkpoint's text (extension lines after the hash are allowed and ignored).
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let bad = || NoteError::Malformed("checkpoint");
        let mut lines = text.split('\n');
        let origin = lines.next().filter(|o| !o.is_empty()).ok_or_else(bad)?;
        let size = lines.next().ok_or_else(bad)?;
        if !canonical_number(size) {
            return Err(bad());
        }
        let size = size.parse().map_err(|_| bad())?;
        let root = STANDARD
            .decode(lines.next().ok_or_else(bad)?)
            .map_err(|_| bad())?
            .try_into()
            .map_err(|_| bad())?;
        Ok(Self {
            origin: origin.to_owned(),
            size,
            root,
        })
    }
}

/// A `c2sp.org/tlog-proof@v1` document: an entry's index, its inclusion proof and the signed
/// checkpoint the proof leads to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlogProof {
    /// The entry's index.
    pub index: u64,
    /// From the leaf's sibling up.
    pub hashes: Vec<Hash>,
    /// The signed checkpoint, verbatim.
    pub checkpoint: String,
}

impl TlogProof {
    /// The document's text.
    pub fn text(&self) -> String {
        let mut out = format!("{PROOF_HEADER}\nindex {}\n", self.index);
        for hash in &self.hashes {
            out.push_str(&STANDARD.encode(hash));
            out.push('\n');
        }
        out.push('\n');
        out.push_str(&self.checkpoint);
        out
    }

    /// Reads a document (an `extra` line is allowed and ignored).
    pub fn parse(text: &str) -> Result<Self, NoteError> {
        let bad = || NoteError::Malformed("proof");
        let (head, checkpoint) = text.split_once("\n\n").ok_or_else(bad)?;
        let mut lines = head.split('\n');
        if lines.next() != Some(PROOF_HEADER) {
            return Err(bad());
        }
        let mut line = lines.next().ok_or_else(bad)?;
        if line.starts_with("extra ") {
            line = lines.next().ok_or_else(bad)?;
        }
        let index = line.strip_prefix("index ").ok_or_else(bad)?;
        if !canonical_number(index) {
            return Err(bad());
        }
        let index = index.parse().map_err(|_| bad())?;
        let hashes = lines
            .map(|l| STANDARD.decode(l).ok().and_then(|h| h.try_into().ok()))
            .collect::<Option<Vec<Hash>>>()
            .ok_or_else(bad)?;
        Ok(Self {
            index,
            hashes,
            checkpoint: checkpoint.to_owned(),
        })
    }
}
