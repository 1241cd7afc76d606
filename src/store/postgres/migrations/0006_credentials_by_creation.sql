-- The gateway keeps the ids of the credentials in memory and rereads those created since its
-- last read when an unknown id arrives.
CREATE INDEX credentials_created ON credentials(created_at);
