//! One inspection: the texts, data and parts of one message or answer, for one peer in one
//! direction, against the rules in force; masking in place, and the verdict at the end.

use super::compile::{ContentRules, DirectionRules, Matcher, Rule};
use super::settings::{Action, Direction, PartKind};
use serde_json::Value;
use std::collections::BTreeMap;
use std::sync::Arc;

/// What one rule did, how many times.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finding {
    /// `<pack>/<rule>`.
    pub rule: Arc<str>,
    /// Its action.
    pub action: Action,
    /// How many matches.
    pub count: u32,
}

/// What an inspection found: every rule that matched, and the first that denies.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    /// By rule, then action.
    pub findings: Vec<Finding>,
    /// The first denying rule, when one matched.
    pub denied: Option<Arc<str>>,
}

impl Verdict {
    /// Whether something was masked.
    pub fn masked(&self) -> bool {
        self.findings.iter().any(|f| f.action == Action::Mask)
    }

    /// `rule:action` of each finding, comma-separated, as the access log and the span name
    /// them (never what matched).
    pub fn summary(&self) -> String {
        (self.findings.iter())
            .map(|f| format!("{}:{}", f.rule, f.action.as_str()))
            .collect::<Vec<_>>()
            .join(",")
    }
}

/// An outside inspector's replacements, by the order texts are read: the text it was sent and
/// what replaces it.
pub type Replacements = std::collections::HashMap<usize, (String, String)>;

/// The marker that replaces text a rule masks.
pub fn marker(rule: &str) -> String {
    format!("[masked:{rule}]")
}

/// An inspection under way.
pub struct Inspection<'r> {
    rules: &'r ContentRules,
    direction: &'r DirectionRules,
    peer: &'r str,
    found: BTreeMap<(usize, Action), u32>,
    denied: Option<usize>,
    /// Whether a masking rule changes the text, or only counts (a first look).
    masking: bool,
    /// Every text read, as the rules left it, in the order read: what an outside inspector
    /// is sent.
    collected: Option<Vec<String>>,
    /// Replacements by the order texts are read (an outside inspector's: the text it was sent,
    /// and what replaces it), applied instead of the rules; and how many texts were read.
    replacing: Option<(Replacements, usize)>,
    /// Whether each file's bytes were read, in order: decided once by size (a mask can change
    /// the size), so a replacing pass reads the same files as the pass that collected.
    files: FileReads,
}

/// Which files' bytes an inspection reads.
#[derive(Debug, Default)]
enum FileReads {
    /// By their size.
    #[default]
    BySize,
    /// By their size, noting each decision.
    Noting(Vec<bool>),
    /// As an earlier pass decided (the decisions left, in reverse order).
    AsDecided(Vec<bool>),
}

/// What a collecting inspection read: its texts in order, and which files' bytes it read.
#[derive(Debug, Default)]
pub struct Collected {
    /// The texts, as the rules left them.
    pub texts: Vec<String>,
    /// Whether each file's bytes were read, in order.
    pub files: Vec<bool>,
}

impl ContentRules {
    /// An inspection of what `peer` (by name) sends, or is answered, in `direction`.
    pub fn inspect<'r>(&'r self, direction: Direction, peer: &'r str) -> Inspection<'r> {
        Inspection {
            rules: self,
            direction: self.direction(direction),
            peer,
            found: BTreeMap::new(),
            denied: None,
            masking: true,
            collected: None,
            replacing: None,
            files: FileReads::BySize,
        }
    }

    /// An inspection that also keeps every text it reads (as masked), for an outside
    /// inspector ([`Inspection::collected`]).
    pub fn inspect_collecting<'r>(&'r self, direction: Direction, peer: &'r str) -> Inspection<'r> {
        Inspection {
            collected: Some(Vec::new()),
            files: FileReads::Noting(Vec::new()),
            ..self.inspect(direction, peer)
        }
    }

