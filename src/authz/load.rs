//! Reading the operator's Cedar files: bounded in size and nesting, parsed, named by their
//! `@id` annotations, validated against the schema (strict mode), and sliced by action once so
//! that a call evaluates only the policies whose scope can name its action.

use super::ask::{self, AdminAsk, CallAsk};
use super::remembered::{Reads, Remembered};
use super::{Decision, schema};
use cedar_policy::{
    ActionConstraint, Authorizer, Entities, Entity, EntityUid, PolicyId, PolicySet, Request,
    Schema, ValidationMode, Validator,
};
use sha2::{Digest, Sha256};
use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::str::FromStr;
use std::sync::Arc;

/// The files `[authorization]` points at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PolicyFiles {
    /// `authorization.policies`: the Cedar policies.
    pub policies: PathBuf,
    /// `authorization.schema`: the schema they are validated against (else peergate's own).
    pub schema: Option<PathBuf>,
}

/// The largest policy or schema file read.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The deepest nesting of brackets read (Cedar's parser recurses on it).
pub const MAX_NESTING: usize = 64;

/// Why the policy files were refused: the key, and the policy and problem where there is one.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be read.
    #[error("{key}: the file cannot be read ({why})")]
    Read {
        /// The policy key naming the file.
        key: &'static str,
        /// The system's reason, without the path.
        why: String,
    },
    /// The file is larger than [`MAX_FILE_BYTES`].
    #[error("{key}: the file is larger than 1 MiB")]
    TooLarge {
        /// The policy key naming the file.
        key: &'static str,
    },
    /// Brackets nest deeper than [`MAX_NESTING`].
    #[error("{key}: line {line}: brackets nest deeper than {MAX_NESTING}")]
    TooDeep {
        /// The policy key naming the file.
        key: &'static str,
        /// Where.
        line: usize,
    },
    /// The file is not Cedar.
    #[error("{key}: line {line}: {why}")]
    Syntax {
        /// The policy key naming the file.
        key: &'static str,
        /// Where the first error is.
        line: usize,
        /// What it is.
        why: String,
    },
    /// The schema does not describe a request peergate makes.
    #[error("authorization.schema does not describe peergate's {action} requests: {why}")]
    SchemaMismatch {
        /// The action.
        action: String,
        /// What Cedar found.
        why: String,
    },
    /// A policy does not validate against the schema.
    #[error("authorization.policies: policy {policy}: {problem}")]
    Invalid {
        /// The policy's id.
        policy: String,
        /// What the validator found.
        problem: String,
    },
    /// A policy template: only static policies are read.
    #[error("authorization.policies: policy {policy} is a template; only static policies are read")]
    Template {
        /// The template's id.
        policy: String,
    },
    /// Two policies share an id.
    #[error("authorization.policies: two policies have the id {policy}")]
    DuplicateId {
        /// The id.
        policy: String,
    },
    /// No policy: Cedar would deny every call.
    #[error(
        "authorization.policies: the file holds no policy, and Cedar denies what no policy permits: every call would be refused (remove [authorization] to decide as without policies)"
    )]
    Empty,
}

/// The policies that can name one action, and the action's entities (itself and its groups).
#[derive(Debug)]
struct Slice {
    policies: PolicySet,
    actions: Vec<Entity>,
}

/// Policies read, validated and sliced by action: what decides calls until the next reload.
#[derive(Debug)]
pub struct Loaded {
    by_action: HashMap<&'static str, Slice>,
    policies: usize,
    authorizer: Authorizer,
    /// SHA-256 over the schema's and the policies' text: whether a reload changes anything.
    digest: [u8; 32],
    /// Which facts of a call the policies read, and the decisions made on them.
    reads: Reads,
    remembered: Remembered,
}

