//! What a conversation keeps of a message's parts, so that its owner reads every kind that
//! passed, not only the text a model reads: text; data as JSON; a file as its name, media type,
//! size and SHA-256, with its bytes when they are at most [`KEPT_FILE_BYTES`], or its URL when
//! at most [`KEPT_URL_CHARS`] long. A bigger file is described, its content left out (and said
//! so), so a conversation's row stays bounded whatever a partner sends.

use crate::protocol::types::{self as a2a, PartContent};
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

/// The most bytes of a file kept in a conversation.
pub const KEPT_FILE_BYTES: usize = 64 * 1024;
/// The longest file URL kept in a conversation.
pub const KEPT_URL_CHARS: usize = 2048;

/// `parts` as the conversation keeps them: a JSON array, one object per part.
pub(super) fn kept(parts: &[a2a::Part]) -> Value {
    Value::Array(parts.iter().map(kept_part).collect())
}

/// A peer's message as sent (a 0.3 file in 1.0's shape).
pub(super) fn kept_incoming(parts: &[a2a::IncomingPart]) -> Value {
    let parts: Vec<a2a::Part> = parts
        .iter()
        .filter_map(a2a::IncomingPart::as_sent)
        .collect();
    kept(&parts)
}

/// An agent's answer: its message's parts, then its artifacts' parts (each naming its
/// artifact).
pub(super) fn kept_answer(parts: &[a2a::Part], artifacts: &[a2a::Artifact]) -> Value {
    let mut kept: Vec<Value> = parts.iter().map(kept_part).collect();
    for artifact in artifacts {
        for part in &artifact.parts {
            let mut one = kept_part(part);
            one["artifactId"] = json!(artifact.artifact_id);
            kept.push(one);
        }
    }
    Value::Array(kept)
}

fn kept_part(part: &a2a::Part) -> Value {
    let mut kept = Map::new();
    match &part.content {
        PartContent::Text(text) => {
            kept.insert("kind".into(), json!("text"));
            kept.insert("text".into(), json!(text));
        }
        PartContent::Data(data) => {
            kept.insert("kind".into(), json!("data"));
            kept.insert("data".into(), data.clone());
        }
        PartContent::Raw(raw) => {
            kept.insert("kind".into(), json!("file"));
            let bytes = super::message::decode_base64(raw).unwrap_or_default();
            kept.insert("size".into(), json!(bytes.len()));
            kept.insert("sha256".into(), json!(hex(&Sha256::digest(&bytes))));
            if bytes.len() <= KEPT_FILE_BYTES {
                kept.insert("raw".into(), json!(raw));
            } else {
                kept.insert("contentOmitted".into(), json!(true));
            }
        }
        PartContent::Url(url) => {
            kept.insert("kind".into(), json!("file"));
            if url.chars().count() <= KEPT_URL_CHARS {
                kept.insert("url".into(), json!(url));
            } else {
                kept.insert("contentOmitted".into(), json!(true));
            }
        }
    }
    if let Some(name) = &part.filename {
        kept.insert("filename".into(), json!(name));
    }
    if let Some(media_type) = &part.media_type {
        kept.insert("mediaType".into(), json!(media_type));
    }
    Value::Object(kept)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;

    #[test]
    fn every_kind_is_kept_and_a_big_file_is_described_without_its_bytes() {
        let small = base64::engine::general_purpose::STANDARD.encode(b"hello");
        let big = base64::engine::general_purpose::STANDARD.encode(vec![7u8; KEPT_FILE_BYTES + 1]);
        let mut file = a2a::Part::of(PartContent::Raw(small.clone()));
        file.filename = Some("hello.txt".into());
        file.media_type = Some("text/plain".into());
        let kept = kept(&[
            a2a::Part::text("hi"),
            a2a::Part::of(PartContent::Data(json!({"order": 7}))),
            file,
            a2a::Part::of(PartContent::Raw(big)),
            a2a::Part::of(PartContent::Url("https://files.example/a.pdf".into())),
        ]);
        assert_eq!(kept[0], json!({"kind": "text", "text": "hi"}));
        assert_eq!(kept[1], json!({"kind": "data", "data": {"order": 7}}));
        assert_eq!(
            kept[2],
            json!({"kind": "file", "size": 5, "raw": small, "filename": "hello.txt", "mediaType": "text/plain",
                   "sha256": "2cf24dba5fb0a30e26e83b2ac5b9e29e1b161e5c1fa7425e73043362938b9824"})
        );
        assert_eq!(kept[3]["size"], json!(KEPT_FILE_BYTES + 1));
        assert_eq!(kept[3]["contentOmitted"], json!(true));
        assert!(kept[3].get("raw").is_none());
        assert_eq!(kept[4]["url"], json!("https://files.example/a.pdf"));
    }
}
