//! ProtoJSON's `bytes`: base64 in the standard or the URL-safe alphabet (one of them), padded
//! or not. Read once here for every reader (the agent's check of a file part, the content
//! guard's reading of it), so none reads less than another.

use base64::Engine as _;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};

/// How a text wrote its bytes: which alphabet, and whether it padded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Base64Form {
    url_safe: bool,
    padded: bool,
}

/// The bytes of `text`, and how it wrote them; `None` when it is not base64.
pub fn decode(text: &str) -> Option<(Vec<u8>, Base64Form)> {
    let url_safe = text.contains(['-', '_']);
    let alphabet = if url_safe {
        &base64::alphabet::URL_SAFE
    } else {
        &base64::alphabet::STANDARD
    };
    let config =
        GeneralPurposeConfig::new().with_decode_padding_mode(DecodePaddingMode::Indifferent);
    let bytes = GeneralPurpose::new(alphabet, config).decode(text).ok()?;
    let padded = text.ends_with('=') || text.len().is_multiple_of(4);
    Some((bytes, Base64Form { url_safe, padded }))
}

impl Base64Form {
    /// `bytes` written as this form writes them.
    pub fn encode(self, bytes: &[u8]) -> String {
        let alphabet = if self.url_safe {
            &base64::alphabet::URL_SAFE
        } else {
            &base64::alphabet::STANDARD
        };
        let config = GeneralPurposeConfig::new().with_encode_padding(self.padded);
        GeneralPurpose::new(alphabet, config).encode(bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes_are_written_back_in_the_form_they_came_in() {
        // "?>?" is "Pz4/" in the standard alphabet and "Pz4_" in the URL-safe one; "hi" pads.
        for text in ["Pz4/", "Pz4_", "aGk=", "aGk", "aGk-Pz4_"] {
            let (bytes, form) = decode(text).unwrap_or_else(|| panic!("{text}"));
            assert_eq!(form.encode(&bytes), text);
        }
        assert_eq!(decode("Pz4/").unwrap().0, b"?>?");
        assert_eq!(decode("aGk").unwrap().0, b"hi");
        for not_base64 in ["a b", "Pz4/_", "%%%%"] {
            assert!(decode(not_base64).is_none(), "{not_base64}");
        }
    }
}
