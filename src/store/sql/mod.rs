//! The SQL core both engines share: every statement written once, every row read into a record
//! in one place ([`rows`]), and the store seams implemented once for any [`SqlEngine`].
//!
//! An engine keeps only what really differs: how it opens and migrates, where reads go and how
//! a write takes its turn (SQLite: one writer in this process, `BEGIN IMMEDIATE`, the disk
//! reserve; PostgreSQL: a pooled transaction), and its own fast paths (the exchange writers,
//! last-use batches, leases).
//!
//! Statements are written in one form, PostgreSQL's, and rewritten once for SQLite by
//! [`Dialect::form`]: numbered placeholders `$1` become `?1`; `LEAST(`/`GREATEST(` become
//! SQLite's scalar `min(`/`max(` (callers coalesce their arguments, so the two agree on NULL);
//! row locks (`FOR UPDATE`, `FOR UPDATE OF p`, `FOR UPDATE SKIP LOCKED`) are dropped, since a
//! SQLite write transaction already holds the whole file. Casts that PostgreSQL needs to type
//! a bare parameter are written `CAST($1 AS TEXT)`, which both read alike; `COLLATE "C"`
//! (PostgreSQL's bytewise order and ASCII-only case, which are SQLite's own) is dropped.

mod accounts;
mod last_uses;
mod log;
mod logins;
mod push;
mod reads;
mod rows;
mod tasks;

pub(crate) use accounts::{INSERT_AUDIT, insert_audit_statement};
pub(crate) use last_uses::{LastUses, WritePool};
pub(crate) use log::{INSERT_RECEIPT, insert_receipt_statement};
pub(crate) use push::{
    QUEUE_STATE, RETARGET_DELIVERIES, UPSERT_CONFIG, queue_state, upsert_config_statements,
};

use super::{AdminId, Exchange, PeerId, PushConfigId, StoreError};
use crate::clock::Timestamp;
use crate::locks::ReadWriteLocked;
use async_trait::async_trait;
use sqlx::postgres::{PgConnection, PgPool, PgRow};
use sqlx::sqlite::{SqliteConnection, SqlitePool, SqliteRow};
use sqlx::{Arguments, FromRow, Postgres, Sqlite, Transaction};
use std::collections::HashMap;
use std::sync::{Arc, LazyLock, RwLock};

/// What an engine gives the shared core.
#[async_trait]
pub(crate) trait SqlEngine: Send + Sync + std::fmt::Debug + 'static {
    /// Where reads go (SQLite: its read-only connections).
    fn reads(&self) -> On<'_>;
    /// Waits for this process's turn to write one statement outside a transaction.
    async fn writer(&self) -> Writer<'_>;
    /// Starts a write transaction in this process's turn. An `essential` one (an account
    /// change) may use the room SQLite keeps for when the disk fills.
    async fn begin_write(&self, essential: bool) -> Result<WriteTx, StoreError>;
    /// Persists an exchange with the engine's group commit.
    async fn save_exchange(&self, exchange: Exchange) -> Result<(), StoreError>;
    /// Queues a last-use note for the engine's batch writer.
    fn record_peer_use(&self, peer_id: &PeerId, now: Timestamp);
}

/// The engines, for what their SQL says differently.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Dialect {
    /// SQLite 3.35 or later.
    Sqlite,
    /// PostgreSQL 13 or later.
    Postgres,
}

/// Statements already rewritten for SQLite, by the address and length of their one written
/// form.
static SQLITE_FORMS: LazyLock<RwLock<HashMap<(usize, usize), &'static str>>> =
    LazyLock::new(RwLock::default);

impl Dialect {
    /// `statement` as this engine reads it (see the [module docs](self)); SQLite's forms are
    /// made once a statement and kept for the life of the process.
    pub(crate) fn form(self, statement: &'static str) -> &'static str {
        if self == Self::Postgres {
            return statement;
        }
        let key = (statement.as_ptr() as usize, statement.len());
        if let Some(form) = SQLITE_FORMS.read_locked().get(&key) {
            return form;
        }
        // Leaked once per statement: the statements are a fixed set of literals.
        let form: &'static str = Box::leak(sqlite_form(statement).into_boxed_str());
        SQLITE_FORMS.write_locked().insert(key, form);
        form
    }
}

/// `statement` rewritten for SQLite.
fn sqlite_form(statement: &str) -> String {
    let mut text = statement.to_owned();
    for (from, to) in [
        (" FOR UPDATE SKIP LOCKED", ""),
        (" FOR UPDATE OF p", ""),
        (" FOR UPDATE", ""),
        (" COLLATE \"C\"", ""),
        ("LEAST(", "min("),
        ("GREATEST(", "max("),
    ] {
        text = text.replace(from, to);
    }
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        let numbered = c == '$' && chars.peek().is_some_and(char::is_ascii_digit);
        out.push(if numbered { '?' } else { c });
    }
    out
}

