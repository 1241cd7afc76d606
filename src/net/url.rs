//! What of a URL may be shown or kept: its scheme, host and path, never the query, fragment or
//! user information that a callback's or a signed download link's grant travels in.

/// `url` without its query, fragment or credentials, and whether it had any of them; `None`
/// when it is no URL.
pub fn without_secrets(url: &str) -> Option<(String, bool)> {
    let mut parsed = reqwest::Url::parse(url).ok()?;
    let had_any = parsed.query().is_some()
        || parsed.fragment().is_some()
        || !parsed.username().is_empty()
        || parsed.password().is_some();
    parsed.set_query(None);
    parsed.set_fragment(None);
    let _ = parsed.set_username("");
    let _ = parsed.set_password(None);
    Some((parsed.to_string(), had_any))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_grant_goes_and_is_said_to_have_gone() {
        assert_eq!(
            without_secrets("https://u:p@files.example/b.pdf?sig=x#y"),
            Some(("https://files.example/b.pdf".to_owned(), true))
        );
        assert_eq!(
            without_secrets("https://files.example/a.pdf"),
            Some(("https://files.example/a.pdf".to_owned(), false))
        );
        assert_eq!(without_secrets("not a url"), None);
    }
}
