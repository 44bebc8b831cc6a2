//! Connection strings: what messages may show of them (never the password).

/// The URL with any password replaced, so messages never show it.
pub fn redact_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_string();
    };
    let (auth, tail) = match rest.find('/') {
        Some(i) => rest.split_at(i),
        None => (rest, ""),
    };
    let tail = match tail.find("password=") {
        Some(i) => {
            let end = tail[i..].find('&').map_or(tail.len(), |j| i + j);
            format!("{}password=[redacted]{}", &tail[..i], &tail[end..])
        }
        None => tail.to_string(),
    };
    match auth.rsplit_once('@') {
        Some((userinfo, host)) => {
            let user = userinfo.split(':').next().unwrap_or("");
            let pass = if userinfo.contains(':') {
                ":[redacted]"
            } else {
                ""
            };
            format!("{scheme}://{user}{pass}@{host}{tail}")
        }
        None => format!("{scheme}://{auth}{tail}"),
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
}
