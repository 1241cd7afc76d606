//! Settings to rules, once, at start-up: every pattern on the `regex` crate's linear-time
//! engines within size limits, literal sets on Aho-Corasick within count and size limits, and
//! whatever would be slow, huge or match everything refused by name.

use super::detectors::Detector;
use super::settings::{
    Action, ContentGuardSettings, Direction, PackSettings, PartKind, RuleSettings,
};
use aho_corasick::{AhoCorasick, AhoCorasickBuilder, MatchKind};
use regex::{Regex, RegexBuilder, RegexSet, RegexSetBuilder};
use std::sync::Arc;

/// A pattern's source, at most.
pub const MAX_PATTERN_BYTES: usize = 4 * 1024;
/// One compiled pattern, at most (the `regex` crate's `size_limit`).
pub const MAX_COMPILED_BYTES: usize = 1 << 20;
/// One direction's patterns together, compiled as one set, at most.
pub const MAX_SET_BYTES: usize = 16 << 20;
/// A rule's literals, at most.
pub const MAX_LITERALS: usize = 10_000;
/// One literal, at most.
pub const MAX_LITERAL_BYTES: usize = 256;
/// Every literal of one direction together, at most.
pub const MAX_LITERAL_TOTAL: usize = 1 << 20;

/// Why the content rules cannot be used: start-up stops, naming the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RuleError {
    /// A pack's name or a rule's id is not one.
    #[error("{what} {name:?} is not a name (letters, digits, '-', '_', '.', 1 to 64)")]
    BadName {
        /// "pack" or "rule".
        what: &'static str,
        /// As written.
        name: String,
    },
    /// Two packs, or two rules of a pack, share a name.
    #[error("{0} is defined twice")]
    Duplicate(String),
    /// A pack takes a name peergate's verdicts use (`starter`, `inspector`).
    #[error("{0:?} names peergate's own verdicts (the starting pack's, the inspector's)")]
    Reserved(String),
    /// A pack without a version.
    #[error("pack {0} names no version")]
    NoVersion(String),
    /// A rule matches by none, or by more than one, of its ways.
    #[error(
        "rule {0} must have exactly one of pattern, literals, detector, or part rules (part_kinds, media_types, max_bytes)"
    )]
    Matcher(String),
    /// A part rule cannot mask: it matches a whole part.
    #[error("rule {0} matches whole parts: its action is deny, record or pass, not mask")]
    MaskedPart(String),
    /// A pattern that cannot be used.
    #[error("rule {rule}: pattern refused: {why}")]
    Pattern {
        /// The rule.
        rule: String,
        /// Why (too long, too large compiled, invalid, or matching the empty text).
        why: String,
    },
    /// A literal set past its limits.
    #[error("rule {rule}: literals refused: {why}")]
    Literals {
        /// The rule.
        rule: String,
        /// Which limit.
        why: String,
    },
    /// A direction's rules together past the set limit.
    #[error(
        "the {0} rules together compile past {MAX_SET_BYTES} bytes: use fewer or simpler patterns"
    )]
    TooLarge(&'static str),
}

impl RuleError {
    /// The policy key it is about.
    pub fn key(&self) -> &'static str {
        match self {
            Self::TooLarge(_) => "content_guard",
            _ => "content_guard.packs",
        }
    }
}

/// Which peers a pack applies to.
#[derive(Debug, Clone, Default)]
pub(super) struct Scope {
    only: Vec<String>,
    except: Vec<String>,
}

impl Scope {
    pub(super) fn applies(&self, peer: &str) -> bool {
        (self.only.is_empty() || self.only.iter().any(|p| p == peer))
            && !self.except.iter().any(|p| p == peer)
    }
}

/// How a rule matches.
#[derive(Debug)]
pub(super) enum Matcher {
    /// A pattern's matches.
    Pattern(Regex),
    /// A detector's candidates it confirms.
    Detector(Detector, Regex),
    /// Any of its literals (found by the direction's automaton).
    Literals,
    /// Whole parts.
    Part {
        kinds: Vec<PartKind>,
        media_types: Vec<String>,
        max_bytes: Option<u64>,
    },
}

/// A rule as compiled.
#[derive(Debug)]
pub(super) struct Rule {
    /// `<pack>/<rule>`.
    pub(super) id: Arc<str>,
    pub(super) action: Action,
    /// Its pack's index, for its scope and version.
    pub(super) pack: usize,
    pub(super) matcher: Matcher,
}

/// A literal rule's automaton (leftmost-longest, so its matches never overlap one another); one
/// per rule, so one rule's literal never hides another's.
#[derive(Debug)]
pub(super) struct LiteralSet {
    pub(super) automaton: AhoCorasick,
    pub(super) rule: usize,
}

