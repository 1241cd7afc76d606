-- The A2A operations a peer may call (1.0 names, comma-separated; NULL: every one the policy
-- offers), as its administrator set them.
ALTER TABLE peers ADD COLUMN operations TEXT;
