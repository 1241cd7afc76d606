//! Push records read the same way from every engine's result rows.

use super::{FailedDelivery, PushConfigRecord, PushDelivery, StoreError};
use crate::clock::from_millis;
use sqlx::{ColumnIndex, Decode, Row, Type};

/// A config from a `push_configs` row.
pub(crate) fn config<R>(row: &R) -> Result<PushConfigRecord, StoreError>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(PushConfigRecord {
        task_id: row.try_get("task_id")?,
        id: row.try_get("id")?,
        peer_id: row.try_get::<String, _>("peer_id")?.into(),
        url: row.try_get("url")?,
        sealed: row.try_get("sealed")?,
        created_at: from_millis(row.try_get("created_at")?),
    })
}

/// A claimed delivery from a `push_deliveries` row, under the claim that took it.
pub(crate) fn delivery<R>(row: &R, claimed_until: i64) -> Result<PushDelivery, StoreError>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> Option<String>: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(PushDelivery {
        id: row.try_get("id")?,
        task_id: row.try_get("task_id")?,
        config_id: row.try_get("config_id")?,
        peer_id: row.try_get::<String, _>("peer_id")?.into(),
        url: row.try_get("url")?,
        sealed: row.try_get("sealed")?,
        body: row.try_get("body")?,
        attempts: u32::try_from(row.try_get::<i64, _>("attempts")?).unwrap_or(0),
        claimed_until: from_millis(claimed_until),
        call_trace: row.try_get("call_trace")?,
    })
}

/// A dead letter from a `push_deliveries` row joined with its peer's `name`.
pub(crate) fn failed<R>(row: &R) -> Result<FailedDelivery, StoreError>
where
    R: Row,
    for<'c> &'c str: ColumnIndex<R>,
    for<'r> String: Decode<'r, R::Database> + Type<R::Database>,
    for<'r> i64: Decode<'r, R::Database> + Type<R::Database>,
{
    Ok(FailedDelivery {
        id: row.try_get("id")?,
        peer_name: row.try_get("name")?,
        task_id: row.try_get("task_id")?,
        config_id: row.try_get("config_id")?,
        url: row.try_get("url")?,
        attempts: u32::try_from(row.try_get::<i64, _>("attempts")?).unwrap_or(0),
        last_error: row
            .try_get::<Option<String>, _>("last_error")?
            .unwrap_or_default(),
        created_at: from_millis(row.try_get("created_at")?),
        failed_at: from_millis(row.try_get("updated_at")?),
    })
}
