//! haptor's HTTP servers: the metrics server (`/metrics`), the debug and health server
//! (`/debug/actors`, `/debug/events`, `/debug/vars`, `/healthz`, `/readyz`) and, in
//! `haptor run`, a probe server with only `/healthz` and `/readyz`. Each is an
//! [`HttpServer`] actor, supervised like any other (role `Server`): it binds its address in
//! `pre_start` (a bind failure is a start failure naming the address), serves an axum
//! [`Router`] on a background task, and shuts the server down gracefully in `post_stop`. If
//! the server task ends on its own the actor fails, so its supervisor restarts it.
//!
//! The routers are built by plain functions ([`metrics_router`], [`debug_router`]) over
//! shared handles — the [`Metrics`], the [`Introspection`] record, the Commentator's
//! [`EventLog`] and the [`Readiness`] state — so the handlers stay thin and never call into an
//! actor that could be busy or restarting. The bound address (useful when configured with
//! port 0) is answered by [`HttpServerMsg::LocalAddr`].

use std::collections::{BTreeMap, HashMap};
use std::net::SocketAddr;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use ractor::{Actor, ActorProcessingErr, ActorRef, RpcReplyPort};
use serde_json::json;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;

use crate::observability::event_log::EventLog;
use crate::observability::introspection::Introspection;
use crate::observability::metrics::{METRICS_CONTENT_TYPE, Metrics};
use crate::pure::readiness::{ReadinessState, ReadinessVerdict};
use crate::supervision::{ActorRole, ChildSpec, actor_tree};

/// Where the metrics server listens unless configured otherwise.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9090";
/// Where the debug and health server listens unless configured otherwise.
pub const DEFAULT_DEBUG_ADDR: &str = "0.0.0.0:8080";
/// How long an actor may handle one message before `/healthz` reports it stalled.
pub const DEFAULT_STALL_THRESHOLD: Duration = Duration::from_secs(60);
/// The names `/debug/vars/{name}` answers.
pub const DEBUG_VARS: [&str; 6] = [
    "config",
    "rendered",
    "resources",
    "state",
    "errors",
    "status",
];
/// The supervisor child name of the metrics server.
pub const METRICS_SERVER_NAME: &str = "metrics-server";
/// The supervisor child name of the debug server.
pub const DEBUG_SERVER_NAME: &str = "debug-server";
/// The supervisor child name of the probe server (`haptor run`: `/healthz` and `/readyz`
/// on their own port, so the debug endpoints can stay on localhost).
pub const HEALTH_SERVER_NAME: &str = "health-server";

/// How long `post_stop` waits for open connections to finish before dropping them.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// Problems starting or running an HTTP server.
#[derive(Debug, thiserror::Error)]
pub enum HttpServerError {
    #[error(
        "cannot start the {server} server: binding {addr} failed: {source} (is another process using the port, or is the address mistyped?)"
    )]
    Bind {
        server: String,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the {server} server bound {addr} but cannot read its local address: {source}")]
    LocalAddr {
        server: String,
        addr: String,
        #[source]
        source: std::io::Error,
    },
    #[error("the {server} server on {addr} stopped serving on its own: {reason}")]
    Stopped {
        server: String,
        addr: SocketAddr,
        reason: String,
    },
}

/// Whether the controller is ready for traffic (`/readyz`): a shared
/// [`ReadinessState`] that the IndexTracker, Discovery and the Deployers report into. Cheap
/// to clone; clones share the state.
#[derive(Debug, Clone, Default)]
pub struct Readiness(Arc<RwLock<ReadinessState>>);

impl Readiness {
    /// Readiness that waits for the indexes, and also for every instance's first deployment
    /// when `requires_deployment` (a controller that owns its HAProxy).
    pub fn new(requires_deployment: bool) -> Readiness {
        Readiness(Arc::new(RwLock::new(ReadinessState::new(
            requires_deployment,
        ))))
    }

    /// Applies one report to the state.
    pub fn update(&self, f: impl FnOnce(&mut ReadinessState)) {
        // A poisoned lock means a reporter panicked between two set operations; the state is
        // still a valid set of facts.
        f(&mut self.0.write().unwrap_or_else(|p| p.into_inner()));
    }

    pub fn verdict(&self) -> ReadinessVerdict {
        self.verdict_given(None)
    }

    /// The verdict naming what the config source waits for while no config is loaded
    /// ([`ReadinessState::verdict_given`]).
    pub fn verdict_given(
        &self,
        source: Option<&crate::pure::readiness::ConfigSource>,
    ) -> ReadinessVerdict {
        self.0
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .verdict_given(source)
    }

