//! A client certificate the TLS handshake verified, as the guard needs it: its SHA-256, its
//! subject alternative names by type, whether it may be used to authenticate a client, and
//! when it expires (checked again on every request of a connection kept alive past it). The
//! same reader tells when a revocation list is due to be replaced.
//!
//! The names are read from the certificate's DER by a reader that takes only what it needs
//! (the `subjectAltName` and `extKeyUsage` extensions) and refuses what two readers could read
//! differently: a name holding a NUL or any byte outside printable ASCII makes the certificate's
//! names unusable (its fingerprint still identifies it), and URI names are never compared with
//! DNS names.

use sha2::{Digest, Sha256};

/// A verified client certificate (the end-entity one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientCertificate {
    /// SHA-256 of its DER.
    pub sha256: [u8; 32],
    /// The same as lowercase hex (how bindings name it).
    pub sha256_hex: String,
    /// Its URI subject alternative names (a SPIFFE id, say).
    pub uris: Vec<String>,
    /// Its DNS subject alternative names.
    pub dns_names: Vec<String>,
    /// Whether its extended key usage names `clientAuth`.
    pub client_auth: bool,
    /// Whether its names could not be read unambiguously; then none is used.
    pub names_unusable: bool,
    /// Its `notAfter`, when its validity could be read.
    pub not_after: Option<crate::clock::Timestamp>,
}

/// The `id-kp-clientAuth` OID (1.3.6.1.5.5.7.3.2), as DER content.
const CLIENT_AUTH: &[u8] = &[0x2B, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x02];
/// `id-ce-subjectAltName` (2.5.29.17).
const SUBJECT_ALT_NAME: &[u8] = &[0x55, 0x1D, 0x11];
/// `id-ce-extKeyUsage` (2.5.29.37).
const EXT_KEY_USAGE: &[u8] = &[0x55, 0x1D, 0x25];

impl ClientCertificate {
    /// The certificate of `der`. A certificate whose structure cannot be read has no usable
    /// names and no `clientAuth`.
    pub fn from_der(der: &[u8]) -> Self {
        let sha256: [u8; 32] = Sha256::digest(der).into();
        let mut certificate = Self {
            sha256_hex: sha256.iter().map(|b| format!("{b:02x}")).collect(),
            sha256,
            uris: Vec::new(),
            dns_names: Vec::new(),
            client_auth: false,
            names_unusable: false,
            not_after: validity(der).map(|(_, not_after)| not_after),
        };
        if certificate.read_extensions(der).is_none() {
            certificate.uris.clear();
            certificate.dns_names.clear();
            certificate.names_unusable = true;
            // A usage read before the structure failed is no more trusted than the names.
            certificate.client_auth = false;
        }
        certificate
    }

    /// Whether it has expired at `now` (a certificate whose validity could not be read is
    /// judged by the handshake alone).
    pub fn expired_at(&self, now: crate::clock::Timestamp) -> bool {
        self.not_after.is_some_and(|not_after| now > not_after)
    }

    /// Its SHA-256 as unpadded base64url (RFC 8705's `x5t#S256`).
    pub fn x5t_s256(&self) -> String {
        use base64::Engine as _;
        base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(self.sha256)
    }

    fn read_extensions(&mut self, der: &[u8]) -> Option<()> {
        let (certificate, _) = expect(der, 0x30)?;
        let (tbs, _) = expect(certificate, 0x30)?;
        let mut rest = tbs;
        while !rest.is_empty() {
            let (tag, content, after) = tlv(rest)?;
            rest = after;
            // [3] EXPLICIT Extensions
            if tag != 0xA3 {
                continue;
            }
            let (mut extensions, _) = expect(content, 0x30)?;
            while !extensions.is_empty() {
                let (extension, after) = expect(extensions, 0x30)?;
                extensions = after;
                let (oid, mut fields) = expect(extension, 0x06)?;
                if let Some((0x01, _, after)) = tlv(fields) {
                    fields = after; // critical
                }
                let (value, _) = expect(fields, 0x04)?;
                if oid == SUBJECT_ALT_NAME {
                    self.read_names(value)?;
                } else if oid == EXT_KEY_USAGE {
                    let (mut usages, _) = expect(value, 0x30)?;
                    while !usages.is_empty() {
                        let (usage, after) = expect(usages, 0x06)?;
                        usages = after;
                        self.client_auth |= usage == CLIENT_AUTH;
                    }
                }
            }
        }
        Some(())
    }

