//! Why a request to the Kubernetes API server failed, told so that a user can act on it.
//!
//! Every watch and write of `haptor run` (`drivers::kube`) turns a failed request into an
//! [`ApiFailure`]: which API server ([`ApiServer`], its URL), what haptor asked for
//! ([`Request`]: the verbs, the resource, the namespace) and the [`Cause`], classified once
//! here ([`classify`], [`classify_watch`]) from the client's error — its HTTP status when
//! the server answered, else the transport error under it: nothing listening (connection
//! refused), no route or no name, a cut connection, a failed TLS handshake. Its `Display`
//! is the sentence the log shows, naming the URL and the real error and saying what to do:
//! the RBAC rule to grant for a 403, the CustomResourceDefinition to install for a 404 of
//! one of haptor's kinds, the kubeconfig to check for a refused connection.
//!
//! A restarted API server refuses requests for a moment while it starts (403 until its
//! authorizer is ready, 404 until it serves the custom resources again), so an RBAC hint at
//! the first refusal would be a false alarm. [`FailureLog`] is the one rule, used by every
//! watch, that decides how loudly a failure is told: a refusal (401, 403, 404) is an error,
//! with its advice, only once it has been answered to two tries or more over at least
//! [`REFUSAL_PERSISTS_AFTER`], before that a debug line; any other failure is a
//! warning the first time and a debug line while it repeats; and the first success after
//! failures that were told says the request works again, after how many tries and how long.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use kube::runtime::watcher;

/// The file of `deploy/` that holds haptor's CustomResourceDefinitions.
pub const CRD_FILE: &str = "deploy/crds/haptor.dev_crds.yaml";
/// The API group of haptor's own kinds.
pub const HAPTOR_GROUP: &str = "haptor.dev";

/// How long a refusal (401, 403, 404) must last, over two tries or more, before it is told
/// as an error with its advice: a restarted API server refuses for about 0.1 s while its
/// authorizer starts. Time, not a number of tries: retries may come every 250 ms.
pub const REFUSAL_PERSISTS_AFTER: Duration = Duration::from_secs(2);

/// The API server haptor talks to, as messages name it: by its URL when known.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiServer {
    url: Option<Arc<str>>,
}

impl ApiServer {
    /// The API server at `url` (the client configuration's `cluster_url`; a trailing `/` is
    /// dropped).
    pub fn new(url: impl fmt::Display) -> ApiServer {
        let url = url.to_string();
        let url = url.trim_end_matches('/');
        ApiServer {
            url: (!url.is_empty()).then(|| Arc::from(url)),
        }
    }

    /// An API server whose URL is not known (a client built elsewhere).
    pub fn unknown() -> ApiServer {
        ApiServer::default()
    }

    pub fn url(&self) -> Option<&str> {
        self.url.as_deref()
    }
}

impl fmt::Display for ApiServer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.url {
            Some(url) => write!(f, "the API server at {url}"),
            None => write!(f, "the API server"),
        }
    }
}

/// What haptor asked the API server for, as RBAC names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    /// The verbs, as a sentence and a grant say them: `list and watch`, `patch`.
    pub verbs: String,
    /// The resource's plural, with `/status` for the status subresource.
    pub resource: String,
    /// The API group (empty: the core group).
    pub group: String,
    /// The namespace; `None`: cluster-wide.
    pub namespace: Option<String>,
    /// The object's name when the request is about one object.
    pub name: Option<String>,
}

impl Request {
    /// A list and a watch (what a watcher does) of `resource` in `group`.
    pub fn watch(resource: &str, group: &str, namespace: Option<&str>) -> Request {
        Request::new("list and watch", resource, group, namespace)
    }

    pub fn new(verbs: &str, resource: &str, group: &str, namespace: Option<&str>) -> Request {
        Request {
            verbs: verbs.to_string(),
            resource: resource.to_string(),
            group: group.to_string(),
            namespace: namespace.filter(|n| !n.is_empty()).map(str::to_string),
            name: None,
        }
    }

