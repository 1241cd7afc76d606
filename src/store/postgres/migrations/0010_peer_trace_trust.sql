-- Whether a peer's own trace context is continued (true) rather than linked to (false) when
-- traces are exported: `peergate peer trace NAME trusted`.
ALTER TABLE peers ADD COLUMN trusts_trace BOOLEAN NOT NULL DEFAULT FALSE;
