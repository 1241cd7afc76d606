CREATE TABLE peers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    rate_per_minute INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    last_used_at INTEGER
);
CREATE TABLE credentials (
    token_id TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL REFERENCES peers(id),
    secret_hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
CREATE INDEX credentials_peer ON credentials(peer_id);
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    expires_at INTEGER NOT NULL
);
CREATE INDEX tasks_expires ON tasks(expires_at);
CREATE TABLE contexts (
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    PRIMARY KEY (peer_id, context_id)
);
CREATE TABLE messages (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
CREATE INDEX messages_context ON messages(peer_id, context_id, seq);