    /// The same request about the object `name`.
    pub fn named(mut self, name: &str) -> Request {
        self.name = Some(name.to_string());
        self
    }

    /// `resource.group` (the resource alone in the core group), as `kubectl` names it.
    pub fn qualified_resource(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }

    /// `in namespace NS` or `cluster-wide`.
    fn place(&self) -> String {
        match &self.namespace {
            Some(namespace) => format!("in namespace {namespace}"),
            None => "cluster-wide".to_string(),
        }
    }

    /// The resource's base plural (without a subresource), for the CRD's name.
    fn plural(&self) -> &str {
        self.resource
            .split_once('/')
            .map_or(self.resource.as_str(), |(plural, _)| plural)
    }
}

impl fmt::Display for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.verbs, self.qualified_resource())?;
        if let Some(name) = &self.name {
            write!(f, " {name}")?;
        }
        write!(f, " {}", self.place())
    }
}

/// Why a request failed: the server's answer, or what kept it from answering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cause {
    /// Nothing listens at the address: the connection was refused.
    Refused { detail: String },
    /// The address cannot be reached: no route, a host name that does not resolve, a
    /// connection that timed out.
    Unreachable { detail: String },
    /// The connection was cut while the request was under way.
    Cut { detail: String },
    /// No answer within haptor's own time limit.
    TimedOut { after: Duration },
    /// The TLS handshake failed (an untrusted certificate, a name it does not cover).
    Tls { detail: String },
    /// 401: the server does not accept haptor's credentials.
    Unauthorized { message: String },
    /// 403: the server does not allow the request (RBAC).
    Forbidden { message: String },
    /// 404: the resource is not served (a CRD not installed) or the object does not exist.
    NotFound { message: String },
    /// 410: a watch's resourceVersion expired; the watcher lists again.
    Gone { message: String },
    /// Any other status the server answered with.
    Status {
        code: u16,
        reason: String,
        message: String,
    },
    /// Anything else, with the whole error chain.
    Other { detail: String },
}

impl Cause {
    /// The cause as a metric label.
    pub fn metric_label(&self) -> &'static str {
        match self {
            Cause::Refused { .. } => "refused",
            Cause::Unreachable { .. } => "unreachable",
            Cause::Cut { .. } => "cut",
            Cause::TimedOut { .. } => "timed_out",
            Cause::Tls { .. } => "tls",
            Cause::Unauthorized { .. } => "unauthorized",
            Cause::Forbidden { .. } => "forbidden",
            Cause::NotFound { .. } => "not_found",
            Cause::Gone { .. } => "gone",
            Cause::Status { .. } => "status",
            Cause::Other { .. } => "other",
        }
    }

    /// The HTTP status the server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            Cause::Unauthorized { .. } => Some(401),
            Cause::Forbidden { .. } => Some(403),
            Cause::NotFound { .. } => Some(404),
            Cause::Gone { .. } => Some(410),
            Cause::Status { code, .. } => Some(*code),
            _ => None,
        }
    }

    /// Whether the server itself refused the request (401, 403, 404): what a starting API
    /// server answers for a moment, so told loudly only once it lasts ([`FailureLog`]).
    pub fn is_refusal(&self) -> bool {
        matches!(
            self,
            Cause::Unauthorized { .. } | Cause::Forbidden { .. } | Cause::NotFound { .. }
        )
    }
}

impl fmt::Display for Cause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Cause::Refused { detail } => write!(f, "connection refused ({detail})"),
            Cause::Unreachable { detail } => write!(f, "unreachable ({detail})"),
            Cause::Cut { detail } => write!(f, "the connection was cut ({detail})"),
            Cause::TimedOut { after } => write!(f, "no answer within {after:?}"),
            Cause::Tls { detail } => write!(f, "the TLS handshake failed ({detail})"),
            Cause::Unauthorized { message } => write!(f, "401 Unauthorized: {message}"),
            Cause::Forbidden { message } => write!(f, "403 Forbidden: {message}"),
            Cause::NotFound { message } => write!(f, "404 Not Found: {message}"),
            Cause::Gone { message } => write!(f, "410 Gone: {message}"),
            Cause::Status {
                code,
                reason,
                message,
            } => write!(f, "{code} {reason}: {message}"),
            Cause::Other { detail } => f.write_str(detail),
        }
    }
}

