//! Text from outside (an agent's card, an agent's error, a partner's words) as a terminal, a
//! log line or a browser shows it, and what would make them show something else: control
//! characters (a terminal's escapes, a newline that starts a forged log line), bidirectional
//! controls (a line that reads differently from what it holds) and markup (a console that
//! renders a card's description as HTML).

/// The characters that reorder how text around them is shown (embeddings, overrides,
/// isolates, marks).
pub fn is_bidi_control(c: char) -> bool {
    matches!(c, '\u{202A}'..='\u{202E}' | '\u{2066}'..='\u{2069}' | '\u{200E}' | '\u{200F}' | '\u{061C}')
}

/// Whether `c` makes a terminal or a log show something other than the text: a control
/// character (C0, DEL, C1; line breaks and tabs only when `breaks` allows them), a
/// bidirectional control, or a line or paragraph separator.
pub fn is_misread(c: char, breaks: bool) -> bool {
    (c.is_control() && !(breaks && matches!(c, '\n' | '\t')))
        || is_bidi_control(c)
        || matches!(c, '\u{2028}' | '\u{2029}')
}

/// `text` with what a terminal would obey (see [`is_misread`], line breaks and tabs kept)
/// shown as `?`.
pub fn printable(text: &str) -> String {
    text.chars()
        .map(|c| if is_misread(c, true) { '?' } else { c })
        .collect()
}

/// JSON with what serde_json leaves raw among the control characters (C1, DEL) and the
/// bidirectional controls escaped as `\uXXXX`: the terminal shows them and does not obey them,
/// and the JSON means the same.
pub fn printable_json(json: &str) -> String {
    let mut out = String::with_capacity(json.len());
    for c in json.chars() {
        if (c.is_control() && !matches!(c, '\n' | '\t' | '\r')) || is_bidi_control(c) {
            out.push_str(&format!("\\u{:04x}", u32::from(c)));
        } else {
            out.push(c);
        }
    }
    out
}

/// Whether `text` holds what a browser reads as markup: `<` before a letter, `/`, `!` or `?`.
pub fn holds_markup(text: &str) -> bool {
    text.as_bytes()
        .windows(2)
        .any(|pair| pair[0] == b'<' && (pair[1].is_ascii_alphabetic() || b"/!?".contains(&pair[1])))
}

/// What was done to a piece of outside text before it is shown.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cleaned {
    /// Nothing: it was shown as it came.
    AsItCame,
    /// Characters a terminal, log or browser would misread were taken out.
    Stripped,
    /// It was longer than its bound, and cut.
    Cut,
}

/// `text` without what [`is_misread`] finds (line breaks and tabs kept when `breaks`), trimmed,
/// at most `max_chars` characters; `None` when nothing is left. Says what it changed.
pub fn cleaned(text: &str, breaks: bool, max_chars: usize) -> Option<(String, Cleaned)> {
    let kept: String = text.chars().filter(|c| !is_misread(*c, breaks)).collect();
    let mut how = if kept.len() == text.len() {
        Cleaned::AsItCame
    } else {
        Cleaned::Stripped
    };
    let mut kept = kept.trim().to_owned();
    if let Some((cut, _)) = kept.char_indices().nth(max_chars) {
        kept.truncate(cut);
        how = Cleaned::Cut;
    }
    (!kept.is_empty()).then_some((kept, how))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_a_terminal_or_a_log_would_obey_is_taken_out_or_shown() {
        let hostile =
            "evil\n2026-01-01T00:00:00Z  INFO forged\u{1b}[2J\u{9b}\u{202e}txt.exe\u{2028}";
        let (name, how) = cleaned(hostile, false, 200).unwrap();
        assert_eq!(name, "evil2026-01-01T00:00:00Z  INFO forged[2Jtxt.exe");
        assert_eq!(how, Cleaned::Stripped);
        let (description, _) = cleaned("line one\nline two\t", true, 200).unwrap();
        assert_eq!(description, "line one\nline two");
        assert_eq!(cleaned("\u{202e}\u{0}  ", false, 10), None);
        assert_eq!(
            cleaned("abcdef", false, 3),
            Some(("abc".to_owned(), Cleaned::Cut))
        );
        assert_eq!(printable("a\u{9b}b\u{202e}c\nd"), "a?b?c\nd");
        assert_eq!(printable_json("\"a\u{9b}\u{202e}\""), "\"a\\u009b\\u202e\"");
    }

    #[test]
    fn markup_is_a_tag_opening_not_a_less_than_sign() {
        for markup in ["<script>", "a</b", "<!-- x", "<?xml", "<img src=x>"] {
            assert!(holds_markup(markup), "{markup}");
        }
        for plain in ["a < b", "x<3", "<", "1 <= 2", "arrows <-"] {
            assert!(!holds_markup(plain), "{plain}");
        }
    }
}