    fn read_names(&mut self, value: &[u8]) -> Option<()> {
        let (mut names, _) = expect(value, 0x30)?;
        while !names.is_empty() {
            let (tag, content, after) = tlv(names)?;
            names = after;
            let text = || {
                // IA5String, and printable: a NUL or a control byte is refused outright.
                content
                    .iter()
                    .all(|b| (0x21..=0x7E).contains(b))
                    .then(|| String::from_utf8(content.to_vec()).ok())
                    .flatten()
            };
            match tag {
                0x82 => self.dns_names.push(text()?),
                0x86 => self.uris.push(text()?),
                _ => {}
            }
        }
        Some(())
    }
}

/// A certificate's `notBefore` and `notAfter` (RFC 5280 §4.1.2.5).
pub fn validity(der: &[u8]) -> Option<(crate::clock::Timestamp, crate::clock::Timestamp)> {
    let (certificate, _) = expect(der, 0x30)?;
    let (tbs, _) = expect(certificate, 0x30)?;
    let mut rest = tbs;
    if let Some((0xA0, _, after)) = tlv(rest) {
        rest = after; // [0] EXPLICIT version
    }
    let (_, rest) = expect(rest, 0x02)?; // serialNumber
    let (_, rest) = expect(rest, 0x30)?; // signature
    let (_, rest) = expect(rest, 0x30)?; // issuer
    let (validity, _) = expect(rest, 0x30)?;
    let (not_before, rest) = time(validity)?;
    let (not_after, _) = time(rest)?;
    Some((not_before, not_after))
}

/// When a certificate revocation list says its next one is due (`nextUpdate`, RFC 5280
/// §5.1.2.5), if it says.
pub fn crl_next_update(der: &[u8]) -> Option<crate::clock::Timestamp> {
    let (list, _) = expect(der, 0x30)?;
    let (tbs, _) = expect(list, 0x30)?;
    let mut rest = tbs;
    if let Some((0x02, _, after)) = tlv(rest) {
        rest = after; // version
    }
    let (_, rest) = expect(rest, 0x30)?; // signature
    let (_, rest) = expect(rest, 0x30)?; // issuer
    let (_, rest) = time(rest)?; // thisUpdate
    time(rest).map(|(next_update, _)| next_update)
}

/// A `Time`: UTCTime (`YYMMDDHHMMSSZ`, years 1950 to 2049) or GeneralizedTime
/// (`YYYYMMDDHHMMSSZ`), in UTC and to the second as RFC 5280 §4.1.2.5 requires; and what
/// follows it.
fn time(input: &[u8]) -> Option<(crate::clock::Timestamp, &[u8])> {
    let (tag, content, rest) = tlv(input)?;
    let digits = match (tag, content.split_last()) {
        (0x17 | 0x18, Some((b'Z', digits))) if digits.iter().all(u8::is_ascii_digit) => digits,
        _ => return None,
    };
    let number = |at: usize, len: usize| -> Option<i16> {
        std::str::from_utf8(digits.get(at..at + len)?)
            .ok()?
            .parse()
            .ok()
    };
    let (year, at) = match (tag, digits.len()) {
        (0x17, 12) => {
            let yy = number(0, 2)?;
            (if yy < 50 { 2000 + yy } else { 1900 + yy }, 2)
        }
        (0x18, 14) => (number(0, 4)?, 4),
        _ => return None,
    };
    let field = |i: usize| number(at + 2 * i, 2).and_then(|n| i8::try_from(n).ok());
    let datetime = jiff::civil::DateTime::new(
        year,
        field(0)?,
        field(1)?,
        field(2)?,
        field(3)?,
        field(4)?,
        0,
    )
    .ok()?;
    let at = jiff::tz::Offset::UTC.to_timestamp(datetime).ok()?;
    Some((at, rest))
}