/// A failed request: where it went, what it asked and why it failed. Its `Display` is the
/// whole sentence, advice included; [`ApiFailure::brief`] leaves the advice out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiFailure {
    pub server: ApiServer,
    pub request: Request,
    pub cause: Cause,
}

impl ApiFailure {
    pub fn new(server: ApiServer, request: Request, cause: Cause) -> ApiFailure {
        ApiFailure {
            server,
            request,
            cause,
        }
    }

    /// A failure of `request` classified from the client's error.
    pub fn of(server: &ApiServer, request: &Request, error: &kube::Error) -> ApiFailure {
        ApiFailure::new(server.clone(), request.clone(), classify(error))
    }

    /// A failure of a watch (`request` lists and watches) classified from the watcher's
    /// error.
    pub fn of_watch(server: &ApiServer, request: &Request, error: &watcher::Error) -> ApiFailure {
        ApiFailure::new(server.clone(), request.clone(), classify_watch(error))
    }

    pub fn metric_label(&self) -> &'static str {
        self.cause.metric_label()
    }

    /// Whether a 404 says that a whole resource is not served (a list or watch: a
    /// collection does not go missing, its CustomResourceDefinition does).
    fn resource_missing(&self) -> bool {
        matches!(self.cause, Cause::NotFound { .. }) && self.request.name.is_none()
    }

    /// The CustomResourceDefinition a missing resource of haptor's own group needs.
    pub fn missing_crd(&self) -> Option<String> {
        (self.resource_missing() && self.request.group == HAPTOR_GROUP)
            .then(|| format!("{}.{}", self.request.plural(), HAPTOR_GROUP))
    }

    /// The failure without advice: what failed, where, and the cause.
    pub fn brief(&self) -> String {
        format!(
            "{} at {}: {}",
            self.request,
            self.server.url().unwrap_or("the API server"),
            self.cause
        )
    }

    /// What to do about it, when there is something to say.
    pub fn advice(&self) -> Option<String> {
        let request = &self.request;
        let server = &self.server;
        Some(match &self.cause {
            Cause::Refused { .. } => format!(
                "is {server} running, and is the server address of haptor's kubeconfig (or of \
                 the in-cluster service account) right?"
            ),
            Cause::Unreachable { .. } => format!(
                "check the server address of haptor's kubeconfig and the network path to \
                 {server}"
            ),
            Cause::Cut { .. } | Cause::TimedOut { .. } => {
                format!("check that {server} is up and not overloaded")
            }
            Cause::Tls { .. } => "check the certificate authority of haptor's kubeconfig \
                                  (certificate-authority-data) and that the server address is a \
                                  name the server's certificate holds"
                .to_string(),
            Cause::Unauthorized { .. } => "check the user of haptor's kubeconfig, or that the \
                                           service account token mounted in the pod is valid"
                .to_string(),
            Cause::Forbidden { .. } => format!(
                "grant haptor's service account the verbs {} on resource {} in API group '{}' \
                 {}",
                request.verbs,
                request.resource,
                request.group,
                match &request.namespace {
                    Some(namespace) =>
                        format!("in namespace {namespace} (a Role and a RoleBinding)"),
                    None => "(a ClusterRole and a ClusterRoleBinding: the request is cluster-wide)"
                        .to_string(),
                }
            ),
            Cause::NotFound { .. } if self.resource_missing() => match self.missing_crd() {
                Some(_) => format!(
                    "apply {CRD_FILE} (`kubectl apply -f {CRD_FILE}`, or `haptor crd | kubectl \
                     apply -f -`) or install the chart deploy/chart/haptor"
                ),
                None => format!(
                    "check that {server} serves {} (its CustomResourceDefinition installed, \
                     its API group enabled)",
                    request.qualified_resource()
                ),
            },
            _ => return None,
        })
    }

    /// What `/readyz` says it waits for while this failure stands.
    pub fn awaited(&self) -> String {
        let server = &self.server;
        match &self.cause {
            Cause::Refused { .. }
            | Cause::Unreachable { .. }
            | Cause::Cut { .. }
            | Cause::TimedOut { .. } => format!("{server} (not reachable: {})", self.cause),
            Cause::Tls { .. } => format!("{server} (not trusted: {})", self.cause),
            Cause::Unauthorized { .. } => {
                format!("{server} to accept haptor's credentials (401 Unauthorized)")
            }
            Cause::Forbidden { .. } => format!(
                "permission to {} (403 Forbidden: grant it to haptor's service account)",
                self.request
            ),
            Cause::NotFound { .. } => match self.missing_crd() {
                Some(crd) => {
                    format!("the CustomResourceDefinition {crd} (not installed: apply {CRD_FILE})")
                }
                None => format!("{} ({})", self.request, self.cause),
            },
            _ => format!("{} ({})", self.request, self.cause),
        }
    }
}

