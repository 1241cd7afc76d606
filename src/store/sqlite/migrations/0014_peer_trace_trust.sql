-- Whether a peer's own trace context is continued (1) rather than linked to (0) when traces
-- are exported: `peergate peer trace NAME trusted`.
ALTER TABLE peers ADD COLUMN trusts_trace INTEGER NOT NULL DEFAULT 0;
