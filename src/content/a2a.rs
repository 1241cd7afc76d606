//! The A2A shapes the guard reads: a partner's message (its parts, their metadata, the
//! message's and the request's metadata) and an answer's parts and artifacts. Text is read as
//! text, data by its string values, a file by its name, media type and size, and its bytes
//! only when they are UTF-8 text within [`ContentRules::inspect_file_bytes`].

use super::compile::ContentRules;
use super::scan::Inspection;
use super::settings::PartKind;
use crate::protocol::types::{Artifact, IncomingMessage, IncomingPart, Part, PartContent};
use serde_json::Value;

impl Inspection<'_> {
    /// A partner's message and its request's `metadata`, masked in place; whether anything
    /// changed.
    pub fn message(
        &mut self,
        rules: &ContentRules,
        message: &mut IncomingMessage,
        request_metadata: Option<&mut Value>,
    ) -> bool {
        let mut changed = false;
        for part in &mut message.parts {
            changed |= self.incoming_part(rules, part);
        }
        for metadata in [message.metadata.as_mut(), request_metadata]
            .into_iter()
            .flatten()
        {
            changed |= self.json(metadata);
        }
        changed
    }

    fn incoming_part(&mut self, rules: &ContentRules, part: &mut IncomingPart) -> bool {
        let mut changed = false;
        if let Some(text) = &mut part.text {
            self.part(PartKind::Text, None, text.len() as u64);
            changed |= self.text(text);
        } else if let Some(data) = &mut part.data {
            self.part(PartKind::Data, None, json_size(data));
            changed |= self.json(data);
        } else {
            let media_type = (part.media_type.clone())
                .or_else(|| part.file.as_ref().and_then(|f| f.mime_type.clone()));
            let legacy = part.file.as_mut();
            let (raw, url, name) = match legacy {
                Some(file) => (&mut file.bytes, &mut file.uri, &mut file.name),
                None => (&mut part.raw, &mut part.url, &mut part.filename),
            };
            changed |= self.file((raw, url, name), media_type.as_deref(), rules);
        }
        // A 1.0 file's name was read with the file; any other part's, here.
        let read_with_file = part.text.is_none() && part.data.is_none() && part.file.is_none();
        if let Some(name) = part.filename.as_mut().filter(|_| !read_with_file) {
            changed |= self.text(name);
        }
        if let Some(metadata) = &mut part.metadata {
            changed |= self.json(metadata);
        }
        changed
    }

    /// A file: its name, its URL, and its bytes when they are text within the bound.
    fn file(
        &mut self,
        (raw, url, name): (
            &mut Option<String>,
            &mut Option<String>,
            &mut Option<String>,
        ),
        media_type: Option<&str>,
        rules: &ContentRules,
    ) -> bool {
        let mut changed = false;
        if let Some(raw) = raw {
            let size = raw.len() as u64 / 4 * 3;
            self.part(PartKind::File, media_type, size);
            if self.reads_file(size <= rules.inspect_file_bytes()) {
                changed |= self.file_bytes(raw);
            }
        }
        if let Some(url) = url {
            self.part(PartKind::File, media_type, url.len() as u64);
            changed |= self.text(url);
        }
        if let Some(name) = name {
            changed |= self.text(name);
        }
        changed
    }

    /// A file's base64 bytes (in either alphabet, padded or not, as ProtoJSON reads them),
    /// when they decode to UTF-8 text: masked and encoded again in the same form.
    fn file_bytes(&mut self, raw: &mut String) -> bool {
        let Some((bytes, form)) = crate::protocol::bytes::decode(raw) else {
            return false;
        };
        let Ok(mut text) = String::from_utf8(bytes) else {
            return false;
        };
        if !self.text(&mut text) {
            return false;
        }
        *raw = form.encode(text.as_bytes());
        true
    }

    /// An answer's parts, masked in place; whether anything changed.
    pub fn parts(&mut self, rules: &ContentRules, parts: &mut [Part]) -> bool {
        let mut changed = false;
        for part in parts {
            changed |= match &mut part.content {
                PartContent::Text(text) => {
                    self.part(PartKind::Text, None, text.len() as u64);
                    self.text(text)
                }
                PartContent::Data(data) => {
                    self.part(PartKind::Data, None, json_size(data));
                    self.json(data)
                }
                PartContent::Raw(raw) => {
                    let mut raw_part = Some(std::mem::take(raw));
                    let changed = self.file(
                        (&mut raw_part, &mut None, &mut None),
                        part.media_type.as_deref(),
                        rules,
                    );
                    *raw = raw_part.unwrap_or_default();
                    changed
                }
                PartContent::Url(url) => {
                    self.part(PartKind::File, part.media_type.as_deref(), url.len() as u64);
                    self.text(url)
                }
            };
            if let Some(name) = &mut part.filename {
                changed |= self.text(name);
            }
            if let Some(metadata) = &mut part.metadata {
                changed |= self.json(metadata);
            }
        }
        changed
    }

    /// An answer's artifacts: their parts, names, descriptions and metadata.
    pub fn artifacts(&mut self, rules: &ContentRules, artifacts: &mut [Artifact]) -> bool {
        let mut changed = false;
        for artifact in artifacts {
            changed |= self.parts(rules, &mut artifact.parts);
            for text in [&mut artifact.name, &mut artifact.description]
                .into_iter()
                .flatten()
            {
                changed |= self.text(text);
            }
            if let Some(metadata) = &mut artifact.metadata {
                changed |= self.json(metadata);
            }
        }
        changed
    }
}

/// The size of `data` as compact JSON.
fn json_size(data: &Value) -> u64 {
    serde_json::to_vec(data).map_or(0, |bytes| bytes.len() as u64)
}