/// A value bound to a statement: the few kinds peergate's tables hold. A NULL keeps its kind,
/// which PostgreSQL needs to type the parameter.
#[derive(Debug, Clone)]
pub(crate) enum Arg<'a> {
    Int(Option<i64>),
    Text(Option<std::borrow::Cow<'a, str>>),
    Bytes(&'a [u8]),
    Bool(bool),
}

/// `Arg::from` for each kind of value a statement binds.
macro_rules! args_from {
    ($($ty:ty => |$v:ident| $arg:expr;)+) => {
        $(impl<'a> From<$ty> for Arg<'a> {
            fn from($v: $ty) -> Self {
                $arg
            }
        })+
    };
}

args_from! {
    i64 => |v| Self::Int(Some(v));
    Option<i64> => |v| Self::Int(v);
    u32 => |v| Self::Int(Some(i64::from(v)));
    Option<u32> => |v| Self::Int(v.map(i64::from));
    // A count past `i64::MAX` is stored as `i64::MAX` (no budget is that large).
    Option<u64> => |v| Self::Int(v.map(|n| i64::try_from(n).unwrap_or(i64::MAX)));
    // A time is stored as milliseconds since the epoch.
    Timestamp => |v| Self::Int(Some(v.as_millisecond()));
    Option<Timestamp> => |v| Self::Int(v.map(Timestamp::as_millisecond));
    &'a str => |v| Self::Text(Some(v.into()));
    Option<&'a str> => |v| Self::Text(v.map(Into::into));
    &'a String => |v| Self::Text(Some(v.into()));
    String => |v| Self::Text(Some(v.into()));
    Option<String> => |v| Self::Text(v.map(Into::into));
    &'a Option<String> => |v| Self::Text(v.as_deref().map(Into::into));
    &'a PeerId => |v| Self::Text(Some(v.as_str().into()));
    &'a AdminId => |v| Self::Text(Some(v.as_str().into()));
    Option<&'a AdminId> => |v| Self::Text(v.map(|id| id.as_str().into()));
    &'a Option<AdminId> => |v| Self::Text(v.as_ref().map(|id| id.as_str().into()));
    &'a PushConfigId => |v| Self::Text(Some(v.as_str().into()));
    Option<&'a PushConfigId> => |v| Self::Text(v.map(|id| id.as_str().into()));
    &'a [u8] => |v| Self::Bytes(v);
    &'a Vec<u8> => |v| Self::Bytes(v);
    bool => |v| Self::Bool(v);
}

/// A statement in its one written form, with its values.
#[must_use = "a statement does nothing until it runs"]
pub(crate) struct Sql<'a> {
    text: &'static str,
    args: Vec<Arg<'a>>,
}

/// The statement `text` (PostgreSQL's form: see the [module docs](self)).
pub(crate) fn sql<'a>(text: &'static str) -> Sql<'a> {
    Sql {
        text,
        args: Vec::new(),
    }
}

/// A row type both engines decode (derive [`sqlx::FromRow`]).
pub(crate) trait Decoded:
    for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}
impl<T> Decoded for T where
    T: for<'r> FromRow<'r, SqliteRow> + for<'r> FromRow<'r, PgRow> + Send + Unpin
{
}

/// Where a statement runs: a pool, or a transaction's connection, of either engine. A
/// transaction's connection comes with its [`Failed`] mark.
pub(crate) enum On<'c> {
    Sqlite(&'c SqlitePool),
    SqliteTx(&'c mut SqliteConnection, Failed<'c>),
    Postgres(&'c PgPool),
    PostgresTx(&'c mut PgConnection, Failed<'c>),
}

/// Whether a statement of a transaction failed. The engines differ in what is left of a
/// transaction then (PostgreSQL refuses every later statement and answers `COMMIT` with a
/// rollback, SQLite goes on), so both are made to do the same: once a statement failed, every
/// later one and the commit are refused ([`StoreError::RolledBack`]), and nothing is written.
pub(crate) struct Failed<'c>(Option<&'c mut bool>);

impl Failed<'_> {
    /// No mark: a transaction whose owner handles a failure itself (a group commit drops it).
    pub(crate) fn unmarked() -> Self {
        Self(None)
    }

    fn already(&self) -> bool {
        self.0.as_deref().copied().unwrap_or(false)
    }

    fn note<T>(&mut self, outcome: Result<T, StoreError>) -> Result<T, StoreError> {
        if outcome.is_err()
            && let Some(failed) = self.0.as_deref_mut()
        {
            *failed = true;
        }
        outcome
    }
}

