//! Connection strings: what messages may show of them (never the password).

/// Where a URL's credentials end: at the first `@` after `://`, wherever it is — the
/// rule tokio-postgres parses by, so a password holding `/`, `?`, `#` or `:` is taken
/// whole (issue 22: a password with a `/` was cut at it, and its second half printed).
/// `(scheme, userinfo, rest)`; `None` without `://` or without credentials.
pub fn split_credentials(url: &str) -> Option<(&str, &str, &str)> {
    let (scheme, rest) = url.split_once("://")?;
    let (userinfo, tail) = rest.split_once('@')?;
    Some((scheme, userinfo, tail))
}

/// The URL with any password replaced, so messages never show it.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (userinfo, tail) = match split_credentials(url) {
        Some((_, userinfo, tail)) => (Some(userinfo), tail),
        None => (None, rest),
    };
    let tail = match tail.find("password=") {
        Some(i) => {
            let end = tail[i..].find('&').map_or(tail.len(), |j| i + j);
            format!("{}password=[redacted]{}", &tail[..i], &tail[end..])
        }
        None => tail.to_string(),
    };
    match userinfo {
        Some(userinfo) => {
            let user = userinfo.split(':').next().unwrap_or("");
            let pass = if userinfo.contains(':') {
                ":[redacted]"
            } else {
                ""
            };
            format!("{scheme}://{user}{pass}@{tail}")
        }
        None => format!("{scheme}://{tail}"),
    }
}

#[cfg(test)]
mod tests {
    use super::redact_url;

    #[test]
    fn urls_lose_their_password_in_messages() {
        assert_eq!(
            redact_url("postgres://bob:s3cret@db.example:5432/runs"),
            "postgres://bob:[redacted]@db.example:5432/runs"
        );
        assert_eq!(
            redact_url("postgresql://bob@localhost/runs"),
            "postgresql://bob@localhost/runs"
        );
        assert_eq!(
            redact_url("postgres://localhost/runs"),
            "postgres://localhost/runs"
        );
        assert_eq!(
            redact_url("postgres://localhost/runs?user=a&password=x&port=1"),
            "postgres://localhost/runs?user=a&password=[redacted]&port=1"
        );
    }

    /// Issue 22: the password was cut at its `/` and the rest shown.
    #[test]
    fn a_password_with_url_special_characters_is_redacted_whole() {
        for pw in [
            "pa/ss-9f2e",
            "pa?ss-9f2e",
            "pa#ss-9f2e",
            "pa:ss/9f?2e#x&y=z",
        ] {
            let url = format!("postgres://bob:{pw}@db.example:5432/runs?sslmode=require");
            let shown = redact_url(&url);
            assert_eq!(
                shown, "postgres://bob:[redacted]@db.example:5432/runs?sslmode=require",
                "{pw}"
            );
            assert!(!shown.contains("9f"), "{shown}");
        }
    }
}
