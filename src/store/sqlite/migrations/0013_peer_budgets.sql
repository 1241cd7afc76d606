-- A peer's own daily token budget, besides its owner's; NULL: none of its own.
ALTER TABLE peers ADD COLUMN tokens_per_day INTEGER;
-- What a peer spent in a period, read once a day per peer when it has a budget.
CREATE INDEX usage_by_peer_day ON usage (peer_id, day);
