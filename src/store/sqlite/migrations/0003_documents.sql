CREATE TABLE documents (
    name TEXT PRIMARY KEY,
    etag TEXT NOT NULL,
    modified_at INTEGER NOT NULL
);
