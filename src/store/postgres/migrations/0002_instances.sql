-- The running instances and their leases (several instances serve one database). A lease is
-- renewed well before it lapses; an instance whose lease lapsed is gone, and a survivor fails
-- its working tasks as interrupted.
CREATE TABLE instances (
    id TEXT PRIMARY KEY,
    lease_until TIMESTAMPTZ NOT NULL
);
