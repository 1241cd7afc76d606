ALTER TABLE credentials ADD COLUMN kind TEXT NOT NULL DEFAULT 'token';
ALTER TABLE peers ADD COLUMN password_hash TEXT;