    pub fn is_ready(&self) -> bool {
        self.verdict().ready
    }
}

/// What the debug server reads.
#[derive(Debug, Clone)]
pub struct DebugState {
    pub introspection: Introspection,
    /// The Commentator's ring buffer.
    pub events: EventLog,
    pub readiness: Readiness,
    /// An actor busy with one message for longer than this makes `/healthz` fail.
    pub stall_threshold: Duration,
    /// `POST /debug/actors/{name}/panic`, when fault injection is enabled.
    pub fault_injection: Option<crate::actors::edge::FaultInjection>,
}

impl DebugState {
    /// A debug state with the default stall threshold.
    pub fn new(introspection: Introspection, events: EventLog, readiness: Readiness) -> DebugState {
        DebugState {
            introspection,
            events,
            readiness,
            stall_threshold: DEFAULT_STALL_THRESHOLD,
            fault_injection: None,
        }
    }
}

fn json_error(status: StatusCode, message: impl Into<String>) -> Response {
    (status, Json(json!({ "error": message.into() }))).into_response()
}

fn text(status: StatusCode, content_type: &'static str, body: String) -> Response {
    (status, [(header::CONTENT_TYPE, content_type)], body).into_response()
}

/// The metrics server's routes: `GET /metrics`.
pub fn metrics_router(metrics: Arc<Metrics>) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .with_state(metrics)
}

async fn serve_metrics(State(metrics): State<Arc<Metrics>>) -> Response {
    match metrics.encode_text() {
        Ok(body) => text(StatusCode::OK, METRICS_CONTENT_TYPE, body),
        Err(e) => {
            tracing::error!(error = %e, "cannot encode metrics");
            text(
                StatusCode::INTERNAL_SERVER_ERROR,
                "text/plain; charset=utf-8",
                e.to_string(),
            )
        }
    }
}

/// The debug server's routes (see the module documentation).
pub fn debug_router(state: DebugState) -> Router {
    Router::new()
        .route("/debug/actors", get(debug_actors))
        .route("/debug/actors/{name}/panic", post(inject_panic))
        .route("/debug/events", get(debug_events))
        .route("/debug/vars", get(debug_vars_index))
        .route("/debug/vars/{name}", get(debug_var))
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(not_found)
        .with_state(state)
}

/// The probe server's routes: `GET /healthz` and `GET /readyz`, nothing else.
pub fn health_router(state: DebugState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .fallback(probe_not_found)
        .with_state(state)
}

async fn probe_not_found() -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        "this port serves only /healthz and /readyz; the debug endpoints are on the debug address",
    )
}

async fn not_found() -> Response {
    json_error(
        StatusCode::NOT_FOUND,
        "no such endpoint; try /debug/actors, /debug/events, /debug/vars, /healthz or /readyz",
    )
}

async fn debug_actors(
    State(state): State<DebugState>,
    Query(query): Query<HashMap<String, String>>,
) -> Response {
    let Some(root) = state.introspection.root() else {
        return json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "the actor tree has not started yet",
        );
    };
    let tree = actor_tree(root);
    match query.get("format").map(String::as_str) {
        None | Some("json") => Json(tree).into_response(),
        Some("text") => text(StatusCode::OK, "text/plain; charset=utf-8", tree.to_text()),
        Some(other) => json_error(
            StatusCode::BAD_REQUEST,
            format!("unknown format {other:?}; use format=json or format=text"),
        ),
    }
}

/// Makes the named edge's task panic (fault injection, off unless enabled): its
/// supervisor restarts it, which is what the endpoint exists to show.
async fn inject_panic(State(state): State<DebugState>, Path(name): Path<String>) -> Response {
    let Some(faults) = &state.fault_injection else {
        return json_error(
            StatusCode::NOT_FOUND,
            "fault injection is off; start haptor run with --debug-fault-injection to enable it",
        );
    };
    if faults.inject(&name) {
        tracing::warn!(edge = %name, "a fault was injected through the debug endpoint");
        Json(json!({ "injected": name })).into_response()
    } else {
        json_error(
            StatusCode::NOT_FOUND,
            format!(
                "no edge named {name:?}; edges: {}",
                faults.names().join(", ")
            ),
        )
    }
}

async fn debug_events(State(state): State<DebugState>) -> Response {
    Json(state.events.snapshot()).into_response()
}

