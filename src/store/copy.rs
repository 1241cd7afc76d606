//! Moving an embedded store to PostgreSQL: every row of every table, in one PostgreSQL
//! transaction, into a PostgreSQL store that holds nothing yet.
//!
//! Rows are copied as they are stored (hashes stay hashes: no secret is read or re-made), in
//! the order foreign keys need, with the sequence numbers of messages and audit records kept so
//! histories and the audit log read in the same order.

use super::StoreError;
use super::postgres::PostgresStore;
use super::sqlite::SqliteStore;
use sqlx::{Postgres, QueryBuilder, Row};
use std::path::Path;

/// How a column is read from SQLite and written to PostgreSQL.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    OptInt,
    Text,
    OptText,
    Blob,
    Bool,
}

enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
    Blob(Vec<u8>),
    Bool(bool),
}

/// Every table, parents first, with its columns.
const TABLES: &[(&str, &[(&str, Kind)])] = &[
    (
        "admins",
        &[
            ("id", Kind::Text),
            ("name", Kind::Text),
            ("password_hash", Kind::OptText),
            ("status", Kind::Text),
            ("model_allowed", Kind::Bool),
            ("tokens_per_day", Kind::OptInt),
            ("tokens_per_month", Kind::OptInt),
            ("created_at", Kind::Int),
            ("role", Kind::Text),
        ],
    ),
    (
        "admin_tokens",
        &[
            ("token_id", Kind::Text),
            ("admin_id", Kind::Text),
            ("secret_hash", Kind::Blob),
            ("created_at", Kind::Int),
            ("revoked_at", Kind::OptInt),
        ],
    ),
    (
        "peers",
        &[
            ("id", Kind::Text),
            ("name", Kind::Text),
            ("status", Kind::Text),
            ("rate_per_minute", Kind::Int),
            ("created_at", Kind::Int),
            ("last_used_at", Kind::OptInt),
            ("password_hash", Kind::OptText),
            ("owner_id", Kind::Text),
            ("expires_at", Kind::OptInt),
            ("max_streams", Kind::OptInt),
            ("tokens_per_day", Kind::OptInt),
            ("trusts_trace", Kind::Bool),
            ("operations", Kind::OptText),
        ],
    ),
    (
        "credentials",
        &[
            ("token_id", Kind::Text),
            ("peer_id", Kind::Text),
            ("secret_hash", Kind::Blob),
            ("created_at", Kind::Int),
            ("revoked_at", Kind::OptInt),
            ("kind", Kind::Text),
            ("expires_at", Kind::OptInt),
        ],
    ),
    (
        "tasks",
        &[
            ("id", Kind::Text),
            ("peer_id", Kind::Text),
            ("context_id", Kind::Text),
            ("state", Kind::Text),
            ("body", Kind::Text),
            ("created_at", Kind::Int),
            ("expires_at", Kind::Int),
            ("instance", Kind::OptText),
            ("status_at", Kind::OptInt),
            ("upstream_task_id", Kind::OptText),
        ],
    ),
    (
        "contexts",
        &[
            ("peer_id", Kind::Text),
            ("context_id", Kind::Text),
            ("created_at", Kind::Int),
            ("updated_at", Kind::Int),
        ],
    ),
    (
        "messages",
        &[
            ("seq", Kind::Int),
            ("peer_id", Kind::Text),
            ("context_id", Kind::Text),
            ("task_id", Kind::Text),
            ("role", Kind::Text),
            ("body", Kind::Text),
            ("created_at", Kind::Int),
        ],
    ),
    (
        "documents",
        &[
            ("name", Kind::Text),
            ("etag", Kind::Text),
            ("modified_at", Kind::Int),
        ],
    ),
    (
        "usage",
        &[
            ("admin_id", Kind::Text),
            ("peer_id", Kind::Text),
            ("day", Kind::Text),
            ("tokens", Kind::Int),
            ("requests", Kind::Int),
        ],
    ),
    (
        "audit",
        &[
            ("seq", Kind::Int),
            ("at", Kind::Int),
            ("actor", Kind::Text),
            ("action", Kind::Text),
            ("target", Kind::Text),
            ("outcome", Kind::Text),
            ("client", Kind::Text),
            ("detail", Kind::Text),
            ("owner_id", Kind::OptText),
        ],
    ),
    (
        "push_configs",
        &[
            ("task_id", Kind::Text),
            ("id", Kind::Text),
            ("peer_id", Kind::Text),
            ("url", Kind::Text),
            ("sealed", Kind::Text),
            ("created_at", Kind::Int),
        ],
    ),
    (
        "push_deliveries",
        &[
            ("id", Kind::Int),
            ("task_id", Kind::Text),
            ("config_id", Kind::Text),
            ("peer_id", Kind::Text),
            ("url", Kind::Text),
            ("sealed", Kind::Text),
            ("body", Kind::Text),
            ("state", Kind::Text),
            ("attempts", Kind::Int),
            ("next_attempt_at", Kind::Int),
            ("claimed_until", Kind::OptInt),
            ("last_error", Kind::OptText),
            ("created_at", Kind::Int),
            ("updated_at", Kind::Int),
        ],
    ),
];

