//! The store engine the suites run against, chosen by `PEERGATE_TEST_STORE`.
//!
//! Every gateway a test starts (in process, as a child process, or the CLI) gets its store from
//! here, given the test's data directory; an engine that keeps its state elsewhere derives it
//! from that directory, so each test still has a store of its own. Adding an engine changes
//! only this file.

use std::path::{Path, PathBuf};

/// The environment variable that names the engine.
pub const STORE_VARIABLE: &str = "PEERGATE_TEST_STORE";

/// A store engine the suites can run against.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TestStore {
    /// SQLite, in a file in the data directory (the default).
    Sqlite,
    /// PostgreSQL: a database of its own per data directory, in this test binary's throwaway
    /// cluster (the data directory still holds files such as the card key).
    Postgres,
}

impl TestStore {
    /// Every engine, by the name `PEERGATE_TEST_STORE` takes.
    pub const ALL: [(&'static str, TestStore); 2] = [
        ("sqlite", TestStore::Sqlite),
        ("postgres", TestStore::Postgres),
    ];

    /// The engine named by `PEERGATE_TEST_STORE` (SQLite when unset); panics on a name it does
    /// not know.
    pub fn from_env() -> Self {
        match std::env::var(STORE_VARIABLE) {
            Err(std::env::VarError::NotPresent) => Self::named(None),
            Err(e) => panic!("{STORE_VARIABLE}: {e}"),
            Ok(name) => Self::named(Some(&name)),
        }
    }

    /// The engine called `name` (SQLite for none); panics on a name it does not know.
    pub fn named(name: Option<&str>) -> Self {
        let Some(name) = name else {
            return Self::Sqlite;
        };
        Self::ALL
            .iter()
            .find(|(known, _)| *known == name)
            .map(|(_, engine)| *engine)
            .unwrap_or_else(|| {
                let known: Vec<&str> = Self::ALL.iter().map(|(known, _)| *known).collect();
                panic!("{STORE_VARIABLE}={name:?} names no store engine; known: {known:?}")
            })
    }

    /// The engine's name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, engine)| *engine == self)
            .map(|(name, _)| *name)
            .unwrap()
    }

    /// The data directory an in-process gateway gets in `GatewayOptions`.
    pub fn data_dir(self, data: &Path) -> PathBuf {
        data.to_owned()
    }

    /// The store URL an in-process gateway gets in `GatewayOptions` (none: the embedded one).
    pub fn store_url(self, data: &Path) -> Option<String> {
        match self {
            Self::Sqlite => None,
            Self::Postgres => Some(postgres_url(data)),
        }
    }

    /// The command-line arguments that give a peergate command this engine's store.
    pub fn args(self, data: &Path) -> Vec<String> {
        match self {
            Self::Sqlite => vec!["--data".into(), data.to_str().unwrap().into()],
            Self::Postgres => vec![
                "--data".into(),
                data.to_str().unwrap().into(),
                "--store".into(),
                postgres_url(data),
            ],
        }
    }

    /// Opens the store directly, as the gateway would.
    pub async fn open(self, data: &Path) -> peergate::store::Store {
        match self {
            Self::Sqlite => peergate::store::Store::open(&self.data_dir(data))
                .await
                .expect("the store opens"),
            Self::Postgres => peergate::store::Store::open_at(
                &peergate::store::StoreLocation::Postgres(postgres_url(data)),
            )
            .await
            .expect("the store opens"),
        }
    }
}

impl TestStore {
    /// Runs `statement` on the store under `data` behind peergate's back, as someone with
    /// access to the database would (a test of tampering).
    pub async fn tamper(self, data: &Path, statement: &'static str) -> u64 {
        match self {
            Self::Sqlite => rusqlite::Connection::open(data.join("peergate.sqlite3"))
                .unwrap()
                .execute(statement, [])
                .unwrap() as u64,
            Self::Postgres => {
                use sqlx::Executor;
                let pool = sqlx::PgPool::connect(&postgres_url(data)).await.unwrap();
                let done = pool
                    .execute(sqlx::raw_sql(statement))
                    .await
                    .unwrap()
                    .rows_affected();
                pool.close().await;
                done
            }
        }
    }
}

/// The command-line arguments for the store under `data`, in the suite's engine.
pub fn store_args(data: &Path) -> Vec<String> {
    TestStore::from_env().args(data)
}

/// For a test (or part of one) that reads or breaks SQLite's files itself: false under SQLite;
/// under another engine it says what is skipped and why, and returns true.
pub fn skip_unless_sqlite(why: &str) -> bool {
    let engine = TestStore::from_env();
    let skip = engine != TestStore::Sqlite;
    if skip {
        eprintln!("skipped on the {} store: {why}", engine.name());
    }
    skip
}

/// The PostgreSQL database of the test whose data directory is `data`.
fn postgres_url(data: &Path) -> String {
    super::postgres::cluster()
        .expect("PEERGATE_TEST_STORE=postgres needs Debian's postgresql package (apt-get install postgresql)")
        .database_for(data)
}

/// A finished (or working) exchange of `peer`'s task `task` in `context`, in `state` at `now`,
/// kept a day, with nothing else: what a store test changes with `..`.
pub fn bare_exchange(
    (task, peer, context): (&str, &str, &str),
    state: peergate::protocol::types::TaskState,
    now: peergate::clock::Timestamp,
) -> peergate::store::Exchange {
    peergate::store::Exchange {
        task_id: task.into(),
        peer_id: peer.into(),
        context_id: context.into(),
        state,
        task_json: format!(
            "{{\"id\":\"{task}\",\"contextId\":\"{context}\",\"status\":{{\"state\":\"{}\"}}}}",
            state.as_str()
        ),
        now,
        expires_at: now + std::time::Duration::from_secs(86_400),
        messages: Vec::new(),
        usage: None,
        audit: None,
        instance: None,
        notify: false,
        push_config: None,
        upstream_task_id: None,
        receipt: None,
        call_trace: None,
        sealing: None,
    }
}
