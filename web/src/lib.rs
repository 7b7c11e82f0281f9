//! `tacho run-report`: a local, read-only web report over the application layer.
//!
//! One index of recent sessions and one page per session, rendered on the server from
//! compiled templates (askama, escaped by default), pictures as inline SVG. Nothing
//! leaves the machine and nothing on the page can: the server binds 127.0.0.1 only,
//! answers only requests whose `Host` names that address (a page on another site that
//! resolves its own name to 127.0.0.1 — DNS rebinding — is refused), serves no files
//! (so no path reaches the disk), accepts only GET and HEAD, and every page carries a
//! Content-Security-Policy that forbids scripts and every request. Connections are
//! bounded ([`Limits`]): a request head must arrive whole within the header timeout, a
//! connection where nothing moves is closed after the idle timeout, and at most
//! `max_connections` are served at once (more wait to be accepted).

mod pages;
mod svg;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{Html, IntoResponse, Response};
use axum::routing::get;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tacho_app::{Config, Tacho};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

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

/// How long connections may take and how many there may be (SPEC §15).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// A request head must arrive whole within this, counted from the connection's
    /// start or, on a kept-alive connection, from the end of the previous answer (so
    /// it is also how long a kept-alive connection may wait idle for its next request).
    pub header_timeout: Duration,
    /// A connection on which no byte moves either way and no request is being
    /// answered for this long is closed (a client that stops reading its answer, or
    /// stops sending a body).
    pub idle_timeout: Duration,
    /// At most this many connections are served at once; more wait to be accepted.
    pub max_connections: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            header_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(30),
            max_connections: 256,
        }
    }
}

impl Limits {
    /// The defaults, changed by `TACHO_WEB_HEADER_TIMEOUT_MS`,
    /// `TACHO_WEB_IDLE_TIMEOUT_MS` and `TACHO_WEB_MAX_CONNECTIONS` when set (each a
    /// positive integer; the error names the variable otherwise).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Limits, String> {
        let number = |name: &str| -> Result<Option<u64>, String> {
            match env(name) {
                None => Ok(None),
                Some(v) => match v.trim().parse::<u64>() {
                    Ok(n) if n > 0 => Ok(Some(n)),
                    _ => Err(format!("{name}={v:?} is not a positive integer")),
                },
            }
        };
        let mut l = Limits::default();
        if let Some(ms) = number("TACHO_WEB_HEADER_TIMEOUT_MS")? {
            l.header_timeout = Duration::from_millis(ms);
        }
        if let Some(ms) = number("TACHO_WEB_IDLE_TIMEOUT_MS")? {
            l.idle_timeout = Duration::from_millis(ms);
        }
        if let Some(n) = number("TACHO_WEB_MAX_CONNECTIONS")? {
            l.max_connections = usize::try_from(n).unwrap_or(usize::MAX);
        }
        Ok(l)
    }
}

/// Longer timeouts are cut to this (a deadline must stay a valid instant).
const TIMEOUT_MAX: Duration = Duration::from_secs(24 * 3600);

/// Serves until interrupted (Ctrl-C), with the default [`Limits`]. `ready` gets the
/// address bound (port 0 picks a free one) before the first request is read.
pub fn serve(cfg: Config, port: u16, ready: impl FnOnce(SocketAddr)) -> Result<(), ServeError> {
    serve_with(cfg, port, Limits::default(), ready)
}