/// One direction's rules.
#[derive(Debug, Default)]
pub(super) struct DirectionRules {
    pub(super) rules: Vec<Rule>,
    /// Every pattern and detector, to learn in one pass which may match.
    pub(super) set: Option<RegexSet>,
    /// The rule of each pattern of `set`.
    pub(super) set_owner: Vec<usize>,
    /// Literal rules, matched as written and ignoring case.
    pub(super) literals: Vec<LiteralSet>,
    /// The part rules.
    pub(super) parts: Vec<usize>,
}

/// A pack as verdicts name it.
#[derive(Debug, Clone)]
pub(super) struct Pack {
    pub(super) name: String,
    pub(super) version: String,
    pub(super) scope: Scope,
}

/// The rules in force, by direction.
#[derive(Debug)]
pub struct ContentRules {
    pub(super) inbound: DirectionRules,
    pub(super) outbound: DirectionRules,
    pub(super) packs: Vec<Pack>,
    pub(super) inspect_file_bytes: u64,
}

impl ContentRules {
    /// The rules `settings` describe (the starting pack's groups first), or why not.
    pub fn compile(settings: &ContentGuardSettings) -> Result<Self, RuleError> {
        let starter = PackSettings {
            name: super::starter::NAME.to_owned(),
            version: super::starter::VERSION.to_owned(),
            peers: Vec::new(),
            except_peers: settings.starter.except_peers.clone(),
            rules: super::starter::rules(&settings.starter),
        };
        let mut packs = Vec::new();
        let mut seen = std::collections::HashSet::new();
        for pack in &settings.packs {
            check_pack(pack)?;
            if !seen.insert(pack.name.as_str()) {
                return Err(RuleError::Duplicate(format!("pack {}", pack.name)));
            }
        }
        let mut inbound = Building::default();
        let mut outbound = Building::default();
        for (index, pack) in std::iter::once(&starter).chain(&settings.packs).enumerate() {
            packs.push(Pack {
                name: pack.name.clone(),
                version: pack.version.clone(),
                scope: Scope {
                    only: pack.peers.clone(),
                    except: pack.except_peers.clone(),
                },
            });
            let mut ids = std::collections::HashSet::new();
            for rule in &pack.rules {
                let id = format!("{}/{}", pack.name, rule.id);
                check_name("rule", &rule.id)?;
                if !ids.insert(rule.id.as_str()) {
                    return Err(RuleError::Duplicate(format!("rule {id}")));
                }
                for direction in directions(rule) {
                    let building = match direction {
                        Direction::Inbound => &mut inbound,
                        Direction::Outbound => &mut outbound,
                    };
                    building.add(index, &id, rule)?;
                }
            }
        }
        Ok(Self {
            inbound: inbound.finish("inbound")?,
            outbound: outbound.finish("outbound")?,
            packs,
            inspect_file_bytes: settings.inspect_file_bytes,
        })
    }

    /// Whether any rule inspects `direction`.
    pub fn inspects(&self, direction: Direction) -> bool {
        !self.direction(direction).rules.is_empty()
    }

    pub(super) fn direction(&self, direction: Direction) -> &DirectionRules {
        match direction {
            Direction::Inbound => &self.inbound,
            Direction::Outbound => &self.outbound,
        }
    }

    /// `name@version` of each pack with a rule in force, as spans and the access log name them.
    pub fn versions(&self) -> Vec<String> {
        let used = |index: usize| {
            [&self.inbound, &self.outbound]
                .iter()
                .any(|d| d.rules.iter().any(|r| r.pack == index))
        };
        (self.packs.iter().enumerate())
            .filter(|(index, _)| used(*index))
            .map(|(_, pack)| format!("{}@{}", pack.name, pack.version))
            .collect()
    }
}

fn directions(rule: &RuleSettings) -> Vec<Direction> {
    if rule.directions.is_empty() {
        vec![Direction::Inbound, Direction::Outbound]
    } else {
        rule.directions.clone()
    }
}

fn check_pack(pack: &PackSettings) -> Result<(), RuleError> {
    check_name("pack", &pack.name)?;
    if pack.name == super::starter::NAME || pack.name == "inspector" {
        return Err(RuleError::Reserved(pack.name.clone()));
    }
    if pack.version.trim().is_empty() {
        return Err(RuleError::NoVersion(pack.name.clone()));
    }
    Ok(())
}

fn check_name(what: &'static str, name: &str) -> Result<(), RuleError> {
    let fits = (1..=64).contains(&name.len())
        && (name.bytes()).all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'));
    if fits {
        Ok(())
    } else {
        Err(RuleError::BadName {
            what,
            name: name.to_owned(),
        })
    }
}

/// A direction's rules as they are added.
#[derive(Default)]
struct Building {
    rules: Vec<Rule>,
    patterns: Vec<String>,
    set_owner: Vec<usize>,
    /// Each literal rule's automaton.
    literals: Vec<LiteralSet>,
    literal_bytes: usize,
    parts: Vec<usize>,
}

