//! Where and how to connect, the way PostgreSQL users already say it (issue 25): a
//! `postgres://` URL whose missing parts come from `PGHOST`, `PGPORT`, `PGUSER`,
//! `PGDATABASE`, the password from the URL, `PGPASSWORD` or `~/.pgpass` (`PGPASSFILE`;
//! ignored unless 0600 or stricter, as libpq does), and libpq's `sslmode` and
//! `sslrootcert` from the URL or `PGSSLMODE`/`PGSSLROOTCERT` (default `prefer`).
//!
//! tokio-postgres knows only `disable`/`prefer`/`require` and no `sslrootcert`, so both
//! are taken out of the URL here and carried out by `tls`.

use std::path::{Path, PathBuf};
use std::time::Duration;
use tokio_postgres::config::{Host, SslMode};

/// libpq's `sslmode` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    Disable,
    Prefer,
    Require,
    VerifyCa,
    VerifyFull,
}

impl TlsMode {
    fn parse(s: &str) -> Option<TlsMode> {
        Some(match s {
            "disable" => TlsMode::Disable,
            "prefer" => TlsMode::Prefer,
            "require" => TlsMode::Require,
            "verify-ca" => TlsMode::VerifyCa,
            "verify-full" => TlsMode::VerifyFull,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        match self {
            TlsMode::Disable => "disable",
            TlsMode::Prefer => "prefer",
            TlsMode::Require => "require",
            TlsMode::VerifyCa => "verify-ca",
            TlsMode::VerifyFull => "verify-full",
        }
    }
}

/// Which certificate authorities a verifying mode trusts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Roots {
    /// `sslrootcert=system`: the operating system's trusted roots.
    System,
    /// A PEM file of CA certificates (`sslrootcert=FILE`, or `~/.postgresql/root.crt`).
    File(PathBuf),
}

/// Everything needed to connect, resolved; never shown whole (it holds the password).
#[derive(Clone)]
pub struct ConnInfo {
    pub config: tokio_postgres::Config,
    pub tls: TlsMode,
    /// `None`: no CA given and the default file is absent (only `prefer`/`require`
    /// can then connect, without verifying the certificate, as libpq does).
    pub roots: Option<Roots>,
    /// `host:port`, for messages.
    pub endpoint: String,
    /// `postgres://user@host:port/db`: what messages call the database.
    pub display: String,
}

/// How long a connection attempt may take unless the URL or `PGCONNECT_TIMEOUT` says.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long one statement may run unless `options=-c statement_timeout=…` says: far
/// above any statement agentrun makes, low enough that a stuck lock ends in an error.
pub const STATEMENT_TIMEOUT_MS: u64 = 120_000;

/// The environment, injected so tests need not change the process's.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// Reads `url` with the environment's defaults. Errors are one line for the user.
pub fn resolve(url: &str, env: Env<'_>) -> Result<ConnInfo, String> {
    refuse_split_credentials(url)?;
    let (base, params) = split_query(url);
    let mut kept = Vec::new();
    let (mut sslmode, mut sslrootcert) = (None, None);
    for (k, v) in params {
        match k.as_str() {
            "sslmode" => sslmode = Some(v),
            "sslrootcert" => sslrootcert = Some(v),
            _ => kept.push(format!("{}={}", k, encode(&v))),
        }
    }
    let rebuilt = if kept.is_empty() {
        base.to_string()
    } else {
        format!("{base}?{}", kept.join("&"))
    };
    let mut config: tokio_postgres::Config = rebuilt
        .parse()
        .map_err(|e| format!("cannot read the connection string: {e}"))?;
    apply_env(&mut config, env);
    let sslmode = sslmode.or_else(|| env("PGSSLMODE"));
    let sslrootcert = sslrootcert.or_else(|| env("PGSSLROOTCERT"));
    let tls = match sslmode.as_deref() {
        None if sslrootcert.as_deref() == Some("system") => TlsMode::VerifyFull,
        None => TlsMode::Prefer,
        Some(m) => TlsMode::parse(m).ok_or_else(|| {
            format!("sslmode `{m}` is not one of disable, prefer, require, verify-ca, verify-full")
        })?,
    };
    let roots = match sslrootcert.as_deref() {
        Some("system") => Some(Roots::System),
        Some(file) => Some(Roots::File(PathBuf::from(file))),
        None => home(env)
            .map(|h| h.join(".postgresql/root.crt"))
            .filter(|p| p.is_file())
            .map(Roots::File),
    };
    // libpq ignores sslmode on a Unix socket (nothing crosses a network to encrypt, and
    // the server offers no TLS there); tokio-postgres would still ask for it and fail.
    let hosts = config.get_hosts();
    let tls = if !hosts.is_empty() && hosts.iter().all(|h| matches!(h, Host::Unix(_))) {
        TlsMode::Disable
    } else {
        tls
    };
    config.ssl_mode(match tls {
        TlsMode::Disable => SslMode::Disable,
        TlsMode::Prefer => SslMode::Prefer,
        _ => SslMode::Require,
    });
    if config.get_password().is_none()
        && let Some(p) = pgpass_password(&config, env)
    {
        config.password(p);
    }
    let endpoint = endpoint(&config);
    let display = format!(
        "postgres://{}@{endpoint}/{}",
        config.get_user().unwrap_or(""),
        config.get_dbname().unwrap_or("")
    );
    Ok(ConnInfo {
        config,
        tls,
        roots,
        endpoint,
        display,
    })
}

/// Fills what the URL left out from the libpq environment, and agentrun's timeouts.
fn apply_env(config: &mut tokio_postgres::Config, env: Env<'_>) {
    if config.get_hosts().is_empty() {
        config.host(env("PGHOST").as_deref().unwrap_or("localhost"));
    }
    if config.get_ports().is_empty() {
        let port = env("PGPORT").and_then(|p| p.parse().ok()).unwrap_or(5432);
        config.port(port);
    }
    if config.get_user().is_none()
        && let Some(u) = env("PGUSER").or_else(|| env("USER"))
    {
        config.user(&u);
    }
    if config.get_dbname().is_none()
        && let Some(d) = env("PGDATABASE")
    {
        config.dbname(&d);
    }
    if config.get_password().is_none()
        && let Some(p) = env("PGPASSWORD")
    {
        config.password(p);
    }
    if config.get_connect_timeout().is_none() {
        let secs = env("PGCONNECT_TIMEOUT").and_then(|s| s.parse::<u64>().ok());
        config.connect_timeout(secs.map_or(CONNECT_TIMEOUT, Duration::from_secs));
    }
    // What `pg_stat_activity` shows, so operators can count agentrun's connections.
    if config.get_application_name().is_none() {
        config.application_name("agentrun");
    }
    let options = config.get_options().unwrap_or("").to_string();
    if !options.contains("statement_timeout") {
        let extra = format!("-c statement_timeout={STATEMENT_TIMEOUT_MS}");
        let joined = if options.is_empty() {
            extra
        } else {
            format!("{options} {extra}")
        };
        config.options(&joined);
    }
}

/// The limit on one whole connection attempt: the URL's `connect_timeout`, else
/// `PGCONNECT_TIMEOUT`, else [`CONNECT_TIMEOUT`] (`resolve` always sets one).
pub fn connect_timeout(config: &tokio_postgres::Config) -> Duration {
    config
        .get_connect_timeout()
        .copied()
        .unwrap_or(CONNECT_TIMEOUT)
}

fn home(env: Env<'_>) -> Option<PathBuf> {
    env("HOME").filter(|h| !h.is_empty()).map(PathBuf::from)
}

/// The first host and port, as `host:port` (a socket folder for a Unix socket).
fn endpoint(config: &tokio_postgres::Config) -> String {
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        Some(Host::Unix(p)) => p.display().to_string(),
        None => "localhost".into(),
    };
    let port = config.get_ports().first().copied().unwrap_or(5432);
    format!("{host}:{port}")
}

