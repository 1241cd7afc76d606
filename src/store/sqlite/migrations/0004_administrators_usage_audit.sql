CREATE TABLE admins (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    status TEXT NOT NULL,
    model_allowed INTEGER NOT NULL DEFAULT 1,
    tokens_per_day INTEGER,
    tokens_per_month INTEGER,
    created_at INTEGER NOT NULL
);
CREATE TABLE admin_tokens (
    token_id TEXT PRIMARY KEY,
    admin_id TEXT NOT NULL REFERENCES admins(id),
    secret_hash BLOB NOT NULL,
    created_at INTEGER NOT NULL,
    revoked_at INTEGER
);
ALTER TABLE peers ADD COLUMN owner_id TEXT REFERENCES admins(id);
ALTER TABLE peers ADD COLUMN expires_at INTEGER;
ALTER TABLE credentials ADD COLUMN expires_at INTEGER;
CREATE INDEX peers_owner ON peers(owner_id);
-- Peers from before administrators existed go to an administrator named "operator", who has
-- no password until `peergate admin password operator`.
INSERT INTO admins (id, name, status, created_at)
    SELECT 'adm_operator', 'operator', 'active', CAST(strftime('%s', 'now') AS INTEGER) * 1000
    WHERE EXISTS (SELECT 1 FROM peers);
UPDATE peers SET owner_id = 'adm_operator' WHERE owner_id IS NULL;
CREATE TABLE usage (
    admin_id TEXT NOT NULL,
    peer_id TEXT NOT NULL,
    day TEXT NOT NULL,
    tokens INTEGER NOT NULL,
    requests INTEGER NOT NULL,
    PRIMARY KEY (admin_id, day, peer_id)
);
CREATE TABLE audit (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    at INTEGER NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    outcome TEXT NOT NULL,
    client TEXT NOT NULL,
    detail TEXT NOT NULL,
    owner_id TEXT
);
CREATE INDEX audit_at ON audit(at);
CREATE TRIGGER audit_keeps_rows BEFORE UPDATE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
CREATE TRIGGER audit_keeps_deletions_out BEFORE DELETE ON audit
    BEGIN SELECT RAISE(ABORT, 'the audit log is append-only'); END;