/// [`serve`] with the given limits.
pub fn serve_with(
    cfg: Config,
    port: u16,
    limits: Limits,
    ready: impl FnOnce(SocketAddr),
) -> Result<(), ServeError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let served = rt.block_on(async move {
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
        let router = router(app);
        let mut http = hyper::server::conn::http1::Builder::new();
        http.timer(TokioTimer::new())
            .header_read_timeout(limits.header_timeout.min(TIMEOUT_MAX))
            .keep_alive(true);
        let idle = limits.idle_timeout.min(TIMEOUT_MAX);
        let permits = Arc::new(Semaphore::new(
            limits.max_connections.clamp(1, Semaphore::MAX_PERMITS),
        ));
        let stop = async {
            // Without a Ctrl-C handler, serve until killed.
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        tokio::pin!(stop);
        loop {
            // The permit is taken before accepting: past the limit, connections wait
            // in the listen queue.
            let permit = tokio::select! {
                () = &mut stop => break,
                p = permits.clone().acquire_owned() => match p {
                    Ok(p) => p,
                    Err(_) => break,
                },
            };
            let stream = tokio::select! {
                () = &mut stop => break,
                a = listener.accept() => match a {
                    Ok((stream, _)) => stream,
                    Err(e) => {
                        accept_failed(&e).await;
                        continue;
                    }
                },
            };
            tokio::spawn(connection(
                stream,
                http.clone(),
                router.clone(),
                idle,
                permit,
            ));
        }
        Ok(())
    });
    // Connections still open are dropped, answers being made get a second.
    rt.shutdown_timeout(Duration::from_secs(1));
    served
}

/// After a failed accept: a connection that died in the queue is no matter; anything
/// else (out of file descriptors, say) is waited out for a second, as hyper and axum
/// do, instead of spinning.
async fn accept_failed(e: &std::io::Error) {
    use std::io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if !matches!(
        e.kind(),
        ConnectionAborted | ConnectionRefused | ConnectionReset
    ) {
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// One connection, served until it ends, its head is late (hyper's header timeout),
/// or it has been idle for `idle`; its permit is given back when it ends.
async fn connection(
    stream: TcpStream,
    http: hyper::server::conn::http1::Builder,
    router: Router,
    idle: Duration,
    permit: OwnedSemaphorePermit,
) {
    let _ = stream.set_nodelay(true);
    let activity = Arc::new(Activity::new());
    let io = TokioIo::new(Tracked {
        inner: stream,
        activity: activity.clone(),
    });
    let inner = TowerToHyperService::new(router);
    let act = activity.clone();
    let service = hyper::service::service_fn(move |req: Request<hyper::body::Incoming>| {
        let busy = Busy::new(act.clone());
        let answer = hyper::service::Service::call(&inner, req);
        async move {
            let r = answer.await;
            drop(busy);
            r
        }
    });
    let conn = http.serve_connection(io, service);
    tokio::pin!(conn);
    loop {
        tokio::select! {
            _ = conn.as_mut() => break,
            () = tokio::time::sleep_until(activity.quiet_until(idle)) => {
                if activity.busy.load(Ordering::SeqCst) > 0 {
                    // An answer being made is not idleness.
                    activity.touch();
                } else if Instant::now() >= activity.quiet_until(idle) {
                    break;
                }
            }
        }
    }
    drop(permit);
}

/// When a connection last moved a byte or finished an answer, and how many answers it
/// is making.
struct Activity {
    start: Instant,
    last_ms: AtomicU64,
    busy: AtomicUsize,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
            busy: AtomicUsize::new(0),
        }
    }

    fn touch(&self) {
        let ms = u64::try_from(self.start.elapsed().as_millis()).unwrap_or(u64::MAX);
        self.last_ms.store(ms, Ordering::SeqCst);
    }

    /// When the connection becomes idle for `idle` if nothing happens before.
    fn quiet_until(&self, idle: Duration) -> Instant {
        self.start + Duration::from_millis(self.last_ms.load(Ordering::SeqCst)) + idle
    }
}

/// An answer being made (counted in [`Activity::busy`] while it lives).
struct Busy(Arc<Activity>);

impl Busy {
    fn new(a: Arc<Activity>) -> Busy {
        a.busy.fetch_add(1, Ordering::SeqCst);
        Busy(a)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.busy.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A TCP stream that notes in its [`Activity`] each time a byte moves.
struct Tracked {
    inner: TcpStream,
    activity: Arc<Activity>,
}

impl AsyncRead for Tracked {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let r = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(r, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        r
    }
}

impl AsyncWrite for Tracked {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let r = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(r, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        r
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
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