/// Runs `$run` (a `Result`) with the statement made for the engine `$on` names, bound as
/// `$query` to the executor `$exec`; in a transaction, refused after a failed statement and
/// marking one that fails.
macro_rules! on_engine {
    ($self:ident, $on:expr, |$query:ident, $exec:ident| $run:expr) => {
        match $on {
            On::Sqlite($exec) => {
                let $query = $self.query::<Sqlite>(Dialect::Sqlite)?;
                $run
            }
            On::Postgres($exec) => {
                let $query = $self.query::<Postgres>(Dialect::Postgres)?;
                $run
            }
            On::SqliteTx($exec, mut failed) => {
                if failed.already() {
                    return Err(StoreError::RolledBack);
                }
                let $query = $self.query::<Sqlite>(Dialect::Sqlite)?;
                failed.note($run)
            }
            On::PostgresTx($exec, mut failed) => {
                if failed.already() {
                    return Err(StoreError::RolledBack);
                }
                let $query = $self.query::<Postgres>(Dialect::Postgres)?;
                failed.note($run)
            }
        }
    };
}

impl<'a> Sql<'a> {
    /// Adds the next value (`$1`, then `$2`, …).
    pub(crate) fn bind(mut self, value: impl Into<Arg<'a>>) -> Self {
        self.args.push(value.into());
        self
    }

    /// The values as the engine's arguments, and the text in its form.
    fn parts<DB>(&self, dialect: Dialect) -> Result<(&'static str, DB::Arguments), StoreError>
    where
        DB: sqlx::Database,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        let mut args = DB::Arguments::default();
        for arg in &self.args {
            let added = match arg {
                Arg::Int(v) => args.add(*v),
                Arg::Text(v) => args.add(v.as_deref()),
                Arg::Bytes(v) => args.add(*v),
                Arg::Bool(v) => args.add(*v),
            };
            added.map_err(StoreError::Engine)?;
        }
        Ok((dialect.form(self.text), args))
    }

    fn query<DB>(
        &self,
        dialect: Dialect,
    ) -> Result<sqlx::query::Query<'static, DB, DB::Arguments>, StoreError>
    where
        DB: sqlx::Database,
        DB::Arguments: sqlx::IntoArguments<DB>,
        for<'q> i64: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> Option<i64>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> &'q str: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> Option<&'q str>: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> &'q [u8]: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
        for<'q> bool: sqlx::Encode<'q, DB> + sqlx::Type<DB>,
    {
        let (text, args) = self.parts::<DB>(dialect)?;
        Ok(sqlx::query_with(text, args))
    }

    /// Runs the statement; how many rows it changed.
    pub(crate) async fn execute(self, on: On<'_>) -> Result<u64, StoreError> {
        on_engine!(self, on, |q, exec| q
            .execute(exec)
            .await
            .map(|done| done.rows_affected())
            .map_err(StoreError::from))
    }

    /// Every row, decoded.
    pub(crate) async fn fetch_all<R: Decoded>(self, on: On<'_>) -> Result<Vec<R>, StoreError> {
        on_engine!(self, on, |q, exec| match q.fetch_all(exec).await {
            Ok(rows) => rows.iter().map(|row| Ok(R::from_row(row)?)).collect(),
            Err(e) => Err(e.into()),
        })
    }

    /// The first row, decoded, if there is one.
    pub(crate) async fn fetch_optional<R: Decoded>(
        self,
        on: On<'_>,
    ) -> Result<Option<R>, StoreError> {
        on_engine!(self, on, |q, exec| match q.fetch_optional(exec).await {
            Ok(Some(row)) => Ok(Some(R::from_row(&row)?)),
            Ok(None) => Ok(None),
            Err(e) => Err(e.into()),
        })
    }

    /// The one row, decoded.
    pub(crate) async fn fetch_one<R: Decoded>(self, on: On<'_>) -> Result<R, StoreError> {
        on_engine!(self, on, |q, exec| match q.fetch_one(exec).await {
            Ok(row) => Ok(R::from_row(&row)?),
            Err(e) => Err(e.into()),
        })
    }
}

/// A turn to write one statement outside a transaction (SQLite: this process's write turn,
/// held until dropped).
pub(crate) struct Writer<'e> {
    pool: Pools<'e>,
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
}

/// An engine's writing pool.
#[derive(Clone, Copy)]
enum Pools<'e> {
    Sqlite(&'e SqlitePool),
    Postgres(&'e PgPool),
}

impl<'e> Writer<'e> {
    /// SQLite's writer pool, in `turn`.
    pub(crate) fn sqlite(pool: &'e SqlitePool, turn: tokio::sync::OwnedMutexGuard<()>) -> Self {
        Self {
            pool: Pools::Sqlite(pool),
            _turn: Some(turn),
        }
    }

    /// PostgreSQL's pool.
    pub(crate) fn postgres(pool: &'e PgPool) -> Self {
        Self {
            pool: Pools::Postgres(pool),
            _turn: None,
        }
    }

    /// Where the statement runs.
    pub(crate) fn on(&self) -> On<'e> {
        match self.pool {
            Pools::Sqlite(pool) => On::Sqlite(pool),
            Pools::Postgres(pool) => On::Postgres(pool),
        }
    }
}