impl fmt::Display for ApiFailure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let request = &self.request;
        let server = &self.server;
        match &self.cause {
            Cause::Refused { .. } | Cause::Unreachable { .. } => {
                write!(f, "cannot reach {server} to {request}: {}", self.cause)?
            }
            Cause::Tls { .. } => write!(
                f,
                "cannot connect securely to {server} to {request}: {}",
                self.cause
            )?,
            Cause::Unauthorized { .. } => write!(
                f,
                "{server} rejected haptor's credentials to {request} ({})",
                self.cause
            )?,
            Cause::Forbidden { .. } => {
                write!(f, "forbidden to {request} by {server} ({})", self.cause)?
            }
            Cause::NotFound { .. } => match self.missing_crd() {
                Some(crd) => write!(
                    f,
                    "the CustomResourceDefinition {crd} is not installed ({server} answers 404 \
                     to {request})"
                )?,
                None if self.resource_missing() => write!(
                    f,
                    "{server} does not serve {} ({})",
                    request.qualified_resource(),
                    self.cause
                )?,
                None => write!(f, "{request} at {server}: {}", self.cause)?,
            },
            _ => write!(f, "{request} at {server} failed: {}", self.cause)?,
        }
        if let Some(advice) = self.advice() {
            write!(f, ": {advice}")?;
        }
        Ok(())
    }
}

/// The cause of a client error: the server's status when it answered, else the transport
/// error found in the error's chain.
pub fn classify(error: &kube::Error) -> Cause {
    match error {
        kube::Error::Api(status) => of_status(status.code, &status.reason, &status.message),
        other => of_transport(other),
    }
}

/// The cause of a watcher's error (a failed list, a failed watch, an error event).
pub fn classify_watch(error: &watcher::Error) -> Cause {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => classify(e),
        watcher::Error::WatchError(status) => {
            of_status(status.code, &status.reason, &status.message)
        }
        watcher::Error::NoResourceVersion => Cause::Other {
            detail: error.to_string(),
        },
    }
}

fn of_status(code: u16, reason: &str, message: &str) -> Cause {
    let message = message.to_string();
    match code {
        401 => Cause::Unauthorized { message },
        403 => Cause::Forbidden { message },
        404 => Cause::NotFound { message },
        410 => Cause::Gone { message },
        _ => Cause::Status {
            code,
            reason: reason.to_string(),
            message,
        },
    }
}

