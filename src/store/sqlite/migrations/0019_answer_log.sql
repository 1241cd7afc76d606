-- The answer log (docs/receipts.md): every receipt issued, written with the task state it
-- proves; `entry` is SHA-256 of the receipt, the log's entry. `log_index` is its place in the
-- log, NULL until the integrator appends it.
CREATE TABLE receipts (
    jti TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    jws TEXT NOT NULL,
    entry BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    log_index INTEGER
);
-- Waiting receipts in the order the integrator takes them; an index once given is unique.
CREATE INDEX receipts_pending ON receipts (created_at, jti) WHERE log_index IS NULL;
CREATE UNIQUE INDEX receipts_log_index ON receipts (log_index) WHERE log_index IS NOT NULL;
-- The tree's stored hashes (RFC 6962, written once): the node of `level` at `n` covers leaves
-- n·2^level up to (n+1)·2^level.
CREATE TABLE log_hashes (
    level INTEGER NOT NULL,
    n INTEGER NOT NULL,
    hash BLOB NOT NULL,
    PRIMARY KEY (level, n)
);
-- Each signed checkpoint (a C2SP signed note), by the tree size it commits to.
CREATE TABLE log_checkpoints (
    size INTEGER PRIMARY KEY,
    note TEXT NOT NULL,
    created_at INTEGER NOT NULL
);