/// Tables whose column PostgreSQL generates: copied as they are, then the generator moved past.
const SEQUENCED: &[(&str, &str)] = &[
    ("messages", "seq"),
    ("audit", "seq"),
    ("push_deliveries", "id"),
];

/// Rows a batch inserts at most (PostgreSQL takes at most 65,535 bound values a statement).
const ROWS_PER_INSERT: usize = 500;

/// Rows copied, per table.
pub type CopyReport = Vec<(&'static str, u64)>;

/// Copies the embedded store in `data_dir` into the PostgreSQL store at `url`, which must hold
/// nothing yet. All or nothing: the PostgreSQL side commits once, at the end.
pub async fn sqlite_to_postgres(data_dir: &Path, url: &str) -> Result<CopyReport, StoreError> {
    let source = SqliteStore::open(data_dir).await?;
    // A store that a gateway is writing to would be copied half-way through its turns.
    if let Err(StoreError::Served { holder }) =
        super::StoreEngine::claim_for_serving(&source, super::Serving::Alone).await
    {
        return Err(StoreError::Schema(format!(
            "a gateway ({holder}) is serving this store: stop it before copying"
        )));
    }
    let target = PostgresStore::open(url).await?;
    let outcome = copy(&source, &target).await;
    super::StoreEngine::close(&source).await;
    super::StoreEngine::close(&target).await;
    outcome
}

async fn copy(source: &SqliteStore, target: &PostgresStore) -> Result<CopyReport, StoreError> {
    let mut tx = target.pool().begin().await?;
    for (table, _) in TABLES {
        let held: i64 =
            sqlx::query_scalar(sqlx::AssertSqlSafe(format!("SELECT count(*) FROM {table}")))
                .fetch_one(&mut *tx)
                .await?;
        if held > 0 {
            return Err(StoreError::Schema(format!(
                "the target store is not empty ({table} holds {held} rows); copy into a new database"
            )));
        }
    }
    // One read transaction: every table as of the same moment.
    let mut snapshot = source.reader().begin().await?;
    let mut report = Vec::new();
    for (table, columns) in TABLES {
        let names: Vec<&str> = columns.iter().map(|(name, _)| *name).collect();
        let select = format!("SELECT {} FROM {table}", names.join(", "));
        let rows = sqlx::query(sqlx::AssertSqlSafe(select))
            .fetch_all(&mut *snapshot)
            .await?;
        let mut cells = Vec::with_capacity(rows.len());
        for row in &rows {
            let mut values = Vec::with_capacity(columns.len());
            for (name, kind) in *columns {
                values.push(match kind {
                    Kind::Int => Cell::Int(Some(row.try_get::<i64, _>(*name)?)),
                    Kind::OptInt => Cell::Int(row.try_get::<Option<i64>, _>(*name)?),
                    Kind::Text => Cell::Text(Some(row.try_get::<String, _>(*name)?)),
                    Kind::OptText => Cell::Text(row.try_get::<Option<String>, _>(*name)?),
                    Kind::Blob => Cell::Blob(row.try_get::<Vec<u8>, _>(*name)?),
                    Kind::Bool => Cell::Bool(row.try_get::<bool, _>(*name)?),
                });
            }
            cells.push(values);
        }
        let overriding = if SEQUENCED.iter().any(|(t, _)| t == table) {
            " OVERRIDING SYSTEM VALUE "
        } else {
            " "
        };
        for chunk in cells.chunks(ROWS_PER_INSERT) {
            let mut insert = QueryBuilder::<Postgres>::new(format!(
                "INSERT INTO {table} ({}){overriding}",
                names.join(", ")
            ));
            insert.push_values(chunk, |mut row, values| {
                for value in values {
                    match value {
                        Cell::Int(v) => row.push_bind(*v),
                        Cell::Text(v) => row.push_bind(v.clone()),
                        Cell::Blob(v) => row.push_bind(v.clone()),
                        Cell::Bool(v) => row.push_bind(*v),
                    };
                }
            });
            insert.build().execute(&mut *tx).await?;
        }
        if let Some((_, column)) = SEQUENCED.iter().find(|(t, _)| t == table) {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "SELECT setval(pg_get_serial_sequence('{table}', '{column}'), \
                 greatest((SELECT max({column}) FROM {table}), 1))"
            )))
            .execute(&mut *tx)
            .await?;
        }
        report.push((*table, u64::try_from(rows.len()).unwrap_or(u64::MAX)));
    }
    tx.commit().await?;
    Ok(report)
}