/// Walks the error chain down to what kept the request from an answer. `std::io::Error`
/// hides the error it wraps from `source()` (it returns that error's source), so each I/O
/// error is also looked into with `get_ref()`: that is where a TLS failure sits.
fn of_transport(error: &(dyn std::error::Error + 'static)) -> Cause {
    let mut texts: Vec<String> = Vec::new();
    let mut resolving = false;
    let mut found: Option<Cause> = None;
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(current) = next {
        let text = current.to_string();
        if text == "dns error" {
            resolving = true;
        }
        if !texts.iter().any(|t| t.contains(&text)) {
            texts.push(text);
        }
        if let Some(tls) = current.downcast_ref::<rustls::Error>() {
            return Cause::Tls {
                detail: tls.to_string(),
            };
        }
        if let Some(io) = current.downcast_ref::<std::io::Error>() {
            if let Some(tls) = io
                .get_ref()
                .and_then(|inner| inner.downcast_ref::<rustls::Error>())
            {
                return Cause::Tls {
                    detail: tls.to_string(),
                };
            }
            found = found.or_else(|| of_io(io, resolving));
        }
        next = current.source();
    }
    found.unwrap_or_else(|| Cause::Other {
        detail: texts.join(": "),
    })
}

fn of_io(io: &std::io::Error, resolving: bool) -> Option<Cause> {
    use std::io::ErrorKind;
    let detail = io.to_string();
    Some(match io.kind() {
        ErrorKind::ConnectionRefused => Cause::Refused { detail },
        ErrorKind::TimedOut
        | ErrorKind::HostUnreachable
        | ErrorKind::NetworkUnreachable
        | ErrorKind::NetworkDown
        | ErrorKind::AddrNotAvailable => Cause::Unreachable { detail },
        ErrorKind::ConnectionReset
        | ErrorKind::ConnectionAborted
        | ErrorKind::BrokenPipe
        | ErrorKind::UnexpectedEof
        | ErrorKind::NotConnected => Cause::Cut { detail },
        _ if resolving => Cause::Unreachable {
            detail: format!("the host name does not resolve: {detail}"),
        },
        _ => return None,
    })
}

/// How loudly to tell one failure.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Debug,
    Info,
    Warn,
    Error,
}

/// What [`FailureLog::failed`] decided: the level, and whether the line carries the
/// failure's advice (an RBAC hint only for a refusal that lasts).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Telling {
    pub level: Level,
    pub advice: bool,
}

/// A request that works again after failures: how many tries failed, over how long, and how
/// loudly to say so (as loudly as the failures were told, at most info).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Resumed {
    pub failures: u32,
    pub over: Duration,
    pub level: Level,
}

/// The one rule for how the failures of a retried request (a watch, a Lease renewal, a
/// status write) are told; see the module documentation. Feed it every failure and every
/// success, with the time they happened.
#[derive(Debug, Clone, Default)]
pub struct FailureLog {
    /// The first failure since the last success, and how many there were.
    failing: Option<(Instant, u32)>,
    /// The current run of refusals with one status: the code, since when, how many.
    refusals: Option<(u16, Instant, u32)>,
    /// What was last told above debug level (cause and message), so a repeat is quiet.
    told: Option<String>,
}

impl FailureLog {
    pub fn new() -> FailureLog {
        FailureLog::default()
    }

    /// A request failed at `now`: how loudly to tell it. A 410 (an expired watch, listed
    /// again at once) is no failure of the request: told at info, and counted as none.
    pub fn failed(&mut self, cause: &Cause, now: Instant) -> Telling {
        if let Cause::Gone { .. } = cause {
            return Telling {
                level: Level::Info,
                advice: false,
            };
        }
        self.failing.get_or_insert((now, 0)).1 += 1;
        let quiet = Telling {
            level: Level::Debug,
            advice: false,
        };
        let fingerprint = format!("{}: {cause}", cause.metric_label());
        let repeated = self.told.as_deref() == Some(fingerprint.as_str());
        let Some(code) = cause.code().filter(|_| cause.is_refusal()) else {
            self.refusals = None;
            if repeated {
                return quiet;
            }
            self.told = Some(fingerprint);
            return Telling {
                level: Level::Warn,
                advice: true,
            };
        };
        let (since, tries) = match &mut self.refusals {
            Some((refused, since, tries)) if *refused == code => {
                *tries += 1;
                (*since, *tries)
            }
            _ => {
                self.refusals = Some((code, now, 1));
                (now, 1)
            }
        };
        let lasts = tries >= 2 && now.saturating_duration_since(since) >= REFUSAL_PERSISTS_AFTER;
        if !lasts || repeated {
            return quiet;
        }
        self.told = Some(fingerprint);
        Telling {
            level: Level::Error,
            advice: true,
        }
    }

