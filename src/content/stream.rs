//! A streamed answer's text, piece by piece: each piece is sent only once the rules have read
//! it with what follows, so a match split across pieces is still found. The last
//! [`StreamedText::overlap`] bytes are held back until the next piece (or the end); a match
//! that reaches into them is held whole, up to [`MAX_HELD`]. A match longer than the overlap
//! that straddles a piece boundary can be missed (docs/content-guard.md); the answer as stored
//! and as its final event sends it is inspected whole.

use super::scan::Inspection;
use super::settings::Action;

/// Bytes held back at the end of what arrived, by default: more than most secrets' length
/// (a JWT's included).
pub const DEFAULT_OVERLAP: usize = 1024;

/// Bytes held at most: a match still open past this much is cut where the overlap begins, and
/// the part of it released is masked (or denies), so no piece rescans an unbounded text.
pub const MAX_HELD: usize = 16 * 1024;

/// One stream's text under the outbound rules.
pub struct StreamedText<'r> {
    inspection: Inspection<'r>,
    held: String,
    overlap: usize,
    /// A denying rule matched: nothing more is sent.
    denied: bool,
}

impl<'r> StreamedText<'r> {
    /// The text of a stream inspected by `inspection` (its verdict is not kept: the whole
    /// answer's is), holding back `overlap` bytes.
    pub fn new(inspection: Inspection<'r>, overlap: usize) -> Self {
        Self {
            inspection,
            held: String::new(),
            overlap,
            denied: false,
        }
    }

    /// Bytes held back.
    pub fn overlap(&self) -> usize {
        self.overlap
    }

    /// Whether a denying rule matched what arrived: the rest is not sent.
    pub fn denied(&self) -> bool {
        self.denied
    }

    /// Takes the next piece; returns what may be sent now (masked), which may be empty.
    pub fn piece(&mut self, piece: &str) -> String {
        if self.denied {
            return String::new();
        }
        self.held.push_str(piece);
        let keep = self.held.len().saturating_sub(self.overlap);
        self.release(floor_boundary(&self.held, keep))
    }

    /// The end of the stream: what is left to send.
    pub fn finish(&mut self) -> String {
        if self.denied {
            return String::new();
        }
        self.release(self.held.len())
    }

    /// Sends what lies before `wanted` (moved back before any match that crosses it, unless
    /// that would hold more than [`MAX_HELD`]), masked.
    fn release(&mut self, wanted: usize) -> String {
        let spans = self.inspection.matches(&self.held);
        let mut cut = wanted;
        while let Some(&(start, _, _)) = spans.iter().find(|&&(s, e, _)| s < cut && e > cut) {
            cut = start;
        }
        if self.held.len() - cut > MAX_HELD {
            // Only the match held too long is cut: a shorter one still moves the cut back.
            cut = wanted;
            while let Some(&(start, _, _)) =
                (spans.iter()).find(|&&(s, e, _)| s < cut && e > cut && e - s <= MAX_HELD)
            {
                cut = start;
            }
        }
        // A match that still crosses the cut is one held too long: its part before the cut
        // counts as a match.
        let before: Vec<_> = (spans.into_iter())
            .filter(|&(s, _, _)| s < cut)
            .map(|(s, e, rule)| (s, e.min(cut), rule))
            .collect();
        if before
            .iter()
            .any(|&(_, _, rule)| self.inspection.action(rule) == Action::Deny)
        {
            self.denied = true;
            self.held.clear();
            return String::new();
        }
        let masks: Vec<_> = (before.into_iter())
            .filter(|&(_, _, rule)| self.inspection.action(rule) == Action::Mask)
            .collect();
        let out = self.inspection.masked(&self.held[..cut], masks);
        self.held.drain(..cut);
        out
    }
}

/// The largest char boundary of `text` at or before `at`.
fn floor_boundary(text: &str, mut at: usize) -> usize {
    while !text.is_char_boundary(at) {
        at -= 1;
    }
    at
}
