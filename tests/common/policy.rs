//! Policies for tests: the embedded default policy edited as TOML, never as text.
//!
//! Paths are dotted keys (`limits.per_ip_per_minute`); a number picks one table of an array of
//! tables (`card.skills.0.tags`). [`PolicyEdit::set`] and [`PolicyEdit::remove`] panic, naming
//! the path, when the key is not there, so a typo cannot leave a test running on the default;
//! [`PolicyEdit::insert`] and [`PolicyEdit::push_table`] are for what the default does not have.

use peergate::config::{EMBEDDED_DEFAULT, Policy, PolicySource};
use toml_edit::{ArrayOfTables, DocumentMut, Item, Table, Value};

/// A value a policy key can take: integers, booleans, strings and arrays of them.
pub trait PolicyValue {
    fn into_value(self) -> Value;
}

impl PolicyValue for Value {
    fn into_value(self) -> Value {
        self
    }
}

impl PolicyValue for bool {
    fn into_value(self) -> Value {
        self.into()
    }
}

impl PolicyValue for i32 {
    fn into_value(self) -> Value {
        i64::from(self).into()
    }
}

impl PolicyValue for i64 {
    fn into_value(self) -> Value {
        self.into()
    }
}

impl PolicyValue for u64 {
    fn into_value(self) -> Value {
        i64::try_from(self).expect("fits a TOML integer").into()
    }
}

impl PolicyValue for &str {
    fn into_value(self) -> Value {
        self.into()
    }
}

impl PolicyValue for String {
    fn into_value(self) -> Value {
        self.into()
    }
}

impl<T: PolicyValue, const N: usize> PolicyValue for [T; N] {
    fn into_value(self) -> Value {
        Value::Array(self.into_iter().map(PolicyValue::into_value).collect())
    }
}

/// The embedded default policy, edited key by key.
#[derive(Clone)]
pub struct PolicyEdit {
    document: DocumentMut,
}

impl Default for PolicyEdit {
    /// The embedded default policy (`policies/default.toml`), unchanged.
    fn default() -> Self {
        Self {
            document: EMBEDDED_DEFAULT
                .parse()
                .expect("the embedded default policy is TOML"),
        }
    }
}

impl PolicyEdit {
    /// A policy's text, to edit.
    pub fn from_text(text: &str) -> Self {
        Self {
            document: text.parse().expect("the policy is TOML"),
        }
    }

    /// Gives the key at `path`, which the policy must already have, a new value.
    pub fn set(mut self, path: &str, value: impl PolicyValue) -> Self {
        let (parent, key) = split(path);
        let table = self.table_mut(parent, path, false);
        let Some(old) = table.get_mut(key).and_then(Item::as_value_mut) else {
            panic!("policy edit: no key {path} to set (use insert for a new key)")
        };
        let mut value = value.into_value();
        // Keeps the comments around the key where they were.
        *value.decor_mut() = old.decor().clone();
        *old = value;
        self
    }

    /// Adds the key at `path`, which the policy must not have yet; missing tables on the way
    /// are created.
    pub fn insert(mut self, path: &str, value: impl PolicyValue) -> Self {
        let (parent, key) = split(path);
        let table = self.table_mut(parent, path, true);
        assert!(
            !table.contains_key(key),
            "policy edit: {path} is already set (use set to change it)"
        );
        table.insert(key, Item::Value(value.into_value()));
        self
    }

    /// Removes the key or table at `path`, which the policy must have.
    pub fn remove(mut self, path: &str) -> Self {
        let (parent, key) = split(path);
        let table = self.table_mut(parent, path, false);
        assert!(
            table.remove(key).is_some(),
            "policy edit: no key {path} to remove"
        );
        self
    }

    /// Appends a table with `entries` to the array of tables at `path` (`[[path]]`), which is
    /// created when the policy has none.
    pub fn push_table(mut self, path: &str, entries: &[(&str, Value)]) -> Self {
        let (parent, key) = split(path);
        let table = self.table_mut(parent, path, true);
        let array = table
            .entry(key)
            .or_insert(Item::ArrayOfTables(ArrayOfTables::new()))
            .as_array_of_tables_mut()
            .unwrap_or_else(|| panic!("policy edit: {path} is not an array of tables"));
        let mut pushed = Table::new();
        for (name, value) in entries {
            pushed.insert(name, Item::Value(value.clone()));
        }
        array.push(pushed);
        self
    }

    /// The `openai` backend on the server at `base_url` (`[model.openai]`), asking for `model`.
    pub fn openai(self, base_url: &str, model: &str) -> Self {
        self.set("model.backend", "openai")
            .insert("model.openai.base_url", base_url)
            .insert("model.openai.model", model)
    }

    /// The credential cache off, so changes written by the CLI apply to the very next request.
    pub fn without_credential_cache(self) -> Self {
        self.set("auth.credential_cache_seconds", 0)
    }

    /// The policy as TOML, e.g. for a `--policy` file.
    pub fn text(&self) -> String {
        self.document.to_string()
    }

    /// The policy, parsed and validated as if it were embedded.
    pub fn policy(&self) -> Policy {
        let text = self.text();
        Policy::parse(&text, &PolicySource::Embedded)
            .unwrap_or_else(|e| panic!("the edited policy is refused: {e}\n{text}"))
    }

    /// The table at the dotted path `tables` (the whole document when empty). With `create`,
    /// missing tables are added; otherwise a missing one panics naming `path`.
    fn table_mut(&mut self, tables: &str, path: &str, create: bool) -> &mut Table {
        let mut table = self.document.as_table_mut();
        let mut segments = tables.split('.').filter(|s| !s.is_empty());
        while let Some(segment) = segments.next() {
            if create && !table.contains_key(segment) {
                let mut new = Table::new();
                new.set_implicit(true);
                table.insert(segment, Item::Table(new));
            }
            table = match table.get_mut(segment) {
                Some(Item::Table(next)) => next,
                Some(Item::ArrayOfTables(array)) => {
                    let index = segments
                        .next()
                        .and_then(|i| i.parse::<usize>().ok())
                        .unwrap_or_else(|| {
                            panic!("policy edit: {path}: {segment} is an array of tables; name one by its index")
                        });
                    array.get_mut(index).unwrap_or_else(|| {
                        panic!("policy edit: {path}: {segment} has no table {index}")
                    })
                }
                Some(_) => panic!("policy edit: {path}: {segment} is not a table"),
                None => panic!("policy edit: {path}: the policy has no table {segment}"),
            };
        }
        table
    }
}

/// (the dotted path of the table, the last key).
fn split(path: &str) -> (&str, &str) {
    path.rsplit_once('.').unwrap_or(("", path))
}