    /// A pass that applies `replacements` (by the order texts are read, as
    /// [`Inspection::collected`] listed them, reading the files `collected` read) and nothing
    /// else. A text that is not the one the inspector was sent is left as it is.
    pub fn replace<'r>(
        &'r self,
        direction: Direction,
        replacements: Replacements,
        files: &[bool],
    ) -> Inspection<'r> {
        Inspection {
            replacing: Some((replacements, 0)),
            files: FileReads::AsDecided(files.iter().rev().copied().collect()),
            ..self.inspect(direction, "")
        }
    }

    /// A first look: the same verdict as [`ContentRules::inspect`]'s, with nothing changed
    /// (for when what was sent must be kept before it is masked).
    pub fn look<'r>(&'r self, direction: Direction, peer: &'r str) -> Inspection<'r> {
        Inspection {
            masking: false,
            ..self.inspect(direction, peer)
        }
    }

    /// A file's bytes are read up to this size.
    pub fn inspect_file_bytes(&self) -> u64 {
        self.inspect_file_bytes
    }
}

impl Inspection<'_> {
    /// Whether this inspection has any rule to apply.
    pub fn has_rules(&self) -> bool {
        !self.direction.rules.is_empty()
    }

    /// Whether a denying rule matched already (the rest need not be read).
    pub fn is_denied(&self) -> bool {
        self.denied.is_some()
    }

    /// The action of rule `index`.
    pub(super) fn action(&self, index: usize) -> Action {
        self.direction.rules[index].action
    }

    fn applies(&self, rule: &Rule) -> bool {
        self.rules.packs[rule.pack].scope.applies(self.peer)
    }

    pub(super) fn record(&mut self, index: usize, count: u32) {
        let action = self.direction.rules[index].action;
        *self.found.entry((index, action)).or_default() += count;
        if action == Action::Deny && self.denied.is_none() {
            self.denied = Some(index);
        }
    }

    /// Inspects `text`, masking what a masking rule matched; returns whether it changed.
    pub fn text(&mut self, text: &mut String) -> bool {
        if let Some((replacements, read)) = &mut self.replacing {
            let replaced = replacements.remove(read);
            *read += 1;
            return match replaced {
                Some((sent, replacement)) if sent == *text && replacement != sent => {
                    *text = replacement;
                    true
                }
                _ => false,
            };
        }
        let changed = self.ruled(text);
        if let Some(collected) = &mut self.collected {
            collected.push(text.clone());
        }
        changed
    }

    /// The texts read so far, as the rules left them, and the files read (empty unless
    /// collecting).
    pub fn collected(&mut self) -> Collected {
        let files = match std::mem::take(&mut self.files) {
            FileReads::Noting(files) => files,
            _ => Vec::new(),
        };
        Collected {
            texts: self.collected.take().unwrap_or_default(),
            files,
        }
    }

    /// Whether a file's bytes are read: `small_enough` decides, unless an earlier pass did.
    pub(super) fn reads_file(&mut self, small_enough: bool) -> bool {
        match &mut self.files {
            FileReads::BySize => small_enough,
            FileReads::Noting(decided) => {
                decided.push(small_enough);
                small_enough
            }
            FileReads::AsDecided(left) => left.pop().unwrap_or(false),
        }
    }

    fn ruled(&mut self, text: &mut String) -> bool {
        let spans = self.matches(text);
        let mut masks: Vec<(usize, usize, usize)> = Vec::new();
        for &(start, end, rule) in &spans {
            self.record(rule, 1);
            if self.direction.rules[rule].action == Action::Mask {
                masks.push((start, end, rule));
            }
        }
        if masks.is_empty() || !self.masking {
            return false;
        }
        *text = self.masked(text, masks);
        true
    }

    /// Every (start, end, rule) that matches `text` and applies to the peer.
    pub(super) fn matches(&self, text: &str) -> Vec<(usize, usize, usize)> {
        let mut spans = Vec::new();
        if let Some(set) = &self.direction.set {
            for at in set.matches(text).iter() {
                let index = self.direction.set_owner[at];
                let rule = &self.direction.rules[index];
                if !self.applies(rule) {
                    continue;
                }
                match &rule.matcher {
                    Matcher::Pattern(regex) => {
                        spans.extend(regex.find_iter(text).map(|m| (m.start(), m.end(), index)));
                    }
                    Matcher::Detector(detector, regex) => {
                        for m in regex.find_iter(text) {
                            let confirmed = detector.confirms(m.as_str());
                            let at = m.start();
                            spans.extend(
                                confirmed.into_iter().map(|(s, e)| (at + s, at + e, index)),
                            );
                        }
                    }
                    _ => {}
                }
            }
        }
        for set in &self.direction.literals {
            if !self.applies(&self.direction.rules[set.rule]) {
                continue;
            }
            let found = set.automaton.find_iter(text);
            spans.extend(found.map(|m| (m.start(), m.end(), set.rule)));
        }
        spans
    }

    /// `text` with each span replaced by its rule's marker; overlapping spans become one,
    /// named by the first.
    pub(super) fn masked(&self, text: &str, mut masks: Vec<(usize, usize, usize)>) -> String {
        masks.sort_unstable();
        let mut out = String::with_capacity(text.len());
        let mut at = 0;
        for (start, end, rule) in masks {
            if start < at {
                // Inside the previous span: it grows to cover this one.
                if end > at {
                    at = end;
                }
                continue;
            }
            out.push_str(&text[at..start]);
            out.push_str(&marker(&self.direction.rules[rule].id));
            at = end;
        }
        out.push_str(&text[at..]);
        out
    }

    /// Inspects every string in `value` (not the keys), masking in place; returns whether
    /// anything changed.
    pub fn json(&mut self, value: &mut Value) -> bool {
        match value {
            Value::String(text) => self.text(text),
            Value::Array(items) => items
                .iter_mut()
                .fold(false, |changed, v| self.json(v) | changed),
            Value::Object(members) => {
                (members.values_mut()).fold(false, |changed, v| self.json(v) | changed)
            }
            _ => false,
        }
    }

    /// Applies the part rules to a part of `kind` (a file's `media_type`) holding `size`
    /// bytes.
    pub fn part(&mut self, kind: PartKind, media_type: Option<&str>, size: u64) {
        if self.replacing.is_some() {
            return;
        }
        for &index in &self.direction.parts {
            let rule = &self.direction.rules[index];
            let Matcher::Part {
                kinds,
                media_types,
                max_bytes,
            } = &rule.matcher
            else {
                continue;
            };
            let matched = (kinds.is_empty() || kinds.contains(&kind))
                && (media_types.is_empty()
                    || (kind == PartKind::File
                        && media_type
                            .is_some_and(|m| media_types.iter().any(|w| media_matches(w, m)))))
                && max_bytes.is_none_or(|max| size > max);
            if matched && self.applies(rule) {
                self.record(index, 1);
            }
        }
    }

    /// What was found.
    pub fn verdict(self) -> Verdict {
        let rules = &self.direction.rules;
        Verdict {
            findings: (self.found.into_iter())
                .map(|((index, action), count)| Finding {
                    rule: rules[index].id.clone(),
                    action,
                    count,
                })
                .collect(),
            denied: self.denied.map(|index| rules[index].id.clone()),
        }
    }
}

/// Whether media type `actual` is `wanted` (`image/*` names a family); parameters and case
/// are ignored.
fn media_matches(wanted: &str, actual: &str) -> bool {
    let actual = actual.split(';').next().unwrap_or("").trim();
    match wanted.strip_suffix("/*") {
        Some(family) => actual
            .split('/')
            .next()
            .is_some_and(|f| f.eq_ignore_ascii_case(family)),
        None => actual.eq_ignore_ascii_case(wanted),
    }
}