/// The password `~/.pgpass` (or `PGPASSFILE`) gives for this host, port, database and
/// user: the first matching line, `*` matching anything, as libpq reads it. A file
/// that group or others can read is ignored, as libpq does.
fn pgpass_password(config: &tokio_postgres::Config, env: Env<'_>) -> Option<String> {
    let path = env("PGPASSFILE")
        .map(PathBuf::from)
        .or_else(|| home(env).map(|h| h.join(".pgpass")))?;
    if !private(&path) {
        return None;
    }
    let text = std::fs::read_to_string(&path).ok()?;
    let host = match config.get_hosts().first() {
        Some(Host::Tcp(h)) => h.clone(),
        _ => "localhost".into(),
    };
    let port = config
        .get_ports()
        .first()
        .copied()
        .unwrap_or(5432)
        .to_string();
    let want = [
        host.as_str(),
        port.as_str(),
        config.get_dbname().unwrap_or(""),
        config.get_user().unwrap_or(""),
    ];
    text.lines()
        .filter(|l| !l.trim_start().starts_with('#'))
        .find_map(|line| {
            let fields = pgpass_fields(line);
            if fields.len() != 5 {
                return None;
            }
            let hit = want.iter().zip(&fields).all(|(w, f)| f == "*" || f == w);
            hit.then(|| fields[4].clone())
        })
}

