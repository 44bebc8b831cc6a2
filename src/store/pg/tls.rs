//! TLS to PostgreSQL with rustls (issue 25), as libpq's `sslmode` means it:
//! `prefer` and `require` encrypt without checking the certificate (unless a CA is
//! given, when `require` checks it as `verify-ca` does, like libpq), `verify-ca`
//! checks that a trusted CA signed it, `verify-full` also that it names the host.
//!
//! Connection failures become one line naming `host:port`, what failed and what to
//! set ([`explain`]).

use super::conninfo::{ConnInfo, Roots, TlsMode};
use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, WebPkiSupportedAlgorithms};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{CertificateError, DigitallySignedStruct, RootCertStore, SignatureScheme};
use std::sync::Arc;
use tokio_postgres_rustls::MakeRustlsConnect;

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::aws_lc_rs::default_provider())
}

/// The TLS connector for `info`'s mode and roots.
pub fn connector(info: &ConnInfo) -> Result<MakeRustlsConnect, String> {
    let provider = provider();
    let verify = match (info.tls, &info.roots) {
        (TlsMode::VerifyCa | TlsMode::VerifyFull, None) => {
            return Err(format!(
                "sslmode={} needs the certificate authority to trust: set sslrootcert to its \
                 PEM file (in the URL or PGSSLROOTCERT), or sslrootcert=system for the OS roots",
                info.tls.as_str()
            ));
        }
        (TlsMode::VerifyFull, Some(roots)) => Check::Full(roots),
        (TlsMode::VerifyCa | TlsMode::Require, Some(roots)) => Check::Ca(roots),
        _ => Check::None,
    };
    let verifier: Arc<dyn ServerCertVerifier> = match verify {
        Check::None => Arc::new(EncryptOnly(provider.signature_verification_algorithms)),
        Check::Full(roots) => web_pki(roots, &provider)?,
        Check::Ca(roots) => Arc::new(AnyName(web_pki(roots, &provider)?)),
    };
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| format!("TLS setup failed: {e}"))?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(MakeRustlsConnect::new(config))
}

enum Check<'a> {
    None,
    Ca(&'a Roots),
    Full(&'a Roots),
}

fn web_pki(
    roots: &Roots,
    provider: &Arc<CryptoProvider>,
) -> Result<Arc<WebPkiServerVerifier>, String> {
    let mut store = RootCertStore::empty();
    match roots {
        Roots::System => {
            let found = rustls_native_certs::load_native_certs();
            store.add_parsable_certificates(found.certs);
        }
        Roots::File(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .and_then(|it| it.collect::<Result<Vec<_>, _>>())
                .map_err(|e| format!("sslrootcert {}: cannot read it: {e}", path.display()))?;
            store.add_parsable_certificates(certs);
        }
    }
    if store.is_empty() {
        return Err(format!(
            "sslrootcert {}: no CA certificate found in it",
            roots_name(roots)
        ));
    }
    WebPkiServerVerifier::builder_with_provider(Arc::new(store), provider.clone())
        .build()
        .map_err(|e| format!("TLS setup failed: {e}"))
}

fn roots_name(roots: &Roots) -> String {
    match roots {
        Roots::System => "system".into(),
        Roots::File(p) => p.display().to_string(),
    }
}

/// `prefer`/`require` without a CA: the channel is encrypted and the handshake's
/// signatures checked, but any certificate is accepted (libpq's meaning of the modes).
#[derive(Debug)]
struct EncryptOnly(WebPkiSupportedAlgorithms);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_schemes()
    }
}

/// `verify-ca`: the full check, except that the certificate need not name the host.
#[derive(Debug)]
struct AnyName(Arc<WebPkiServerVerifier>);

impl ServerCertVerifier for AnyName {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        match self
            .0
            .verify_server_cert(end_entity, intermediates, server_name, ocsp, now)
        {
            Err(rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            )) => Ok(ServerCertVerified::assertion()),
            other => other,
        }
    }
    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls12_signature(message, cert, dss)
    }
    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.0.verify_tls13_signature(message, cert, dss)
    }
    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.supported_verify_schemes()
    }
}

