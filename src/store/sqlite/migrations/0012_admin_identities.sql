-- Administrators' identities at the organisation's identity provider ([admin.issuer]): the
-- provider's name in the policy and the token's client_id (else sub). The primary key makes
-- one identity name one administrator.
CREATE TABLE admin_identities (
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    admin_id TEXT NOT NULL REFERENCES admins(id),
    created_at INTEGER NOT NULL,
    PRIMARY KEY (issuer, subject)
);