async fn debug_vars_index() -> Response {
    Json(json!({ "vars": DEBUG_VARS })).into_response()
}

async fn debug_var(State(state): State<DebugState>, Path(name): Path<String>) -> Response {
    let introspection = &state.introspection;
    let value = match name.as_str() {
        "config" => json!(introspection.config()),
        "rendered" => match introspection.rendered() {
            Some(rendered) => {
                // Private keys and password hashes never leave the process.
                let rendered = crate::pure::redact::redacted_render(&rendered);
                let files: BTreeMap<&str, &str> = rendered
                    .aux_files
                    .iter()
                    .map(|(path, file)| (path.as_str(), file.content.as_str()))
                    .collect();
                json!({ "haproxy.cfg": rendered.haproxy_cfg, "files": files })
            }
            None => serde_json::Value::Null,
        },
        "resources" => json!(introspection.resources()),
        "state" => json!(introspection.state()),
        "errors" => json!(introspection.errors()),
        // The Gateway API status the last deployed render decided (what `haptor run`'s
        // leader writes; without lastTransitionTime or addresses).
        "status" => match introspection.rendered() {
            Some(rendered) => json!(crate::pure::gateway_status::statuses(
                &rendered.status_records
            )),
            None => json!([]),
        },
        other => {
            return json_error(
                StatusCode::NOT_FOUND,
                format!(
                    "no debug variable named {other:?}; valid names are {}",
                    DEBUG_VARS.join(", ")
                ),
            );
        }
    };
    Json(value).into_response()
}

async fn healthz(State(state): State<DebugState>) -> Response {
    let stalled = state.introspection.stalled(state.stall_threshold);
    if stalled.is_empty() {
        return Json(json!({ "status": "ok" })).into_response();
    }
    let stalled: Vec<_> = stalled
        .iter()
        .map(|(actor, busy)| json!({ "actor": actor, "busy_ms": busy.as_millis() as u64 }))
        .collect();
    let body = json!({
        "status": "stalled",
        "threshold_ms": state.stall_threshold.as_millis() as u64,
        "stalled": stalled,
    });
    (StatusCode::SERVICE_UNAVAILABLE, Json(body)).into_response()
}

async fn readyz(State(state): State<DebugState>) -> Response {
    // Until a config is loaded, what `haptor run`'s config watch waits for (the API server,
    // the CRD, the config) is named rather than "a valid HAProxyTemplateConfig".
    let source = state.introspection.config_source();
    let verdict = state.readiness.verdict_given(source.as_ref());
    let status = if verdict.ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body = json!({
        "status": if verdict.ready { "ready" } else { "not ready" },
        "waiting_for": verdict.waiting_for,
    });
    // The leader also says which instances do not run the latest render yet; that does
    // not make the controller unready (it serves on, and the webhook must answer).
    let controller = state.introspection.state();
    if controller.is_leader {
        body["instances_without_the_latest_render"] = json!(controller.instances_behind());
    }
    (status, Json(body)).into_response()
}

/// Messages an HTTP server actor accepts.
#[derive(Debug)]
pub enum HttpServerMsg {
    /// The address the server is bound to.
    LocalAddr(RpcReplyPort<SocketAddr>),
    /// Internal: the serving task ended without being asked to.
    ServingEnded(String),
}

/// Start arguments of an HTTP server, cloned for every (re)start.
#[derive(Clone)]
pub struct HttpServerArgs {
    /// The server's name in logs and errors (`metrics`, `debug`).
    pub server: String,
    /// The address to bind, e.g. `0.0.0.0:9090` or `127.0.0.1:0`.
    pub addr: String,
    pub router: Router,
    /// Serve HTTPS only, with this TLS configuration (its certificate resolver may change
    /// the certificate between handshakes); `None`: plain HTTP.
    pub tls: Option<Arc<rustls::ServerConfig>>,
}

impl std::fmt::Debug for HttpServerArgs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpServerArgs")
            .field("server", &self.server)
            .field("addr", &self.addr)
            .field("tls", &self.tls.is_some())
            .finish()
    }
}

