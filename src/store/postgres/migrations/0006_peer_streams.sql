-- A peer's own cap on the streams it holds open at once; NULL: the policy's
-- limits.streams_per_peer.
ALTER TABLE peers ADD COLUMN max_streams BIGINT;
