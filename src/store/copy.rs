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

/// How a column is read from SQLite and written to PostgreSQL, by PostgreSQL's type for it.
#[derive(Clone, Copy)]
enum Kind {
    Int,
    Text,
    Blob,
    Bool,
}

enum Cell {
    Int(Option<i64>),
    Text(Option<String>),
    Blob(Option<Vec<u8>>),
    Bool(Option<bool>),
}

/// One table as copied: its columns (the embedded store's, each with PostgreSQL's type) and
/// the column PostgreSQL generates, if any (copied as it is, then the generator moved past).
struct Table {
    name: String,
    columns: Vec<(String, Kind)>,
    generated: Option<String>,
}

/// Rows a batch inserts at most (PostgreSQL takes at most 65,535 bound values a statement).
const ROWS_PER_INSERT: usize = 500;

/// Rows copied, per table.
pub type CopyReport = Vec<(String, u64)>;

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
    // One read transaction: every table as of the same moment.
    let mut snapshot = source.reader().begin().await?;
    let mut tx = target.pool().begin().await?;
    let tables = tables(&mut snapshot, &mut tx).await?;
    for table in &tables {
        let held: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
            "SELECT count(*) FROM {}",
            table.name
        )))
        .fetch_one(&mut *tx)
        .await?;
        if held > 0 {
            return Err(StoreError::Schema(format!(
                "the target store is not empty ({} holds {held} rows); copy into a new database",
                table.name
            )));
        }
    }
    let mut report = Vec::new();
    for table in &tables {
        let copied = copy_table(table, &mut snapshot, &mut tx).await?;
        report.push((table.name.clone(), copied));
    }
    tx.commit().await?;
    Ok(report)
}

/// Every table of the embedded store, parents before the tables whose foreign keys name them,
/// each with its columns as PostgreSQL types them. A table or a column the target does not
/// have stops the copy (its rows would be lost): a new one is copied without an edit here.
async fn tables(
    source: &mut sqlx::SqliteConnection,
    target: &mut sqlx::PgConnection,
) -> Result<Vec<Table>, StoreError> {
    let names: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'table' \
         AND name NOT LIKE 'sqlite_%' AND name NOT LIKE '_sqlx_%' ORDER BY name",
    )
    .fetch_all(&mut *source)
    .await?;
    // The order both schemas need: each engine's foreign keys (SQLite cannot add one to a
    // table it already has, so the two may differ).
    let mut parents = Vec::with_capacity(names.len());
    for name in &names {
        let mut named: Vec<String> =
            sqlx::query_scalar("SELECT DISTINCT \"table\" FROM pragma_foreign_key_list(?1)")
                .bind(name)
                .fetch_all(&mut *source)
                .await?;
        let enforced: Vec<String> = sqlx::query_scalar(
            "SELECT DISTINCT confrelid::regclass::text FROM pg_constraint \
             WHERE contype = 'f' AND conrelid = to_regclass($1)",
        )
        .bind(name)
        .fetch_all(&mut *target)
        .await?;
        named.extend(enforced);
        named.retain(|parent| names.contains(parent));
        parents.push((name.clone(), named));
    }
    let mut tables = Vec::with_capacity(names.len());
    for name in parents_first(parents)? {
        tables.push(table(name, source, target).await?);
    }
    Ok(tables)
}

/// The names in an order where each comes after the tables it names.
fn parents_first(mut waiting: Vec<(String, Vec<String>)>) -> Result<Vec<String>, StoreError> {
    let mut ordered: Vec<String> = Vec::with_capacity(waiting.len());
    while !waiting.is_empty() {
        let ready = waiting
            .iter()
            .position(|(name, parents)| parents.iter().all(|p| p == name || ordered.contains(p)));
        let Some(ready) = ready else {
            return Err(StoreError::Schema(
                "the embedded store's foreign keys form a cycle".to_owned(),
            ));
        };
        ordered.push(waiting.remove(ready).0);
    }
    Ok(ordered)
}

/// One table's columns: the embedded store's, each typed as the target types it.
async fn table(
    name: String,
    source: &mut sqlx::SqliteConnection,
    target: &mut sqlx::PgConnection,
) -> Result<Table, StoreError> {
    let held: Vec<String> =
        sqlx::query_scalar("SELECT name FROM pragma_table_info(?1) ORDER BY cid")
            .bind(&name)
            .fetch_all(&mut *source)
            .await?;
    let typed: Vec<(String, String, String)> = sqlx::query_as(
        "SELECT column_name::text, data_type::text, is_identity::text \
         FROM information_schema.columns \
         WHERE table_schema = current_schema() AND table_name = $1",
    )
    .bind(&name)
    .fetch_all(&mut *target)
    .await?;
    let missing = |what: String| StoreError::Schema(format!("the target store has no {what}"));
    if typed.is_empty() {
        return Err(missing(format!("table {name}")));
    }
    let mut columns = Vec::with_capacity(held.len());
    let mut generated = None;
    for column in held {
        let Some((_, data_type, identity)) = typed.iter().find(|(c, ..)| *c == column) else {
            return Err(missing(format!("column {name}.{column}")));
        };
        let kind = match data_type.as_str() {
            "bigint" | "integer" | "smallint" => Kind::Int,
            "boolean" => Kind::Bool,
            "bytea" => Kind::Blob,
            "text" | "character varying" => Kind::Text,
            // Copied as text it would fail at the insert, after the other tables' work.
            other => {
                return Err(StoreError::Schema(format!(
                    "the copy does not know how to carry {name}.{column} ({other})"
                )));
            }
        };
        if identity == "YES" {
            generated = Some(column.clone());
        }
        columns.push((column, kind));
    }
    Ok(Table {
        name,
        columns,
        generated,
    })
}

/// Copies one table's rows; returns how many.
async fn copy_table(
    table: &Table,
    source: &mut sqlx::SqliteConnection,
    target: &mut sqlx::PgConnection,
) -> Result<u64, StoreError> {
    let names: Vec<&str> = table
        .columns
        .iter()
        .map(|(name, _)| name.as_str())
        .collect();
    let select = format!("SELECT {} FROM {}", names.join(", "), table.name);
    let rows = sqlx::query(sqlx::AssertSqlSafe(select))
        .fetch_all(&mut *source)
        .await?;
    let mut cells = Vec::with_capacity(rows.len());
    for row in &rows {
        let mut values = Vec::with_capacity(table.columns.len());
        for (i, (_, kind)) in table.columns.iter().enumerate() {
            values.push(match kind {
                Kind::Int => Cell::Int(row.try_get(i)?),
                Kind::Text => Cell::Text(row.try_get(i)?),
                Kind::Blob => Cell::Blob(row.try_get(i)?),
                Kind::Bool => Cell::Bool(row.try_get(i)?),
            });
        }
        cells.push(values);
    }
    let overriding = match table.generated {
        Some(_) => " OVERRIDING SYSTEM VALUE ",
        None => " ",
    };
    for chunk in cells.chunks(ROWS_PER_INSERT) {
        let mut insert = QueryBuilder::<Postgres>::new(format!(
            "INSERT INTO {} ({}){overriding}",
            table.name,
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
        insert.build().execute(&mut *target).await?;
    }
    if let Some(column) = &table.generated {
        let name = &table.name;
        sqlx::query(sqlx::AssertSqlSafe(format!(
            "SELECT setval(pg_get_serial_sequence('{name}', '{column}'), \
             greatest((SELECT max({column}) FROM {name}), 1))"
        )))
        .execute(&mut *target)
        .await?;
    }
    Ok(u64::try_from(rows.len()).unwrap_or(u64::MAX))
}