/// One DER TLV: (tag, content, what follows). Single-byte tags and definite lengths only.
fn tlv(input: &[u8]) -> Option<(u8, &[u8], &[u8])> {
    let (&tag, rest) = input.split_first()?;
    if tag & 0x1F == 0x1F {
        return None;
    }
    let (&first, rest) = rest.split_first()?;
    let (length, rest) = if first < 0x80 {
        (usize::from(first), rest)
    } else {
        let count = usize::from(first & 0x7F);
        if count == 0 || count > 4 || rest.len() < count {
            return None;
        }
        let length = rest[..count]
            .iter()
            .fold(0usize, |acc, b| (acc << 8) | usize::from(*b));
        (length, &rest[count..])
    };
    if rest.len() < length {
        return None;
    }
    Some((tag, &rest[..length], &rest[length..]))
}

/// The content of a TLV with `tag`, and what follows it.
fn expect(input: &[u8], tag: u8) -> Option<(&[u8], &[u8])> {
    match tlv(input)? {
        (found, content, rest) if found == tag => Some((content, rest)),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// DER of a TLV.
    fn der(tag: u8, content: &[u8]) -> Vec<u8> {
        let mut out = vec![tag];
        if content.len() < 0x80 {
            out.push(content.len() as u8);
        } else {
            out.extend([0x82, (content.len() >> 8) as u8, content.len() as u8]);
        }
        out.extend(content);
        out
    }

    fn certificate(names: &[(u8, &[u8])], usages: &[&[u8]]) -> Vec<u8> {
        let general_names: Vec<u8> = names.iter().flat_map(|(t, v)| der(*t, v)).collect();
        let san = [
            der(0x06, SUBJECT_ALT_NAME),
            der(0x04, &der(0x30, &general_names)),
        ]
        .concat();
        let eku_list: Vec<u8> = usages.iter().flat_map(|u| der(0x06, u)).collect();
        let eku = [
            der(0x06, EXT_KEY_USAGE),
            der(0x01, &[0xFF]),
            der(0x04, &der(0x30, &eku_list)),
        ]
        .concat();
        let extensions = der(
            0xA3,
            &der(0x30, &[der(0x30, &san), der(0x30, &eku)].concat()),
        );
        let validity = der(
            0x30,
            &[der(0x17, b"250101000000Z"), der(0x18, b"20270615123000Z")].concat(),
        );
        let tbs = [
            der(0xA0, &der(0x02, &[2])),
            der(0x02, &[7]),
            der(0x30, &[]),
            der(0x30, &[]),
            validity,
            extensions,
        ]
        .concat();
        der(
            0x30,
            &[der(0x30, &tbs), der(0x30, &[]), der(0x03, &[0])].concat(),
        )
    }

    #[test]
    fn names_and_usage_by_type() {
        let cert = certificate(
            &[
                (0x86, b"spiffe://acme.example/agent"),
                (0x82, b"agent.acme.example"),
            ],
            &[CLIENT_AUTH],
        );
        let read = ClientCertificate::from_der(&cert);
        assert_eq!(read.uris, ["spiffe://acme.example/agent"]);
        assert_eq!(read.dns_names, ["agent.acme.example"]);
        assert!(read.client_auth && !read.names_unusable);
        assert_eq!(read.sha256_hex.len(), 64);
        let not_after: crate::clock::Timestamp = "2027-06-15T12:30:00Z".parse().unwrap();
        assert_eq!(read.not_after, Some(not_after));
        assert!(!read.expired_at(not_after));
        assert!(read.expired_at(crate::clock::later(
            not_after,
            std::time::Duration::from_secs(1)
        )));
    }

    #[test]
    fn times_are_read_as_rfc_5280_writes_them_and_nothing_else() {
        let at = |tag, text: &[u8]| time(&der(tag, text)).map(|(t, _)| t.to_string());
        assert_eq!(
            at(0x17, b"491231235959Z").as_deref(),
            Some("2049-12-31T23:59:59Z")
        );
        assert_eq!(
            at(0x17, b"500101000000Z").as_deref(),
            Some("1950-01-01T00:00:00Z")
        );
        assert_eq!(
            at(0x18, b"20991231000000Z").as_deref(),
            Some("2099-12-31T00:00:00Z")
        );
        for bad in [
            &b"4912312359Z"[..],
            b"491231235959",
            b"491231235959+0100",
            b"49123123595Z9",
            b"491332235959Z",
        ] {
            assert_eq!(at(0x17, bad), None, "{}", String::from_utf8_lossy(bad));
        }
        assert_eq!(
            at(0x18, b"491231235959Z"),
            None,
            "a UTCTime's length in a GeneralizedTime"
        );
    }

    #[test]
    fn a_lists_next_update_is_read_after_its_this_update() {
        let tbs = [
            der(0x02, &[1]),
            der(0x30, &[]),
            der(0x30, &[]),
            der(0x17, b"261201000000Z"),
            der(0x17, b"261208000000Z"),
        ]
        .concat();
        let list = der(
            0x30,
            &[der(0x30, &tbs), der(0x30, &[]), der(0x03, &[0])].concat(),
        );
        let next: crate::clock::Timestamp = "2026-12-08T00:00:00Z".parse().unwrap();
        assert_eq!(crl_next_update(&list), Some(next));
        let without = [der(0x30, &[]), der(0x30, &[]), der(0x17, b"261201000000Z")].concat();
        let list = der(0x30, &[der(0x30, &without), der(0x30, &[])].concat());
        assert_eq!(crl_next_update(&list), None);
    }

    #[test]
    fn a_usage_read_before_a_broken_extension_is_not_kept() {
        let eku: Vec<u8> = [
            der(0x06, EXT_KEY_USAGE),
            der(0x04, &der(0x30, &der(0x06, CLIENT_AUTH))),
        ]
        .concat();
        let broken = [der(0x06, SUBJECT_ALT_NAME), der(0x01, &[0xFF])].concat();
        let extensions = der(
            0xA3,
            &der(0x30, &[der(0x30, &eku), der(0x30, &broken)].concat()),
        );
        let tbs = [der(0x02, &[7]), extensions].concat();
        let cert = der(
            0x30,
            &[der(0x30, &tbs), der(0x30, &[]), der(0x03, &[0])].concat(),
        );
        let read = ClientCertificate::from_der(&cert);
        assert!(read.names_unusable);
        assert!(
            !read.client_auth,
            "clientAuth kept from a certificate that cannot be read"
        );
    }

    #[test]
    fn a_nul_in_a_name_makes_every_name_unusable() {
        let cert = certificate(
            &[(0x82, b"good.example"), (0x86, b"spiffe://acme/a\0.evil")],
            &[CLIENT_AUTH],
        );
        let read = ClientCertificate::from_der(&cert);
        assert!(read.names_unusable);
        assert!(read.uris.is_empty() && read.dns_names.is_empty());
    }

    #[test]
    fn server_auth_alone_is_not_client_auth_and_junk_reads_as_nothing() {
        let server_auth: &[u8] = &[0x2B, 0x06, 0x01, 0x05, 0x05, 0x07, 0x03, 0x01];
        let read = ClientCertificate::from_der(&certificate(&[], &[server_auth]));
        assert!(!read.client_auth);
        let junk = ClientCertificate::from_der(&[0x30, 0x84, 0xFF, 0xFF, 0xFF, 0xFF]);
        assert!(junk.names_unusable && !junk.client_auth);
    }
}