/// One write transaction of either engine. Dropped without [`WriteTx::commit`], it rolls back.
pub(crate) struct WriteTx {
    tx: Tx,
    /// A statement failed: see [`Failed`].
    failed: bool,
    /// SQLite: this process's write turn, held until the transaction commits or drops.
    _turn: Option<tokio::sync::OwnedMutexGuard<()>>,
    /// Told when the commit finds the disk full (SQLite gives back its reserve).
    on_full: Option<Arc<dyn Fn() + Send + Sync>>,
}

enum Tx {
    Sqlite(Transaction<'static, Sqlite>),
    Postgres(Transaction<'static, Postgres>),
}

impl std::fmt::Debug for WriteTx {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.tx {
            Tx::Sqlite(_) => "WriteTx(sqlite)",
            Tx::Postgres(_) => "WriteTx(postgres)",
        })
    }
}

impl WriteTx {
    /// A SQLite transaction begun in `turn`; `on_full` is told when its commit finds the disk
    /// full.
    pub(crate) fn sqlite(
        tx: Transaction<'static, Sqlite>,
        turn: tokio::sync::OwnedMutexGuard<()>,
        on_full: Arc<dyn Fn() + Send + Sync>,
    ) -> Self {
        Self {
            tx: Tx::Sqlite(tx),
            failed: false,
            _turn: Some(turn),
            on_full: Some(on_full),
        }
    }

    /// A PostgreSQL transaction.
    pub(crate) fn postgres(tx: Transaction<'static, Postgres>) -> Self {
        Self {
            tx: Tx::Postgres(tx),
            failed: false,
            _turn: None,
            on_full: None,
        }
    }

    /// Where the transaction's statements run.
    pub(crate) fn on(&mut self) -> On<'_> {
        let failed = Failed(Some(&mut self.failed));
        match &mut self.tx {
            Tx::Sqlite(tx) => On::SqliteTx(tx, failed),
            Tx::Postgres(tx) => On::PostgresTx(tx, failed),
        }
    }

    /// The engine's dialect.
    pub(crate) fn dialect(&self) -> Dialect {
        match self.tx {
            Tx::Sqlite(_) => Dialect::Sqlite,
            Tx::Postgres(_) => Dialect::Postgres,
        }
    }

    /// Commits.
    pub(crate) async fn commit(self) -> Result<(), StoreError> {
        if self.failed {
            // Dropped: rolled back, on either engine.
            return Err(StoreError::RolledBack);
        }
        let committed = match self.tx {
            Tx::Sqlite(tx) => tx.commit().await,
            Tx::Postgres(tx) => tx.commit().await,
        };
        match committed.map_err(StoreError::from) {
            Err(StoreError::DiskFull) => {
                if let Some(on_full) = &self.on_full {
                    on_full();
                }
                Err(StoreError::DiskFull)
            }
            other => other,
        }
    }
}

impl From<sqlx::Error> for StoreError {
    fn from(error: sqlx::Error) -> Self {
        match error {
            sqlx::Error::PoolClosed => Self::Closed,
            // SQLITE_FULL (PostgreSQL's codes are five-character SQLSTATEs).
            sqlx::Error::Database(e) if e.code().as_deref() == Some("13") => Self::DiskFull,
            other => Self::Engine(Box::new(other)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sqlite_reads_the_one_form_with_its_own_placeholders_functions_and_no_row_locks() {
        assert_eq!(
            sqlite_form(
                "SELECT LEAST(coalesce(a, $1), $2) FROM t WHERE id = $10 AND b = '$x' FOR UPDATE OF p"
            ),
            "SELECT min(coalesce(a, ?1), ?2) FROM t WHERE id = ?10 AND b = '$x'"
        );
        assert_eq!(
            sqlite_form("SELECT id FROM d ORDER BY id LIMIT $4 FOR UPDATE SKIP LOCKED)"),
            "SELECT id FROM d ORDER BY id LIMIT ?4)"
        );
        let statement: &'static str = "SELECT GREATEST(a, $1) FROM t FOR UPDATE";
        assert_eq!(Dialect::Postgres.form(statement), statement);
        let once = Dialect::Sqlite.form(statement);
        assert_eq!(once, "SELECT max(a, ?1) FROM t");
        assert!(
            std::ptr::eq(once, Dialect::Sqlite.form(statement)),
            "made once"
        );
    }
}