impl Loaded {
    /// Reads and checks `files`.
    pub fn read(files: &PolicyFiles) -> Result<Self, LoadError> {
        let schema_text = match &files.schema {
            Some(path) => read_bounded("authorization.schema", path)?,
            None => schema::BUILT_IN.to_owned(),
        };
        let schema = parse_schema(&schema_text)?;
        schema::describes_peergate(&schema)?;
        let text = read_bounded("authorization.policies", &files.policies)?;
        let mut loaded = Self::from_text(&text, &schema)?;
        let mut digest = Sha256::new();
        digest.update(schema_text);
        digest.update([0]);
        digest.update(text);
        loaded.digest = digest.finalize().into();
        Ok(loaded)
    }

    /// Policies from `text`, validated against `schema`.
    pub fn from_text(text: &str, schema: &Schema) -> Result<Self, LoadError> {
        nesting("authorization.policies", text)?;
        let policies = parse_policies(text)?;
        let validated = Validator::new(schema.clone()).validate(&policies, ValidationMode::Strict);
        if let Some(error) = validated.validation_errors().next() {
            return Err(LoadError::Invalid {
                policy: error.policy_id().to_string(),
                problem: error.to_string(),
            });
        }
        let actions = schema
            .action_entities()
            .map_err(|e| LoadError::SchemaMismatch {
                action: "any".to_owned(),
                why: e.to_string(),
            })?;
        let by_action = schema::actions()
            .map(|name| (name, slice(&policies, &actions, &ask::action(name))))
            .collect();
        Ok(Self {
            by_action,
            policies: policies.policies().count(),
            authorizer: Authorizer::new(),
            digest: [0; 32],
            reads: Reads::of(&policies),
            remembered: Remembered::new(),
        })
    }

    /// A digest of the files read: two reads of the same text agree.
    pub fn digest(&self) -> [u8; 32] {
        self.digest
    }

    /// How many policies are in force.
    pub fn policy_count(&self) -> usize {
        self.policies
    }

    /// The decision about one A2A call: remembered, when the facts the policies read were
    /// decided before.
    pub fn decide_call(&self, ask: &CallAsk<'_>) -> Decision {
        let key = self.reads.key(ask);
        if let Some(decision) = key.as_ref().and_then(|key| self.remembered.get(key)) {
            return decision;
        }
        let (decision, made) = self.decide(ask.operation, ask.to_cedar());
        // A call that could not be put to the policies is denied, and not remembered: the
        // next call with the same facts tries again.
        if let (Some(key), true) = (key, made) {
            self.remembered.keep(key, decision.clone());
        }
        decision
    }

    /// The decision about one admin API request.
    pub fn decide_admin(&self, ask: &AdminAsk<'_>) -> Decision {
        self.decide(ask.operation, ask.to_cedar()).0
    }

    /// Cedar's decision, and whether Cedar made it; an action the policies were not sliced
    /// for, or a request that cannot be built, is denied (fail closed) and logged.
    fn decide(
        &self,
        action: &str,
        asked: Result<(Request, Vec<Entity>), String>,
    ) -> (Decision, bool) {
        let denied = Decision {
            allowed: false,
            policies: Arc::from([]),
        };
        let Some(slice) = self.by_action.get(action) else {
            tracing::warn!(action, "no policies were read for this action: denied");
            return (denied, false);
        };
        let built = asked.and_then(|(request, entities)| {
            let entities = entities.into_iter().chain(slice.actions.iter().cloned());
            Entities::from_entities(entities, None)
                .map(|entities| (request, entities))
                .map_err(|e| e.to_string())
        });
        let (request, entities) = match built {
            Ok(built) => built,
            Err(why) => {
                tracing::warn!(action, %why, "the call could not be put to the policies: denied");
                return (denied, false);
            }
        };
        let response = self
            .authorizer
            .is_authorized(&request, &slice.policies, &entities);
        for error in response.diagnostics().errors() {
            tracing::warn!(action, %error, "a policy failed to evaluate and was skipped");
        }
        let decision = Decision {
            allowed: response.decision() == cedar_policy::Decision::Allow,
            policies: response
                .diagnostics()
                .reason()
                .map(|id| Arc::from(id.as_ref()))
                .collect(),
        };
        (decision, true)
    }
}