/// How long a client may take to complete its TLS handshake, and to send a request's
/// headers, before its connection is closed.
const TLS_HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Serves `router` over TLS on `listener` until `shutdown` completes: each connection's TLS
/// handshake and HTTP/1.1 exchange run on their own task (a slow client delays nobody); on
/// shutdown no connection is accepted any more, and open ones finish the request in flight
/// and close.
async fn serve_tls(
    listener: tokio::net::TcpListener,
    router: Router,
    tls: Arc<rustls::ServerConfig>,
    shutdown: impl std::future::Future<Output = ()>,
) -> std::io::Result<()> {
    let acceptor = tokio_rustls::TlsAcceptor::from(tls);
    let (stopping_tx, stopping) = tokio::sync::watch::channel(false);
    let mut connections = tokio::task::JoinSet::new();
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            () = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => {
                let (tcp, peer) = match accepted {
                    Ok(accepted) => accepted,
                    Err(e) => {
                        // Out of file descriptors and the like: pause instead of spinning.
                        tracing::warn!(error = %e, "accepting a TLS connection failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let acceptor = acceptor.clone();
                let router = router.clone();
                let mut stopping = stopping.clone();
                connections.spawn(async move {
                    let stream = match tokio::time::timeout(TLS_HANDSHAKE_TIMEOUT, acceptor.accept(tcp)).await {
                        Ok(Ok(stream)) => stream,
                        Ok(Err(e)) => {
                            tracing::debug!(peer = %peer, error = %e, "TLS handshake failed");
                            return;
                        }
                        Err(_) => {
                            tracing::debug!(peer = %peer, "TLS handshake timed out");
                            return;
                        }
                    };
                    let service = hyper_util::service::TowerToHyperService::new(router);
                    let connection = hyper::server::conn::http1::Builder::new()
                        .timer(hyper_util::rt::TokioTimer::new())
                        .header_read_timeout(TLS_HANDSHAKE_TIMEOUT)
                        .serve_connection(hyper_util::rt::TokioIo::new(stream), service);
                    tokio::pin!(connection);
                    let outcome = tokio::select! {
                        outcome = connection.as_mut() => outcome,
                        _ = async { let _ = stopping.wait_for(|stopping| *stopping).await; } => {
                            connection.as_mut().graceful_shutdown();
                            connection.await
                        }
                    };
                    if let Err(e) = outcome {
                        tracing::debug!(peer = %peer, error = %e, "HTTPS connection ended with an error");
                    }
                });
            }
        }
    }
    let _ = stopping_tx.send(true);
    while connections.join_next().await.is_some() {}
    Ok(())
}

/// An actor serving one axum router on one address (see the module documentation).
#[derive(Debug, Clone, Copy, Default)]
pub struct HttpServer;

pub struct HttpServerState {
    server: String,
    local_addr: SocketAddr,
    /// Sending (or dropping, should the actor die without `post_stop`) starts the graceful
    /// shutdown.
    shutdown: Option<oneshot::Sender<()>>,
    serving: Option<JoinHandle<()>>,
}

impl Actor for HttpServer {
    type Msg = HttpServerMsg;
    type State = HttpServerState;
    type Arguments = HttpServerArgs;

    async fn pre_start(
        &self,
        myself: ActorRef<Self::Msg>,
        args: HttpServerArgs,
    ) -> Result<Self::State, ActorProcessingErr> {
        let HttpServerArgs {
            server,
            addr,
            router,
            tls,
        } = args;
        let listener = tokio::net::TcpListener::bind(&addr)
            .await
            .map_err(|source| HttpServerError::Bind {
                server: server.clone(),
                addr: addr.clone(),
                source,
            })?;
        let local_addr = listener
            .local_addr()
            .map_err(|source| HttpServerError::LocalAddr {
                server: server.clone(),
                addr: addr.clone(),
                source,
            })?;
        let (shutdown, shutdown_requested) = oneshot::channel::<()>();
        let scheme = if tls.is_some() { "https" } else { "http" };
        let serving = tokio::spawn(async move {
            let stop = async move {
                let _ = shutdown_requested.await;
            };
            let outcome = match tls {
                Some(tls) => serve_tls(listener, router, tls, stop).await,
                None => {
                    axum::serve(listener, router)
                        .with_graceful_shutdown(stop)
                        .await
                }
            };
            let reason = match outcome {
                Ok(()) => "the server shut down".to_string(),
                Err(e) => e.to_string(),
            };
            // Once the actor is stopping nobody reads this; that is the expected case.
            let _ = myself.cast(HttpServerMsg::ServingEnded(reason));
        });
        tracing::info!(server = %server, addr = %local_addr, scheme, "HTTP server listening");
        Ok(HttpServerState {
            server,
            local_addr,
            shutdown: Some(shutdown),
            serving: Some(serving),
        })
    }

    async fn handle(
        &self,
        _: ActorRef<Self::Msg>,
        msg: Self::Msg,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        match msg {
            HttpServerMsg::LocalAddr(reply) => {
                let _ = reply.send(state.local_addr);
                Ok(())
            }
            HttpServerMsg::ServingEnded(reason) => Err(HttpServerError::Stopped {
                server: state.server.clone(),
                addr: state.local_addr,
                reason,
            }
            .into()),
        }
    }

    async fn post_stop(
        &self,
        _: ActorRef<Self::Msg>,
        state: &mut Self::State,
    ) -> Result<(), ActorProcessingErr> {
        if let Some(shutdown) = state.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(mut serving) = state.serving.take()
            && tokio::time::timeout(SHUTDOWN_GRACE, &mut serving)
                .await
                .is_err()
        {
            tracing::warn!(server = %state.server, addr = %state.local_addr, "connections still open after the grace period; closing them");
            serving.abort();
        }
        tracing::info!(server = %state.server, addr = %state.local_addr, "HTTP server stopped");
        Ok(())
    }
}

/// The supervisor child that serves `/metrics` on `addr` (named [`METRICS_SERVER_NAME`]).
pub fn metrics_server_spec(addr: impl Into<String>, metrics: Arc<Metrics>) -> ChildSpec {
    let args = HttpServerArgs {
        server: "metrics".into(),
        addr: addr.into(),
        router: metrics_router(metrics),
        tls: None,
    };
    ChildSpec::new(METRICS_SERVER_NAME, ActorRole::Server, HttpServer, args)
}

/// The supervisor child that serves the debug and health endpoints on `addr` (named
/// [`DEBUG_SERVER_NAME`]).
pub fn debug_server_spec(addr: impl Into<String>, state: DebugState) -> ChildSpec {
    let args = HttpServerArgs {
        server: "debug".into(),
        addr: addr.into(),
        router: debug_router(state),
        tls: None,
    };
    ChildSpec::new(DEBUG_SERVER_NAME, ActorRole::Server, HttpServer, args)
}

/// The supervisor child that serves only the probes on `addr` (named
/// [`HEALTH_SERVER_NAME`]).
pub fn health_server_spec(addr: impl Into<String>, state: DebugState) -> ChildSpec {
    let args = HttpServerArgs {
        server: "health".into(),
        addr: addr.into(),
        router: health_router(state),
        tls: None,
    };
    ChildSpec::new(HEALTH_SERVER_NAME, ActorRole::Server, HttpServer, args)
}

/// The supervisor child name of the admission webhook's HTTPS server.
pub const WEBHOOK_SERVER_NAME: &str = "webhook-server";

/// The supervisor child that serves `router` over HTTPS only on `addr` (named
/// [`WEBHOOK_SERVER_NAME`]): `haptor run`'s admission webhook.
pub fn webhook_server_spec(
    addr: impl Into<String>,
    router: Router,
    tls: Arc<rustls::ServerConfig>,
) -> ChildSpec {
    let args = HttpServerArgs {
        server: "webhook".into(),
        addr: addr.into(),
        router,
        tls: Some(tls),
    };
    ChildSpec::new(WEBHOOK_SERVER_NAME, ActorRole::Server, HttpServer, args)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn binding_an_address_in_use_fails_the_start_naming_the_address() {
        let taken = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind a free port");
        let addr = taken.local_addr().expect("local addr").to_string();
        let args = HttpServerArgs {
            server: "debug".into(),
            addr: addr.clone(),
            router: Router::new(),
            tls: None,
        };
        let error = Actor::spawn(None, HttpServer, args)
            .await
            .expect_err("the port is taken");
        assert!(error.to_string().contains(&addr), "{error}");
    }

    #[tokio::test]
    async fn a_stopped_server_releases_its_port() {
        let args = HttpServerArgs {
            server: "debug".into(),
            addr: "127.0.0.1:0".into(),
            router: Router::new(),
            tls: None,
        };
        let (server, handle) = Actor::spawn(None, HttpServer, args)
            .await
            .expect("server starts");
        let addr = ractor::call!(server, HttpServerMsg::LocalAddr).expect("server answers");
        assert!(tokio::net::TcpStream::connect(addr).await.is_ok());
        server.stop(None);
        handle.await.expect("server stops");
        assert!(tokio::net::TcpStream::connect(addr).await.is_err());
        assert!(tokio::net::TcpListener::bind(addr).await.is_ok());
    }
}
