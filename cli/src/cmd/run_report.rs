//! `tacho run-report`: the local web report (`tacho-web`), served on 127.0.0.1 until
//! interrupted.

use std::io::Write;

use clap::Args;

use crate::error::CliError;

#[derive(Debug, Args)]
pub struct RunReportArgs {
    /// Open on this session's page (its id, or any unique prefix of it; default: the
    /// latest session).
    pub session: Option<String>,
    /// Open on the index of sessions instead.
    #[arg(long, conflicts_with = "session")]
    pub index: bool,
    /// The port on 127.0.0.1 (default: a free one).
    #[arg(long, default_value_t = 0)]
    pub port: u16,
    /// Open the page in the browser (`xdg-open`, or `open` on macOS).
    #[arg(long)]
    pub open: bool,
}

pub fn run(a: RunReportArgs) -> Result<(), CliError> {
    let cfg = tacho_app::Config::from_env()?;
    // The session is resolved before serving: a typo is an error here, not a 404 page.
    let path = if a.index {
        "/".to_string()
    } else {
        let tacho = tacho_app::Tacho::open(cfg.clone())?;
        let session = match &a.session {
            Some(s) => Some(tacho.resolve_session(s)?.into_string()),
            None => tacho
                .list_sessions(&tacho_app::ListFilter::default(), Some(1))?
                .into_iter()
                .next()
                .map(|r| r.summary.session),
        };
        // No session recorded yet: the index says so.
        session.map_or_else(|| "/".to_string(), |s| format!("/s/{s}"))
    };
    let limits =
        tacho_web::Limits::from_env(&|k| std::env::var(k).ok()).map_err(CliError::input)?;
    tacho_web::serve_with(cfg, a.port, limits, |addr| {
        let url = format!("http://{addr}{path}");
        let mut out = std::io::stdout().lock();
        let _ = writeln!(
            out,
            "serving {url} (127.0.0.1 only, read-only; Ctrl-C stops)"
        );
        let _ = out.flush();
        if a.open {
            let opener = if cfg!(target_os = "macos") {
                "open"
            } else {
                "xdg-open"
            };
            if let Err(e) = std::process::Command::new(opener)
                .arg(&url)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
            {
                eprintln!("note: could not run {opener} ({e}); open {url} yourself");
            }
        }
    })?;
    Ok(())
}