impl Building {
    fn add(&mut self, pack: usize, id: &str, rule: &RuleSettings) -> Result<(), RuleError> {
        let is_part =
            !rule.part_kinds.is_empty() || !rule.media_types.is_empty() || rule.max_bytes.is_some();
        let ways = [
            rule.pattern.is_some(),
            !rule.literals.is_empty(),
            rule.detector.is_some(),
            is_part,
        ];
        if ways.iter().filter(|w| **w).count() != 1 {
            return Err(RuleError::Matcher(id.to_owned()));
        }
        let index = self.rules.len();
        let matcher = if let Some(pattern) = &rule.pattern {
            let regex = compiled(id, pattern, rule.case_insensitive)?;
            self.in_set(index, pattern, rule.case_insensitive);
            Matcher::Pattern(regex)
        } else if let Some(detector) = rule.detector {
            let regex = compiled(id, detector.pattern(), false)?;
            self.in_set(index, detector.pattern(), false);
            Matcher::Detector(detector, regex)
        } else if is_part {
            if rule.action == Action::Mask {
                return Err(RuleError::MaskedPart(id.to_owned()));
            }
            self.parts.push(index);
            Matcher::Part {
                kinds: rule.part_kinds.clone(),
                media_types: rule.media_types.clone(),
                max_bytes: rule.max_bytes,
            }
        } else {
            self.add_literals(index, id, rule)?;
            Matcher::Literals
        };
        self.rules.push(Rule {
            id: Arc::from(id),
            action: rule.action,
            pack,
            matcher,
        });
        Ok(())
    }

    fn in_set(&mut self, index: usize, pattern: &str, case_insensitive: bool) {
        let flagged = if case_insensitive {
            format!("(?i:{pattern})")
        } else {
            pattern.to_owned()
        };
        self.patterns.push(flagged);
        self.set_owner.push(index);
    }

    fn add_literals(
        &mut self,
        index: usize,
        id: &str,
        rule: &RuleSettings,
    ) -> Result<(), RuleError> {
        let refused = |why: String| RuleError::Literals {
            rule: id.to_owned(),
            why,
        };
        if rule.literals.len() > MAX_LITERALS {
            return Err(refused(format!(
                "{} literals, past {MAX_LITERALS}",
                rule.literals.len()
            )));
        }
        for literal in &rule.literals {
            if literal.is_empty() || literal.len() > MAX_LITERAL_BYTES {
                return Err(refused(format!(
                    "each literal holds 1 to {MAX_LITERAL_BYTES} bytes"
                )));
            }
            self.literal_bytes += literal.len();
        }
        if self.literal_bytes > MAX_LITERAL_TOTAL {
            return Err(refused(format!(
                "the literals of one direction hold more than {MAX_LITERAL_TOTAL} bytes"
            )));
        }
        let automaton = AhoCorasickBuilder::new()
            .match_kind(MatchKind::LeftmostLongest)
            .ascii_case_insensitive(rule.case_insensitive)
            .build(&rule.literals)
            .map_err(|e| refused(e.to_string()))?;
        self.literals.push(LiteralSet {
            automaton,
            rule: index,
        });
        Ok(())
    }

    fn finish(self, direction: &'static str) -> Result<DirectionRules, RuleError> {
        let set = if self.patterns.is_empty() {
            None
        } else {
            let built = RegexSetBuilder::new(&self.patterns)
                .size_limit(MAX_SET_BYTES)
                .build();
            Some(built.map_err(|_| RuleError::TooLarge(direction))?)
        };
        Ok(DirectionRules {
            rules: self.rules,
            set,
            set_owner: self.set_owner,
            literals: self.literals,
            parts: self.parts,
        })
    }
}

/// `pattern` on the linear-time engines within the size limits; refused when it is too long,
/// too large compiled, not valid, or matches the empty text (it would match everywhere).
fn compiled(rule: &str, pattern: &str, case_insensitive: bool) -> Result<Regex, RuleError> {
    let refused = |why: String| RuleError::Pattern {
        rule: rule.to_owned(),
        why,
    };
    if pattern.len() > MAX_PATTERN_BYTES {
        return Err(refused(format!("longer than {MAX_PATTERN_BYTES} bytes")));
    }
    let regex = RegexBuilder::new(pattern)
        .case_insensitive(case_insensitive)
        .size_limit(MAX_COMPILED_BYTES)
        .nest_limit(64)
        .build()
        .map_err(|e| match e {
            regex::Error::CompiledTooBig(_) => {
                refused(format!("compiles past {MAX_COMPILED_BYTES} bytes"))
            }
            // The parser's message names the position; it holds the operator's own pattern.
            other => refused(
                other
                    .to_string()
                    .lines()
                    .last()
                    .unwrap_or("invalid")
                    .trim()
                    .to_owned(),
            ),
        })?;
    // An empty match (`x*`, `\b`, `^`) would mark text everywhere.
    let empty = ["", "a", " ", "a b", "0", "\n", "é", "aé", "éa"]
        .iter()
        .any(|sample| regex.find_iter(sample).any(|m| m.is_empty()));
    if empty {
        return Err(refused(
            "it can match the empty text, so it would match everywhere".into(),
        ));
    }
    Ok(regex)
}
