-- The whole schema as of SQLite migration 5, in PostgreSQL's dialect. Times are epoch
-- milliseconds (BIGINT); secrets are only ever hashes (BYTEA).
CREATE TABLE admins (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    password_hash TEXT,
    status TEXT NOT NULL,
    model_allowed BOOLEAN NOT NULL DEFAULT TRUE,
    tokens_per_day BIGINT,
    tokens_per_month BIGINT,
    created_at BIGINT NOT NULL
);
CREATE TABLE admin_tokens (
    token_id TEXT PRIMARY KEY,
    admin_id TEXT NOT NULL REFERENCES admins(id),
    secret_hash BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT
);
CREATE TABLE peers (
    id TEXT PRIMARY KEY,
    name TEXT NOT NULL UNIQUE,
    status TEXT NOT NULL,
    rate_per_minute BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT,
    password_hash TEXT,
    owner_id TEXT NOT NULL REFERENCES admins(id),
    expires_at BIGINT
);
CREATE INDEX peers_owner ON peers(owner_id);
CREATE TABLE credentials (
    token_id TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL REFERENCES peers(id),
    secret_hash BYTEA NOT NULL,
    created_at BIGINT NOT NULL,
    revoked_at BIGINT,
    kind TEXT NOT NULL DEFAULT 'token',
    expires_at BIGINT
);
CREATE INDEX credentials_peer ON credentials(peer_id);
CREATE TABLE tasks (
    id TEXT PRIMARY KEY,
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    state TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    expires_at BIGINT NOT NULL,
    instance TEXT
);
CREATE INDEX tasks_expires ON tasks(expires_at);
CREATE INDEX tasks_working ON tasks(state) WHERE state = 'TASK_STATE_WORKING';
CREATE TABLE contexts (
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    PRIMARY KEY (peer_id, context_id)
);
CREATE TABLE messages (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    peer_id TEXT NOT NULL,
    context_id TEXT NOT NULL,
    task_id TEXT NOT NULL,
    role TEXT NOT NULL,
    body TEXT NOT NULL,
    created_at BIGINT NOT NULL
);
CREATE INDEX messages_context ON messages(peer_id, context_id, seq);
CREATE TABLE documents (
    name TEXT PRIMARY KEY,
    etag TEXT NOT NULL,
    modified_at BIGINT NOT NULL
);
CREATE TABLE usage (
    admin_id TEXT NOT NULL,
    peer_id TEXT NOT NULL,
    day TEXT NOT NULL,
    tokens BIGINT NOT NULL,
    requests BIGINT NOT NULL,
    PRIMARY KEY (admin_id, day, peer_id)
);
CREATE TABLE audit (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    at BIGINT NOT NULL,
    actor TEXT NOT NULL,
    action TEXT NOT NULL,
    target TEXT NOT NULL,
    outcome TEXT NOT NULL,
    client TEXT NOT NULL,
    detail TEXT NOT NULL,
    owner_id TEXT
);
CREATE INDEX audit_at ON audit(at);
-- The audit log is append-only in the database itself: no code path, this one included, can
-- rewrite history.
CREATE FUNCTION audit_is_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    RAISE EXCEPTION 'the audit log is append-only';
END;
$$;
CREATE TRIGGER audit_keeps_rows BEFORE UPDATE OR DELETE ON audit
    FOR EACH ROW EXECUTE FUNCTION audit_is_append_only();
CREATE TRIGGER audit_keeps_truncation_out BEFORE TRUNCATE ON audit
    FOR EACH STATEMENT EXECUTE FUNCTION audit_is_append_only();
