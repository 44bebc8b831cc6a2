//! The secret values a run's config knows (docs/ARCHITECTURE.md §5), for text a person gives the
//! run: a message (`runs send`) or an escalation's answer. The same values its
//! attempts and providers redact — the providers' keys and URL credentials, each
//! tool's `${VAR}` headers, secret-named variables and arguments — so what a person
//! pastes is stored and shown to the model as `[redacted]`, like everything else.

use crate::redact::Secrets;
use crate::setup::{self, Snapshot};
use crate::tools::{command, http, mcp};

/// Every secret `snapshot`'s config would redact. Parts that no longer build (a key
/// gone from the environment, a damaged tools.toml) carry no secret to leak and are
/// skipped: refusing the person's text for them would help nobody.
pub fn known(snapshot: &Snapshot) -> Secrets {
    let mut secrets = Secrets::default();
    for spec in &snapshot.models {
        if let Ok(provider) = setup::build_provider(spec, &snapshot.scripts, &snapshot.settings)
            && let Some(s) = provider.secrets()
        {
            secrets.extend(s);
        }
    }
    let path = std::path::Path::new(&snapshot.tools_path);
    let Ok(tools) = crate::config::parse(&snapshot.tools_toml, path) else {
        return secrets;
    };
    let env = |name: &str| std::env::var(name).ok();
    for def in tools.tools.values() {
        match &def.kind {
            crate::config::types::ToolKind::Command(spec) => {
                secrets.extend(&command::child_env(std::env::vars_os(), spec).secrets);
                for (_, value) in crate::redact::secret_args(&spec.argv) {
                    secrets.add(value);
                }
            }
            crate::config::types::ToolKind::Http(spec) => {
                secrets.extend(&http::secrets_of(spec, env));
            }
            _ => {}
        }
    }
    for def in tools.mcp.values() {
        secrets.extend(&mcp::secrets_of(def));
    }
    secrets
}