    /// A request succeeded at `now`: after failures, that it works again (told at info when
    /// a failure was told above debug level, else at debug).
    pub fn succeeded(&mut self, now: Instant) -> Option<Resumed> {
        let (since, failures) = self.failing.take()?;
        let told = self.told.take().is_some();
        self.refusals = None;
        Some(Resumed {
            failures,
            over: now.saturating_duration_since(since),
            level: if told { Level::Info } else { Level::Debug },
        })
    }

    /// Whether requests are failing now (a failure since the last success).
    pub fn is_failing(&self) -> bool {
        self.failing.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn server() -> ApiServer {
        ApiServer::new("https://10.0.0.1:6443/")
    }

    fn config_watch() -> Request {
        Request::watch("haproxytemplateconfigs", HAPTOR_GROUP, Some("haptor"))
    }

    fn refused() -> kube::Error {
        let io = std::io::Error::new(
            std::io::ErrorKind::ConnectionRefused,
            "Connection refused (os error 111)",
        );
        kube::Error::Service(Box::new(Wrapper {
            text: "client error (Connect)",
            source: Box::new(io),
        }))
    }

    fn status(code: u16, reason: &str, message: &str) -> kube::Error {
        kube::Error::Api(Box::new(
            kube::core::Status::failure(message, reason).with_code(code),
        ))
    }

    /// An error that wraps another, as hyper's and hyper-util's do.
    #[derive(Debug)]
    struct Wrapper {
        text: &'static str,
        source: Box<dyn std::error::Error + Send + Sync>,
    }

    impl fmt::Display for Wrapper {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.write_str(self.text)
        }
    }