/// One line saying why connecting to `info` failed and what to change.
pub fn explain(e: &tokio_postgres::Error, info: &ConnInfo) -> String {
    let at = &info.endpoint;
    let user = info.config.get_user().unwrap_or("");
    let db = info.config.get_dbname().unwrap_or(user);
    if let Some(dbe) = e.as_db_error() {
        let msg = dbe.message();
        return match dbe.code().code() {
            "28000" if msg.contains("no encryption") => format!(
                "{at} accepts only TLS connections (its pg_hba.conf has hostssl) and sslmode=disable \
                 was set: use sslmode=require or stronger (in the URL or PGSSLMODE)"
            ),
            "28P01" | "28000" => format!(
                "authentication failed for user `{user}` at {at} ({msg}): check the password \
                 (PGPASSWORD, ~/.pgpass, or the role's pg_hba.conf entry)"
            ),
            "3D000" => format!(
                "database `{db}` does not exist at {at}: create it (docs/postgresql.md) or fix the \
                 name in the URL or PGDATABASE"
            ),
            code => format!("{at}: {code}: {msg}"),
        };
    }
    if let Some(tls) = find::<rustls::Error>(e) {
        return match tls {
            rustls::Error::InvalidCertificate(
                CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
            ) => format!(
                "TLS to {at} failed: the server's certificate is not issued for host `{}` \
                 (host name mismatch): connect by the name on the certificate, or use \
                 sslmode=verify-ca to check only the CA",
                at.rsplit_once(':').map_or(at.as_str(), |(h, _)| h)
            ),
            rustls::Error::InvalidCertificate(c) => format!(
                "TLS to {at} failed: the server's certificate is not trusted ({c:?}) by sslrootcert \
                 {}: set sslrootcert to the CA that signed it (or sslrootcert=system for the OS roots)",
                info.roots.as_ref().map_or("(none)".into(), roots_name)
            ),
            other => format!("TLS to {at} failed: {other}"),
        };
    }
    let text = chain(e);
    if text.contains("server does not support TLS") {
        return format!(
            "{at} does not offer TLS and sslmode={} demands it: turn ssl on in the server's \
             postgresql.conf, or set sslmode=prefer (or disable) to connect without",
            info.tls.as_str()
        );
    }
    if text.contains("password missing") {
        return format!(
            "{at} asks for a password for user `{user}`: set PGPASSWORD or add a line to \
             ~/.pgpass (mode 0600)"
        );
    }
    if let Some(io) = find::<std::io::Error>(e) {
        use std::io::ErrorKind as K;
        return match io.kind() {
            K::ConnectionRefused => format!(
                "connection refused at {at}: is PostgreSQL running there and listening on that \
                 address? (check the host and port in the URL, or PGHOST/PGPORT)"
            ),
            K::TimedOut => timed_out(info),
            _ => format!("cannot connect to {at}: {io}"),
        };
    }
    if text.contains("timeout") || text.contains("timed out") {
        return timed_out(info);
    }
    format!("cannot connect to {at}: {text}")
}

pub fn timed_out(info: &ConnInfo) -> String {
    let secs = info.config.get_connect_timeout().map_or(0, |d| d.as_secs());
    format!(
        "no answer from {} within {secs} s (connect timeout): check the host, port and any \
         firewall; connect_timeout in the URL or PGCONNECT_TIMEOUT sets the wait",
        info.endpoint
    )
}

/// `e` and its sources, as one line (tokio-postgres puts the cause in the source:
/// "invalid configuration: password missing").
fn chain(e: &tokio_postgres::Error) -> String {
    let mut text = e.to_string();
    let mut cur = std::error::Error::source(e);
    while let Some(err) = cur {
        text.push_str(": ");
        text.push_str(&err.to_string());
        cur = err.source();
    }
    text
}

/// The first error of type `T` in `e`'s source chain.
fn find<T: std::error::Error + 'static>(e: &tokio_postgres::Error) -> Option<&T> {
    let mut cur: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(err) = cur {
        if let Some(t) = err.downcast_ref::<T>() {
            return Some(t);
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
            && let Some(t) = inner.downcast_ref::<T>()
        {
            return Some(t);
        }
        cur = err.source();
    }
    None
}
