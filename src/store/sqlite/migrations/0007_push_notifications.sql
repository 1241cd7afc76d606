-- Push-notification configurations of tasks, and the durable queue of their deliveries.
-- `sealed` holds the config's token and credentials encrypted (AES-256-GCM, bound to the task
-- and config ids); the URL is kept in the clear so a dead letter can say where it was going.
CREATE TABLE push_configs (
    task_id TEXT NOT NULL,
    id TEXT NOT NULL,
    peer_id TEXT NOT NULL,
    url TEXT NOT NULL,
    sealed TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (task_id, id)
);
-- One row per (state change, config) until delivered (then deleted) or given up (`dead`).
CREATE TABLE push_deliveries (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    config_id TEXT NOT NULL,
    peer_id TEXT NOT NULL,
    url TEXT NOT NULL,
    sealed TEXT NOT NULL,
    body TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    next_attempt_at INTEGER NOT NULL,
    claimed_until INTEGER,
    last_error TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX push_deliveries_due ON push_deliveries(state, next_attempt_at);
CREATE INDEX push_deliveries_by_config ON push_deliveries(task_id, config_id, id);
