//! What a conversation keeps of a message's parts (a JSON array, one object per part), so that its owner reads every kind that
//! passed, not only the text a model reads: text; data as JSON; a file as its name, media type,
//! size and SHA-256, with its bytes when they are at most [`KEPT_FILE_BYTES`], or its URL when
//! at most [`KEPT_URL_CHARS`] long. A bigger file is described, its content left out (and said
//! so), so a conversation's row stays bounded whatever a partner sends.

use crate::protocol::types::{self as a2a, PartContent};
use serde::Serialize;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// The most bytes of a file kept in a conversation.
pub const KEPT_FILE_BYTES: usize = 64 * 1024;
/// The longest file URL kept in a conversation.
pub const KEPT_URL_CHARS: usize = 2048;

/// One part as kept: borrowed from the message, written once as JSON (a turn pays one
/// serialization per message, no tree of values).
#[derive(Serialize, Default)]
#[serde(rename_all = "camelCase")]
struct KeptPart<'a> {
    kind: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<&'a Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    raw: Option<&'a str>,
    /// The URL as kept (see [`KeptPart::url`]).
    #[serde(rename = "url", skip_serializing_if = "Option::is_none")]
    kept_url: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    query_omitted: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    size: Option<usize>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sha256: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    content_omitted: bool,
    /// Bytes that are not base64 (an agent's answer may carry anything): neither kept nor
    /// described by a size and digest of nothing.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    undecodable: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    filename: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    media_type: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    artifact_id: Option<&'a str>,
}

impl<'a> KeptPart<'a> {
    fn text(text: &'a str) -> Self {
        Self {
            kind: "text",
            text: Some(text),
            ..Self::default()
        }
    }

    fn data(data: &'a Value) -> Self {
        Self {
            kind: "data",
            data: Some(data),
            ..Self::default()
        }
    }

    /// A file's bytes (base64): its size and digest, and the bytes within the bound.
    fn raw(raw: &'a str) -> Self {
        let Some(bytes) = super::message::decode_base64(raw) else {
            return Self {
                kind: "file",
                content_omitted: true,
                undecodable: true,
                ..Self::default()
            };
        };
        let within = bytes.len() <= KEPT_FILE_BYTES;
        Self {
            kind: "file",
            size: Some(bytes.len()),
            sha256: Some(hex(&Sha256::digest(&bytes))),
            raw: within.then_some(raw),
            content_omitted: !within,
            ..Self::default()
        }
    }

    /// A file's URL within the bound, without its query, fragment or credentials (a signed
    /// download link carries its grant there, which the conversation does not keep).
    fn url(url: &'a str) -> Self {
        let kept = crate::net::url::without_secrets(url);
        let (kept, query_omitted) = match kept {
            Some((kept, had_more)) if kept.chars().count() <= KEPT_URL_CHARS => {
                (Some(kept), had_more)
            }
            _ => (None, false),
        };
        Self {
            kind: "file",
            content_omitted: kept.is_none(),
            kept_url: kept,
            query_omitted,
            ..Self::default()
        }
    }

    fn of(part: &'a a2a::Part) -> Self {
        let kept = match &part.content {
            PartContent::Text(text) => Self::text(text),
            PartContent::Data(data) => Self::data(data),
            PartContent::Raw(raw) => Self::raw(raw),
            PartContent::Url(url) => Self::url(url),
        };
        kept.named(part.filename.as_deref(), part.media_type.as_deref())
    }

    /// A peer's part as sent (a 0.3 file as its bytes or URL, with its name and type);
    /// `None` for a 0.3 file with neither, which the message's checks refuse.
    fn incoming(part: &'a a2a::IncomingPart) -> Option<Self> {
        let kept = match part {
            a2a::IncomingPart {
                text: Some(text), ..
            } => Self::text(text),
            a2a::IncomingPart {
                data: Some(data), ..
            } => Self::data(data),
            a2a::IncomingPart { raw: Some(raw), .. } => Self::raw(raw),
            a2a::IncomingPart { url: Some(url), .. } => Self::url(url),
            a2a::IncomingPart {
                file: Some(file), ..
            } => {
                let kept = match (&file.bytes, &file.uri) {
                    (Some(bytes), _) => Self::raw(bytes),
                    (None, Some(uri)) => Self::url(uri),
                    (None, None) => return None,
                };
                return Some(kept.named(file.name.as_deref(), file.mime_type.as_deref()));
            }
            _ => return None,
        };
        Some(kept.named(part.filename.as_deref(), part.media_type.as_deref()))
    }

    fn named(mut self, filename: Option<&'a str>, media_type: Option<&'a str>) -> Self {
        self.filename = filename;
        self.media_type = media_type;
        self
    }
}

/// A model's answer: its text, as one text part.
pub(super) fn kept_text(text: &str) -> String {
    json(vec![KeptPart::text(text)])
}

/// A peer's message as sent.
pub(super) fn kept_incoming(parts: &[a2a::IncomingPart]) -> String {
    json(parts.iter().filter_map(KeptPart::incoming).collect())
}

/// An agent's answer: its message's parts, then its artifacts' parts (each naming its
/// artifact).
pub(super) fn kept_answer(parts: &[a2a::Part], artifacts: &[a2a::Artifact]) -> String {
    let mut kept: Vec<KeptPart<'_>> = parts.iter().map(KeptPart::of).collect();
    for artifact in artifacts {
        kept.extend(artifact.parts.iter().map(|part| KeptPart {
            artifact_id: Some(&artifact.artifact_id),
            ..KeptPart::of(part)
        }));
    }
    json(kept)
}

fn json(kept: Vec<KeptPart<'_>>) -> String {
    // Strings, numbers and JSON values only: serializing cannot fail.
    serde_json::to_string(&kept).unwrap_or_else(|_| "[]".to_owned())
}

fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write as _;
    bytes.iter().fold(String::with_capacity(64), |mut hex, b| {
        let _ = write!(hex, "{b:02x}");
        hex
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use base64::Engine as _;
    use serde_json::json;

    #[test]
    fn every_kind_is_kept_a_big_file_described_and_a_links_grant_left_out() {
        let small = base64::engine::general_purpose::STANDARD.encode(b"hello");
        let big = base64::engine::general_purpose::STANDARD.encode(vec![7u8; KEPT_FILE_BYTES + 1]);
        let mut file = a2a::Part::of(PartContent::Raw(small.clone()));
        file.filename = Some("hello.txt".into());
        file.media_type = Some("text/plain".into());
        let kept: Value = serde_json::from_str(&kept_answer(
            &[
                a2a::Part::text("hi"),
                a2a::Part::of(PartContent::Data(json!({"order": 7}))),
                file,
                a2a::Part::of(PartContent::Raw(big)),
                a2a::Part::of(PartContent::Url("https://files.example/a.pdf".into())),
                a2a::Part::of(PartContent::Url(
                    "https://u:p@files.example/b.pdf?sig=secret#x".into(),
                )),
                a2a::Part::of(PartContent::Raw("not base64 at all!".into())),
            ],
            &[],
        ))
        .unwrap();
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
        assert!(kept[4].get("queryOmitted").is_none());
        // A signed link's grant is not kept.
        assert_eq!(kept[5]["url"], json!("https://files.example/b.pdf"));
        assert_eq!(kept[5]["queryOmitted"], json!(true));
        assert_eq!(
            kept[6],
            json!({"kind": "file", "contentOmitted": true, "undecodable": true})
        );
    }
}