/// Whether only the owner may read `path` (the 0600 rule of `.pgpass`).
pub fn private(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o077 == 0)
}

/// A `.pgpass` line's five fields; `\:` and `\\` are a literal colon and backslash.
fn pgpass_fields(line: &str) -> Vec<String> {
    let mut fields = vec![String::new()];
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                if let Some(n) = chars.next() {
                    fields.last_mut().expect("never empty").push(n);
                }
            }
            ':' => fields.push(String::new()),
            c => fields.last_mut().expect("never empty").push(c),
        }
    }
    fields
}

/// The URL before `?` and its decoded query parameters.
/// A second `@` between the credentials and the path means an `@` in the user name or
/// password was not percent-encoded: the URL would be read with part of the password
/// as the host, which messages then show. Refused, showing nothing of the URL.
fn refuse_split_credentials(url: &str) -> Result<(), String> {
    let Some((_, _, rest)) = super::url::split_credentials(url) else {
        return Ok(());
    };
    let host = rest.split(['/', '?']).next().unwrap_or("");
    if host.contains('@') {
        return Err(
            "the database URL has more than one `@` before its path: write an `@` in \
                    the user name or password as %40 (or give the password in PGPASSWORD)"
                .into(),
        );
    }
    Ok(())
}

/// The URL without its query, and the query's parameters. The query starts at the
/// first `?` after the credentials (a password may hold a `?`).
fn split_query(url: &str) -> (&str, Vec<(String, String)>) {
    let from = super::url::split_credentials(url).map_or(0, |(_, _, rest)| url.len() - rest.len());
    let Some(at) = url[from..].find('?').map(|i| from + i) else {
        return (url, Vec::new());
    };
    let (base, query) = (&url[..at], &url[at + 1..]);
    let params = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| {
            let (k, v) = p.split_once('=').unwrap_or((p, ""));
            (decode(k), decode(v))
        })
        .collect();
    (base, params)
}

fn decode(s: &str) -> String {
    percent_encoding::percent_decode_str(s)
        .decode_utf8_lossy()
        .into_owned()
}

