//! `tacho run-report`: a local, read-only web report over the application layer.
//!
//! One index of recent sessions and one page per session, rendered on the server from
//! compiled templates (askama, escaped by default), pictures as inline SVG. Nothing
//! leaves the machine and nothing on the page can: the server binds 127.0.0.1 only,
//! answers only requests whose `Host` names that address (a page on another site that
//! resolves its own name to 127.0.0.1 — DNS rebinding — is refused), serves no files
//! (so no path reaches the disk), accepts only GET and HEAD, and every page carries a
//! Content-Security-Policy that forbids scripts and every request.

mod pages;
mod svg;

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use tacho_app::{Config, Tacho};

/// The policy every answer carries: no script, no request of any kind; inline styles
/// only.
pub const CSP: &str = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error("127.0.0.1:{port}: {source}")]
    Bind {
        port: u16,
        #[source]
        source: std::io::Error,
    },
    #[error("serving: {0}")]
    Io(#[from] std::io::Error),
}

impl tacho_app::Kind for ServeError {
    fn kind(&self) -> tacho_app::ErrorKind {
        tacho_app::ErrorKind::Io
    }
}

struct App {
    cfg: Config,
    /// The `Host` values accepted: this server's address, by number and as localhost.
    hosts: Vec<String>,
}

/// Serves until interrupted (Ctrl-C). `ready` gets the address bound (port 0 picks a
/// free one) before the first request is read.
pub fn serve(cfg: Config, port: u16, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    rt.block_on(async move {
        let listener = tokio::net::TcpListener::bind(("127.0.0.1", port))
            .await
            .map_err(|source| ServeError::Bind { port, source })?;
        let addr = listener.local_addr()?;
        let app = Arc::new(App {
            cfg,
            hosts: vec![
                format!("127.0.0.1:{}", addr.port()),
                format!("localhost:{}", addr.port()),
            ],
        });
        ready(addr);
        axum::serve(listener, router(app))
            .with_graceful_shutdown(async {
                let _ = tokio::signal::ctrl_c().await;
            })
            .await?;
        Ok(())
    })
}

fn router(app: Arc<App>) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/s/{id}", get(session))
        .fallback(not_found)
        .layer(middleware::from_fn_with_state(app.clone(), guard))
        .with_state(app)
}

/// Refuses a foreign `Host` (DNS rebinding) and sets the security headers on every
/// answer.
async fn guard(State(app): State<Arc<App>>, req: Request, next: Next) -> Response {
    let host_ok = req
        .headers()
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .is_some_and(|h| app.hosts.iter().any(|a| a.eq_ignore_ascii_case(h)));
    let mut resp = if host_ok {
        next.run(req).await
    } else {
        (
            StatusCode::MISDIRECTED_REQUEST,
            "this server answers only requests for its own address (127.0.0.1)\n",
        )
            .into_response()
    };
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    resp
}

/// Runs a page builder on the blocking pool with a freshly opened store.
async fn page(
    app: Arc<App>,
    build: impl FnOnce(&Tacho) -> (StatusCode, String) + Send + 'static,
) -> Response {
    let cfg = app.cfg.clone();
    let built = tokio::task::spawn_blocking(move || match Tacho::open(cfg) {
        Ok(t) => build(&t),
        Err(e) => pages::error_page(StatusCode::INTERNAL_SERVER_ERROR, &e.to_string()),
    })
    .await;
    match built {
        Ok((status, body)) => (status, Html(body)).into_response(),
        Err(e) => (StatusCode::INTERNAL_SERVER_ERROR, e.to_string()).into_response(),
    }
}

async fn index(State(app): State<Arc<App>>) -> Response {
    page(app, pages::index).await
}

async fn session(State(app): State<Arc<App>>, Path(id): Path<String>) -> Response {
    page(app, move |t| pages::session(t, &id)).await
}

async fn not_found(State(app): State<Arc<App>>) -> Response {
    page(app, |_| {
        pages::error_page(
            StatusCode::NOT_FOUND,
            "no such page (sessions are at /s/<id>)",
        )
    })
    .await
}