/// The policies whose action scope can name `action` (directly, or through one of its
/// groups), and the entities of `action` and its groups.
fn slice(policies: &PolicySet, actions: &Entities, action: &EntityUid) -> Slice {
    let groups: HashSet<&EntityUid> = actions
        .ancestors(action)
        .map(Iterator::collect)
        .unwrap_or_default();
    let names = |uid: &EntityUid| uid == action || groups.contains(uid);
    let chosen = policies
        .policies()
        .filter(|policy| match policy.action_constraint() {
            ActionConstraint::Any => true,
            ActionConstraint::Eq(uid) => names(&uid),
            ActionConstraint::In(uids) => uids.iter().any(names),
        });
    let policies = PolicySet::from_policies(chosen.cloned()).unwrap_or_default();
    let actions = std::iter::once(action)
        .chain(groups.iter().copied())
        .filter_map(|uid| actions.get(uid).cloned())
        .collect();
    Slice { policies, actions }
}

/// The file at `path`, within [`MAX_FILE_BYTES`].
fn read_bounded(key: &'static str, path: &std::path::Path) -> Result<String, LoadError> {
    use std::io::Read;
    let read = |why: std::io::Error| LoadError::Read {
        key,
        why: why.kind().to_string(),
    };
    let file = std::fs::File::open(path).map_err(read)?;
    let mut text = String::new();
    file.take(MAX_FILE_BYTES + 1)
        .read_to_string(&mut text)
        .map_err(read)?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(LoadError::TooLarge { key });
    }
    Ok(text)
}

/// Refuses brackets nested deeper than [`MAX_NESTING`] (outside strings and comments).
fn nesting(key: &'static str, text: &str) -> Result<(), LoadError> {
    let (mut depth, mut line) = (0usize, 1usize);
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        match c {
            '\n' => line += 1,
            '\\' if in_string => {
                chars.next();
            }
            '"' => in_string = !in_string,
            '/' if !in_string && chars.peek() == Some(&'/') => {
                for c in chars.by_ref() {
                    if c == '\n' {
                        line += 1;
                        break;
                    }
                }
            }
            '(' | '[' | '{' if !in_string => {
                depth += 1;
                if depth > MAX_NESTING {
                    return Err(LoadError::TooDeep { key, line });
                }
            }
            ')' | ']' | '}' if !in_string => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    Ok(())
}

/// The schema in Cedar's schema syntax.
fn parse_schema(text: &str) -> Result<Schema, LoadError> {
    nesting("authorization.schema", text)?;
    Schema::from_cedarschema_str(text)
        .map(|(schema, _warnings)| schema)
        .map_err(|e| syntax("authorization.schema", text, &e))
}

/// The policies, each under its `@id("…")` when it has one, else Cedar's `policyN`.
fn parse_policies(text: &str) -> Result<PolicySet, LoadError> {
    let parsed =
        PolicySet::from_str(text).map_err(|e| syntax("authorization.policies", text, &e))?;
    if let Some(template) = parsed.templates().next() {
        return Err(LoadError::Template {
            policy: template.id().to_string(),
        });
    }
    let mut named = PolicySet::new();
    for policy in parsed.policies() {
        let id = policy
            .annotation("id")
            .map_or_else(|| policy.id().clone(), PolicyId::new);
        let policy = policy.new_id(id.clone());
        if named.add(policy).is_err() {
            return Err(LoadError::DuplicateId {
                policy: id.to_string(),
            });
        }
    }
    if named.policies().next().is_none() {
        return Err(LoadError::Empty);
    }
    Ok(named)
}

/// A parse error, at the line of its first label.
fn syntax(key: &'static str, text: &str, error: &dyn miette::Diagnostic) -> LoadError {
    let offset = error
        .labels()
        .and_then(|mut labels| labels.next())
        .map_or(0, |label| label.offset());
    let line = 1 + text
        .get(..offset)
        .map_or(0, |before| before.matches('\n').count());
    let why = match error.help() {
        Some(help) => format!("{error} ({help})"),
        None => error.to_string(),
    };
    LoadError::Syntax { key, line, why }
}