    impl std::error::Error for Wrapper {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(self.source.as_ref())
        }
    }

    #[test]
    fn a_refused_connection_names_the_url_and_the_error_and_gives_no_rbac_hint() {
        let failure = ApiFailure::of(&server(), &config_watch(), &refused());
        assert_eq!(
            failure.cause,
            Cause::Refused {
                detail: "Connection refused (os error 111)".into()
            }
        );
        let text = failure.to_string();
        assert!(text.contains("https://10.0.0.1:6443"), "{text}");
        assert!(text.contains("connection refused"), "{text}");
        assert!(!text.contains("grant"), "{text}");
        assert_eq!(
            failure.awaited(),
            "the API server at https://10.0.0.1:6443 (not reachable: connection refused \
             (Connection refused (os error 111)))"
        );
    }

    #[test]
    fn a_tls_failure_wrapped_in_an_io_error_is_told_as_tls() {
        let io = std::io::Error::new(
            std::io::ErrorKind::InvalidData,
            rustls::Error::InvalidCertificate(rustls::CertificateError::UnknownIssuer),
        );
        let error = kube::Error::Service(Box::new(Wrapper {
            text: "client error (Connect)",
            source: Box::new(io),
        }));
        let failure = ApiFailure::of(&server(), &config_watch(), &error);
        assert!(matches!(failure.cause, Cause::Tls { .. }), "{failure:?}");
        let text = failure.to_string();
        assert!(text.contains("TLS handshake failed"), "{text}");
        assert!(text.contains("certificate authority"), "{text}");
    }

    #[test]
    fn a_name_that_does_not_resolve_is_unreachable() {
        let io = std::io::Error::other("failed to lookup address information");
        let error = kube::Error::Service(Box::new(Wrapper {
            text: "client error (Connect)",
            source: Box::new(Wrapper {
                text: "dns error",
                source: Box::new(io),
            }),
        }));
        let cause = classify(&error);
        assert!(
            matches!(&cause, Cause::Unreachable { detail } if detail.contains("does not resolve")),
            "{cause:?}"
        );
    }

    #[test]
    fn a_401_says_the_credentials_are_rejected() {
        let failure = ApiFailure::of(
            &server(),
            &config_watch(),
            &status(401, "Unauthorized", "Unauthorized"),
        );
        let text = failure.to_string();
        assert!(text.contains("rejected haptor's credentials"), "{text}");
        assert!(!text.contains("grant"), "{text}");
    }

    #[test]
    fn a_403_names_the_verbs_the_resource_and_where_to_grant_them() {
        let failure = ApiFailure::of(
            &server(),
            &config_watch(),
            &status(
                403,
                "Forbidden",
                "haproxytemplateconfigs.haptor.dev is forbidden",
            ),
        );
        let text = failure.to_string();
        assert!(
            text.contains(
                "grant haptor's service account the verbs list and watch on resource \
                 haproxytemplateconfigs in API group 'haptor.dev' in namespace haptor (a Role \
                 and a RoleBinding)"
            ),
            "{text}"
        );
        let cluster_wide = ApiFailure::of(
            &server(),
            &Request::watch("ingresses", "networking.k8s.io", None),
            &status(403, "Forbidden", "no"),
        );
        assert!(
            cluster_wide.to_string().contains("a ClusterRole"),
            "{cluster_wide}"
        );
    }

    #[test]
    fn a_404_of_a_haptor_kind_says_which_crd_to_install_and_from_which_file() {
        let failure = ApiFailure::of(
            &server(),
            &config_watch(),
            &status(
                404,
                "NotFound",
                "the server could not find the requested resource",
            ),
        );
        assert_eq!(
            failure.missing_crd().as_deref(),
            Some("haproxytemplateconfigs.haptor.dev")
        );
        let text = failure.to_string();
        assert!(
            text.starts_with(
                "the CustomResourceDefinition haproxytemplateconfigs.haptor.dev is not installed"
            ),
            "{text}"
        );
        assert!(text.contains(CRD_FILE), "{text}");
        assert!(
            failure
                .awaited()
                .starts_with("the CustomResourceDefinition haproxytemplateconfigs.haptor.dev"),
            "{}",
            failure.awaited()
        );
        let other = ApiFailure::of(
            &server(),
            &Request::watch("widgets", "example.com", None),
            &status(404, "NotFound", "not found"),
        );
        assert_eq!(other.missing_crd(), None);
        assert!(
            other
                .to_string()
                .contains("does not serve widgets.example.com"),
            "{other}"
        );
    }

    #[test]
    fn a_watch_error_event_is_classified_by_its_status() {
        let error = watcher::Error::WatchError(Box::new(
            kube::core::Status::failure("too old resource version", "Expired").with_code(410),
        ));
        assert!(matches!(classify_watch(&error), Cause::Gone { .. }));
    }

    fn forbidden() -> Cause {
        Cause::Forbidden {
            message: "no".into(),
        }
    }

    #[test]
    fn a_403_that_clears_within_two_seconds_is_never_told_above_debug() {
        let mut log = FailureLog::new();
        let start = Instant::now();
        for at in [0, 250, 750] {
            let telling = log.failed(&forbidden(), start + Duration::from_millis(at));
            assert_eq!(telling.level, Level::Debug);
            assert!(!telling.advice);
        }
        let resumed = log
            .succeeded(start + Duration::from_millis(800))
            .expect("resumed");
        assert_eq!(resumed.failures, 3);
        assert_eq!(
            resumed.level,
            Level::Debug,
            "nothing was told, so neither is this"
        );
    }

    #[test]
    fn a_403_that_lasts_over_two_seconds_is_one_error_with_its_advice() {
        let mut log = FailureLog::new();
        let start = Instant::now();
        let tellings: Vec<Telling> = [0, 250, 750, 1750, 3750, 5750]
            .into_iter()
            .map(|at| log.failed(&forbidden(), start + Duration::from_millis(at)))
            .collect();
        let levels: Vec<Level> = tellings.iter().map(|t| t.level).collect();
        assert_eq!(
            levels,
            [
                Level::Debug,
                Level::Debug,
                Level::Debug,
                Level::Debug,
                Level::Error,
                Level::Debug
            ]
        );
        assert!(tellings[4].advice);
        let resumed = log
            .succeeded(start + Duration::from_secs(6))
            .expect("resumed");
        assert_eq!(resumed.level, Level::Info);
        assert_eq!(resumed.failures, 6);
    }

    #[test]
    fn fast_retries_of_a_403_are_not_told_before_it_lasted_two_seconds() {
        let mut log = FailureLog::new();
        let start = Instant::now();
        let levels: Vec<Level> = (0..=8)
            .map(|i| {
                log.failed(&forbidden(), start + Duration::from_millis(250 * i))
                    .level
            })
            .collect();
        assert!(levels[..8].iter().all(|l| *l == Level::Debug), "{levels:?}");
        assert_eq!(levels[8], Level::Error, "at 2 s");
    }

    #[test]
    fn a_single_refusal_is_not_told_however_long_ago_it_began() {
        let mut log = FailureLog::new();
        assert_eq!(log.failed(&forbidden(), Instant::now()).level, Level::Debug);
    }

    #[test]
    fn a_403_streak_starts_again_after_a_success() {
        let mut log = FailureLog::new();
        let start = Instant::now();
        log.failed(&forbidden(), start);
        log.succeeded(start + Duration::from_millis(100));
        let telling = log.failed(&forbidden(), start + Duration::from_secs(3));
        assert_eq!(
            telling.level,
            Level::Debug,
            "a new refusal, not a lasting one"
        );
    }

    #[test]
    fn a_refused_connection_is_one_warning_while_it_repeats_and_says_when_it_resumed() {
        let mut log = FailureLog::new();
        let start = Instant::now();
        let cause = Cause::Refused {
            detail: "Connection refused (os error 111)".into(),
        };
        assert_eq!(
            log.failed(&cause, start),
            Telling {
                level: Level::Warn,
                advice: true
            }
        );
        assert_eq!(
            log.failed(&cause, start + Duration::from_secs(1)).level,
            Level::Debug
        );
        let resumed = log
            .succeeded(start + Duration::from_secs(2))
            .expect("resumed");
        assert_eq!(
            resumed,
            Resumed {
                failures: 2,
                over: Duration::from_secs(2),
                level: Level::Info
            }
        );
        assert_eq!(log.succeeded(start + Duration::from_secs(3)), None);
    }

    #[test]
    fn an_expired_watch_is_told_at_info_and_counts_as_no_failure() {
        let mut log = FailureLog::new();
        let gone = Cause::Gone {
            message: "too old".into(),
        };
        assert_eq!(log.failed(&gone, Instant::now()).level, Level::Info);
        assert!(!log.is_failing());
        assert_eq!(log.succeeded(Instant::now()), None);
    }

    #[test]
    fn a_different_failure_is_told_again() {
        let mut log = FailureLog::new();
        let start = Instant::now();
        let refused = Cause::Refused { detail: "x".into() };
        let tls = Cause::Tls { detail: "y".into() };
        assert_eq!(log.failed(&refused, start).level, Level::Warn);
        assert_eq!(log.failed(&tls, start).level, Level::Warn);
        assert_eq!(log.failed(&refused, start).level, Level::Warn);
    }
}
