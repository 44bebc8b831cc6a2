//! `agentrun serve`: the web console (issue 24). Parsing and printing only; the
//! console itself is [`crate::serve`].

use super::{BadInput, Cli, Exit, open_store};
use crate::runner::lifecycle::shutdown_signal;
use anyhow::Context;
use clap::Args;
use std::net::SocketAddr;
use std::sync::Arc;

/// Serve the web console: the human queue (approve, deny, modify, reply, resume) and
/// the runs, followed live, for reviewers who never use the CLI.
///
/// Access needs a token: AGENTRUN_SERVE_TOKEN (paste it in the login form), or, when
/// it is not set, the one-time login link printed at start (a new one is printed each
/// time one is used). The browser then keeps an HttpOnly session cookie. The
/// console listens on loopback unless --addr says otherwise, and a non-loopback
/// address needs AGENTRUN_SERVE_TOKEN set (a printed token is for one person at
/// one machine).
///
/// Examples:
///   agentrun serve
///   AGENTRUN_SERVE_TOKEN=$(openssl rand -hex 16) agentrun serve --addr 0.0.0.0:8080
#[derive(Debug, Args)]
#[command(verbatim_doc_comment)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port).
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:8080")]
    pub addr: String,
    /// The address reviewers open when it is not --addr (a proxy or a name in front of
    /// the console), e.g. https://review.example.com; its host is answered too.
    #[arg(long, value_name = "URL")]
    pub public_url: Option<String>,
}

pub fn run(cli: &Cli, args: &ServeArgs) -> anyhow::Result<Exit> {
    let addr: SocketAddr = args
        .addr
        .parse()
        .map_err(|e| BadInput(format!("--addr `{}`: {e} (e.g. 127.0.0.1:8080)", args.addr)))?;
    let given = std::env::var("AGENTRUN_SERVE_TOKEN")
        .ok()
        .filter(|t| !t.is_empty());
    if !crate::serve::is_loopback(&addr) && given.is_none() {
        return Err(BadInput(format!(
            "--addr {addr} accepts connections from other machines; set AGENTRUN_SERVE_TOKEN to the access token reviewers will use"
        ))
        .into());
    }
    if given.as_ref().is_some_and(|t| t.len() < 16) {
        return Err(BadInput(
            "AGENTRUN_SERVE_TOKEN is too short: use at least 16 characters".into(),
        )
        .into());
    }
    // Checked before anything listens: a bad URL is bad input, not a late surprise.
    crate::serve::host::Hosts::new(addr, args.public_url.as_deref())
        .map_err(|e| BadInput(format!("--public-url {e}")))?;
    let store = Arc::new(open_store(&cli.db_path(), true)?);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .map_err(|e| BadInput(format!("--addr {addr}: cannot listen: {e}")))?;
        let bound = listener.local_addr()?;
        let opts = crate::serve::Options {
            db: cli.db_path(),
            token: given.clone().unwrap_or_else(crate::serve::random_token),
            render: super::render_text,
            hosts: crate::serve::host::Hosts::new(bound, args.public_url.as_deref())
                .map_err(|e| BadInput(format!("--public-url {e}")))?,
        };
        let (router, app) = crate::serve::router(&opts, store);
        crate::serve::spawn_notifier(&opts.db);
        if given.is_some() {
            crate::errln!(
                "agentrun: console at http://{bound}/ (log in with AGENTRUN_SERVE_TOKEN at http://{bound}/login)"
            );
        } else {
            let link = app.login_links(format!("http://{bound}"));
            crate::errln!(
                "agentrun: console at http://{bound}/ — open {link} to log in (the link works once; the next is printed when it is used)"
            );
        }
        crate::serve::serve(listener, router, shutdown_signal())
            .await
            .context("the console stopped")?;
        anyhow::Ok(())
    })?;
    if !cli.quiet {
        crate::errln!(
            "agentrun: console stopped; runs it was driving continue with `agentrun resume RUN_ID`"
        );
    }
    Ok(Exit::Completed)
}