fn encode(s: &str) -> String {
    percent_encoding::utf8_percent_encode(s, percent_encoding::NON_ALPHANUMERIC).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
        let map: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn the_environment_fills_what_the_url_leaves_out() {
        let env = env_of(&[
            ("PGHOST", "db.example"),
            ("PGPORT", "6543"),
            ("PGUSER", "runner"),
            ("PGDATABASE", "runs"),
            ("PGPASSWORD", "s3cret"),
        ]);
        let info = resolve("postgres://", &env).unwrap();
        assert_eq!(info.display, "postgres://runner@db.example:6543/runs");
        assert_eq!(info.config.get_password(), Some(&b"s3cret"[..]));
        assert_eq!(info.tls, TlsMode::Prefer);
    }

    #[test]
    fn sslmode_and_sslrootcert_come_from_the_url_or_the_environment() {
        let env = env_of(&[("PGSSLMODE", "require")]);
        let info = resolve(
            "postgres://u@h/d?sslmode=verify-full&sslrootcert=/ca.pem",
            &env,
        )
        .unwrap();
        assert_eq!(info.tls, TlsMode::VerifyFull);
        assert_eq!(info.roots, Some(Roots::File("/ca.pem".into())));
        assert_eq!(
            resolve("postgres://u@h/d", &env).unwrap().tls,
            TlsMode::Require
        );
        let system = resolve("postgres://u@h/d?sslrootcert=system", &env_of(&[])).unwrap();
        assert_eq!(system.tls, TlsMode::VerifyFull);
        assert_eq!(system.roots, Some(Roots::System));
        let bad = resolve("postgres://u@h/d?sslmode=allow-ish", &env)
            .err()
            .unwrap();
        assert!(bad.contains("verify-full"), "{bad}");
    }

    #[test]
    fn a_unix_socket_host_ignores_sslmode_as_libpq_does() {
        let env = env_of(&[("PGSSLMODE", "require")]);
        for url in [
            "postgres://u@%2Fvar%2Frun%2Fpostgresql/d",
            "postgres://u@/d?host=/var/run/postgresql&sslmode=verify-full",
        ] {
            let info = resolve(url, &env).unwrap();
            assert_eq!(info.tls, TlsMode::Disable, "{url}");
            assert_eq!(info.config.get_ssl_mode(), SslMode::Disable, "{url}");
        }
        let tcp = resolve("postgres://u@db.example/d", &env).unwrap();
        assert_eq!(tcp.tls, TlsMode::Require);
    }

    #[test]
    fn a_password_in_the_url_is_never_displayed() {
        let info = resolve("postgres://bob:pw@h:1/d", &env_of(&[])).unwrap();
        assert_eq!(info.config.get_password(), Some(&b"pw"[..]));
        assert_eq!(info.display, "postgres://bob@h:1/d");
    }

    /// Issue 22: a password holding `/`, `?`, `#`, `:` or `&` is read whole (the query
    /// is found after it); an unencoded `@` in it is refused without showing the URL.
    #[test]
    fn a_password_with_url_special_characters_is_read_whole_or_refused_unshown() {
        let pw = "sl/qu?ha#co:am&x";
        let info = resolve(
            &format!("postgres://bob:{pw}@h:1/d?sslmode=disable"),
            &env_of(&[]),
        )
        .unwrap();
        assert_eq!(info.config.get_password(), Some(pw.as_bytes()));
        assert_eq!(info.display, "postgres://bob@h:1/d");
        assert_eq!(info.tls, TlsMode::Disable);
        let err = resolve("postgres://bob:p@ss-9f2e@h:1/d", &env_of(&[]))
            .err()
            .unwrap();
        assert!(err.contains("%40"), "{err}");
        assert!(!err.contains("9f2e") && !err.contains("p@"), "{err}");
    }

    #[test]
    fn pgpass_is_read_only_when_private() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("pgpass");
        std::fs::write(
            &file,
            "# comment\nother:*:*:*:no\nh:5432:*:bob:from\\:file\n",
        )
        .unwrap();
        let env = env_of(&[("PGPASSFILE", file.to_str().unwrap())]);
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o644)).unwrap();
        let info = resolve("postgres://bob@h/d", &env).unwrap();
        assert_eq!(info.config.get_password(), None, "0644 is ignored");
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).unwrap();
        let info = resolve("postgres://bob@h/d", &env).unwrap();
        assert_eq!(info.config.get_password(), Some(&b"from:file"[..]));
    }
}
