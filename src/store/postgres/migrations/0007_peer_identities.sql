-- Identities a peer proves itself with besides the credentials peergate issues: an identity
-- provider's subject (kind 'token', issuer = the policy's issuer name), a client certificate's
-- subject alternative name ('certificate_san') or SHA-256 ('certificate_sha256'; issuer '').
-- The primary key makes one identity name one peer.
CREATE TABLE peer_identities (
    kind TEXT NOT NULL,
    issuer TEXT NOT NULL,
    subject TEXT NOT NULL,
    peer_id TEXT NOT NULL REFERENCES peers(id),
    created_at BIGINT NOT NULL,
    PRIMARY KEY (kind, issuer, subject)
);
CREATE INDEX peer_identities_peer ON peer_identities(peer_id);
