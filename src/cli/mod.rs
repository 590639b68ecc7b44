//! The `haptor` command line: argument parsing and one handler per subcommand. Handlers are
//! thin: they read files, call into `crate::pure` (offline commands) or start the actor
//! tree (`run`, `local`), print results and choose the exit code.

mod migrate;
mod offline;
mod render_report;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand, ValueEnum};

use crate::drivers::haproxy_check::{installed_haproxy, parse_checker};
use crate::output::outln;
use crate::pure::haproxy::HaproxyVersion;
use crate::telemetry::{LogFormat, LogLevelHandle};

/// Exit code of a command that found problems in its input.
pub const EXIT_PROBLEMS: u8 = 1;
/// Exit code of a command that could not run (bad arguments, unreadable files, not built).
pub const EXIT_UNUSABLE: u8 = 2;

/// haptor renders HAProxy configurations from Kubernetes resources with Handlebars
/// templates, validates them three times (its own parser, a schema check, `haproxy -c`) and
/// deploys them to every HAProxy instance, without a reload whenever HAProxy allows.
#[derive(Debug, Parser)]
#[command(name = "haptor", version, propagate_version = true)]
pub struct Cli {
    /// Log format on standard error.
    #[arg(long, value_enum, global = true, default_value_t = LogFormat::Text, env = "LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log level (trace, debug, info, warn, error); a config's `logging.level` overrides it
    /// at run time.
    #[arg(long, global = true, default_value = "info", env = "LOG_LEVEL")]
    pub log_level: String,
    #[command(subcommand)]
    pub command: Command,
}

/// Output format of the offline commands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum OutputFormat {
    /// A readable summary.
    Summary,
    /// JSON, for machines.
    Json,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Run the controller inside a Kubernetes cluster (watches the API server, deploys to
    /// the HAProxy pods selected by the config's podSelector).
    Run(Box<RunArgs>),
    /// Run the whole controller on one machine: a folder of manifests is the cluster and a
    /// local haproxy, started and owned by haptor, is the instance.
    Local(LocalArgs),
    /// Run a config's embedded validationTests offline (fixtures → render → assertions).
    Validate(ValidateArgs),
    /// Render a config against fixture manifests and print haproxy.cfg and its files.
    Render(RenderArgs),
    /// Render a config against fixture manifests N times, each a first, full render, and
    /// print the mean and percentiles of the render time.
    Bench(BenchArgs),
    /// Parse and schema-check plain haproxy.cfg files (optionally with `haproxy -c`).
    Lint(LintArgs),
    /// Print the operations a deployment from one haproxy.cfg to another would perform
    /// (runtime-API changes and file writes) and whether it reloads.
    Plan(PlanArgs),
    /// Report what a config (by default the embedded Ingress library) does with existing
    /// Ingresses: served as they are, served with annotations or parts left out (which, why,
    /// and what to use instead), or not served. Exit 0 only when every one is served as it is.
    Migrate(MigrateArgs),
    /// Print the reference (Markdown) of the annotations a config reads, by default the
    /// embedded Ingress library's: docs/annotations.md.
    Annotations(AnnotationsArgs),
    /// Print the CustomResourceDefinitions (YAML) of HAProxyTemplateConfig and HAProxyCfg.
    Crd,
    /// Print version and build information.
    Version,
}

#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// Name of the HAProxyTemplateConfig to read (in haptor's namespace).
    #[arg(long, env = "CRD_NAME", default_value = "haptor-config")]
    pub config_name: String,
    /// haptor's namespace: where its config, Lease, HAProxyCfg and HAProxy pods are
    /// (default: the kubeconfig context's namespace, or the service account's in a pod).
    #[arg(long, env = "POD_NAMESPACE")]
    pub namespace: Option<String>,
    /// A kubeconfig file (default: KUBECONFIG, then ~/.kube/config, then the pod's service
    /// account).
    #[arg(long)]
    pub kubeconfig: Option<PathBuf>,
    /// This replica's Lease holder identity (default: the host name).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Address of the probe endpoints (`/healthz`, `/readyz`), apart from the debug ones.
    #[arg(long, default_value = "0.0.0.0:8081")]
    pub health_addr: String,
    /// Address of the Prometheus metrics endpoint.
    #[arg(long, default_value = "0.0.0.0:9090")]
    pub metrics_addr: String,
    /// Address of the debug endpoints (`/debug/actors`, `/debug/vars/*`, ...); localhost
    /// unless you mean to expose what was rendered.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub debug_addr: String,
    /// The haproxy binary used for `haproxy -c`.
    #[arg(long, default_value_t = installed_haproxy(), env = "HAPROXY_BIN")]
    pub haproxy_bin: String,
    #[command(flatten)]
    pub versions: VersionArgs,
    /// The address written to `status.loadBalancer.ingress` of every Ingress the templates
    /// serve: an IP or a host name; repeat the flag or separate with commas for several.
    /// Without it or --publish-service no Ingress status is written (the IngressIgnored and
    /// IngressPartlyServed Events about what the templates leave out are recorded either way).
    #[arg(
        long,
        value_name = "IP_OR_HOSTNAME",
        conflicts_with = "publish_service"
    )]
    pub publish_address: Vec<String>,
    /// The Service whose addresses served Ingresses get in `status.loadBalancer.ingress`:
    /// its `status.loadBalancer.ingress`, else its `spec.clusterIP` (watched by name: needs
    /// list and watch on services). Without it or --publish-address no Ingress status is
    /// written.
    #[arg(long, value_name = "NAMESPACE/NAME")]
    pub publish_service: Option<String>,
    /// Watch the config's namespaced resources (Ingresses, Services, Secrets, ...) in this
    /// namespace only, for a namespaced install whose RBAC is Roles there (default: the
    /// whole cluster).
    #[arg(long, env = "WATCH_NAMESPACE")]
    pub watch_namespace: Option<String>,
    /// Serve `POST /debug/actors/{name}/panic` on the debug address, which makes the named
    /// Kubernetes edge's task panic so its supervision can be watched (restart, count,
    /// resumed work). For testing; never in production.
    #[arg(long, hide = true)]
    pub debug_fault_injection: bool,
    /// Address of the admission webhook (HTTPS only; served when --webhook-cert-file and
    /// --webhook-key-file, or --webhook-self-issued-secret, are given).
    #[arg(long, default_value = "0.0.0.0:9443")]
    pub webhook_addr: String,
    /// The webhook's PEM certificate chain (e.g. a kubernetes.io/tls Secret's tls.crt);
    /// read again when it changes.
    #[arg(long, requires = "webhook_key_file")]
    pub webhook_cert_file: Option<PathBuf>,
    /// The webhook's PEM private key (tls.key); read again when it changes.
    #[arg(long, requires = "webhook_cert_file")]
    pub webhook_key_file: Option<PathBuf>,
    /// Issue the webhook's certificate here instead: a CA and a serving certificate for
    /// --webhook-service's DNS names, kept in this Secret of haptor's namespace (created
    /// when missing, shared by the replicas, issued again before it expires). Needs get,
    /// create and update on that Secret.
    #[arg(
        long,
        value_name = "SECRET",
        requires = "webhook_service",
        conflicts_with = "webhook_cert_file"
    )]
    pub webhook_self_issued_secret: Option<String>,
    /// The webhook's Service in haptor's namespace: the self-issued certificate is for
    /// <service>.<namespace>.svc and <service>.<namespace>.svc.cluster.local.
    #[arg(long, value_name = "SERVICE", requires = "webhook_self_issued_secret")]
    pub webhook_service: Option<String>,
    /// The ValidatingWebhookConfiguration haptor's self-issued CA goes into (each
    /// webhook's caBundle), whose failurePolicy becomes --webhook-failure-policy once this
    /// replica is ready (ship it with Ignore: nothing is refused before haptor answers).
    /// Needs get and patch on it.
    #[arg(long, value_name = "NAME", requires = "webhook_self_issued_secret")]
    pub webhook_configuration: Option<String>,
    /// After SIGTERM, how long haptor answers /readyz 503 while it goes on serving (the
    /// webhook, metrics; a leader goes on leading) before it stops: the time for its pod's
    /// endpoint to leave the Services' rules (kube-proxy, load balancers), so that no
    /// admission is sent to a replica that no longer listens. Go duration syntax; 0s stops
    /// at once.
    #[arg(long, default_value = "5s", value_parser = parse_go_duration)]
    pub shutdown_delay: std::time::Duration,
    /// How long the webhook may take to decide one request (keep it below the
    /// ValidatingWebhookConfiguration's timeoutSeconds); Go duration syntax.
    #[arg(long, default_value = "8s", value_parser = parse_go_duration)]
    pub webhook_timeout: std::time::Duration,
    /// What a request the webhook cannot decide in time gets: Fail (denied) or Ignore
    /// (allowed with a warning); mirror the ValidatingWebhookConfiguration's failurePolicy.
    #[arg(long, default_value = "Fail", value_parser = ["Fail", "Ignore"])]
    pub webhook_failure_policy: String,
    /// Create the Data Plane API credentials Secret of this name in haptor's namespace,
    /// user admin with a random password, when it does not exist (an existing one is never
    /// changed); the HAProxy pods wait for it. Needs create on secrets.
    #[arg(long, value_name = "SECRET")]
    pub create_credentials_secret: Option<String>,
    /// Create the default TLS certificate's Secret (kubernetes.io/tls, self-signed) of this
    /// name in haptor's namespace when it does not exist (an existing one is never
    /// changed); the Ingress library presents it to clients whose SNI matches no Ingress
    /// (extraContext default_certificate). Needs create on secrets.
    #[arg(long, value_name = "SECRET")]
    pub default_certificate_secret: Option<String>,
}

fn parse_go_duration(text: &str) -> Result<std::time::Duration, String> {
    crate::pure::config::parse_duration(text).map_err(|e| e.to_string())
}

#[derive(Debug, clap::Args)]
pub struct LocalArgs {
    /// Folder of multi-document YAML manifests (the HAProxyTemplateConfig, Ingresses,
    /// Services, EndpointSlices, Secrets, ...).
    pub dir: PathBuf,
    /// Where haproxy's files live (default: DIR/.haptor).
    #[arg(long)]
    pub work_dir: Option<PathBuf>,
    /// Address of the Prometheus metrics endpoint.
    #[arg(long, default_value = "127.0.0.1:9090")]
    pub metrics_addr: String,
    /// Address of the debug and health endpoints.
    #[arg(long, default_value = "127.0.0.1:8080")]
    pub debug_addr: String,
    /// The haproxy binary to run.
    #[arg(long, default_value_t = installed_haproxy(), env = "HAPROXY_BIN")]
    pub haproxy_bin: String,
    /// The default TLS certificate's Secret, NAMESPACE/NAME: a self-signed certificate
    /// generated once into the work directory (`default-certificate.yaml`) and read with the
    /// folder, which the Ingress library presents to clients whose SNI matches no Ingress
    /// (its extraContext `default_certificate`); empty for none.
    #[arg(long, default_value = "haptor/haptor-default-tls")]
    pub default_certificate: String,
}

#[derive(Debug, clap::Args)]
pub struct ValidateArgs {
    /// The HAProxyTemplateConfig YAML file.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Run only the tests with these names.
    #[arg(long = "test")]
    pub tests: Vec<String>,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Summary)]
    pub output: OutputFormat,
    /// The haproxy binary used by `haproxy_valid` assertions.
    #[arg(long, default_value_t = installed_haproxy(), env = "HAPROXY_BIN")]
    pub haproxy_bin: String,
    #[command(flatten)]
    pub versions: VersionArgs,
    /// Print the rendered files of failing tests.
    #[arg(long)]
    pub dump_rendered: bool,
}

#[derive(Debug, clap::Args)]
pub struct RenderArgs {
    /// The HAProxyTemplateConfig YAML file.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Folder of fixture manifests (multi-document YAML) to render against.
    #[arg(long)]
    pub fixtures: Option<PathBuf>,
    /// Write the files into this folder instead of printing them.
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// The body of the config's HTTP resource NAME, read from FILE (repeatable): offline
    /// commands fetch nothing, so a resource that is on and not given reads as empty, with
    /// a warning.
    #[arg(long = "http-resource", value_name = "NAME=FILE")]
    pub http_resources: Vec<String>,
    /// Also validate the result (parser, schema, `haproxy -c`).
    #[arg(long)]
    pub validate: bool,
    /// The haproxy binary used with --validate.
    #[arg(long, default_value_t = installed_haproxy(), env = "HAPROXY_BIN")]
    pub haproxy_bin: String,
    #[command(flatten)]
    pub versions: VersionArgs,
    /// Print, instead of the files, which template line wrote each of their lines and
    /// through which snippets (`render`, `render_glob`, `with_rendered`, `{{> name}}`) it
    /// was reached; --out still writes the files.
    #[arg(long)]
    pub trace: bool,
    /// Print, instead of the files, the calls and the time of each template and snippet,
    /// with and without the snippets it included, longest first; --out still writes the
    /// files.
    #[arg(long)]
    pub profile: bool,
    /// Output format: json prints one object with `haproxy.cfg`, `files` and, when asked
    /// for, `trace` and `profile`.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Summary)]
    pub output: OutputFormat,
}

#[derive(Debug, clap::Args)]
pub struct BenchArgs {
    /// The HAProxyTemplateConfig YAML file.
    #[arg(short = 'f', long = "file")]
    pub file: PathBuf,
    /// Folder of fixture manifests (multi-document YAML) to render against.
    #[arg(long)]
    pub fixtures: Option<PathBuf>,
    /// The body of the config's HTTP resource NAME, read from FILE (repeatable): offline
    /// commands fetch nothing, so a resource that is on and not given reads as empty, with
    /// a warning.
    #[arg(long = "http-resource", value_name = "NAME=FILE")]
    pub http_resources: Vec<String>,
    /// How many timed renders.
    #[arg(short = 'n', long = "iterations", default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    pub iterations: u32,
    /// Renders before the timed ones, not counted.
    #[arg(long, default_value_t = 2)]
    pub warmup: u32,
    /// Time renders that also trace every line (as `render --trace` does).
    #[arg(long)]
    pub trace: bool,
    /// Time renders that also profile every template and snippet (as `render --profile`).
    #[arg(long)]
    pub profile: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Summary)]
    pub output: OutputFormat,
    /// The haproxy binary whose version the render is for.
    #[arg(long, default_value_t = installed_haproxy(), env = "HAPROXY_BIN")]
    pub haproxy_bin: String,
    #[command(flatten)]
    pub versions: VersionArgs,
}

#[derive(Debug, clap::Args)]
pub struct LintArgs {
    /// haproxy.cfg files to check.
    #[arg(required = true)]
    pub files: Vec<PathBuf>,
    /// Also run `haproxy -c` on each file.
    #[arg(long)]
    pub haproxy: bool,
    /// The haproxy binary used with --haproxy.
    #[arg(long, default_value_t = installed_haproxy(), env = "HAPROXY_BIN")]
    pub haproxy_bin: String,
    #[command(flatten)]
    pub versions: VersionArgs,
    /// Print the structured view of each file.
    #[arg(long, value_enum)]
    pub dump: Option<DumpFormat>,
}

#[derive(Debug, clap::Args)]
pub struct PlanArgs {
    /// The configuration the instance runs now: a haproxy.cfg, or a folder `haptor render
    /// --out` wrote (haproxy.cfg with its maps, certificates and files).
    pub from: PathBuf,
    /// The configuration to deploy (a haproxy.cfg or a `render --out` folder).
    pub to: PathBuf,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value_t = OutputFormat::Summary)]
    pub output: OutputFormat,
}

/// The target's HAProxy version and the `haproxy -c` checker of each version.
#[derive(Debug, Clone, clap::Args)]
pub struct VersionArgs {
    /// The HAProxy version (major.minor) the configuration is for: the schema check accepts
    /// what came after 2.6 from the version that added it, and `haproxy -c` must be of this
    /// version (default: the version of the --haproxy-bin binary, else 2.6).
    #[arg(long, value_name = "X.Y")]
    pub haproxy_version: Option<HaproxyVersion>,
    /// The haproxy that checks configurations for targets of one version, as VERSION=PATH
    /// (e.g. 3.0=/usr/local/bin/haproxy-3.0); repeat for several. Default: the --haproxy-bin
    /// binary, for its own version. A target whose version has no checker is reported as a
    /// mismatch, never checked with another version.
    #[arg(long = "haproxy-checker", value_name = "X.Y=PATH", value_parser = parse_checker)]
    pub haproxy_checkers: Vec<(HaproxyVersion, PathBuf)>,
}

impl VersionArgs {
    /// The target's version: --haproxy-version, else the version of `binary`, else 2.6.
    pub fn target(&self, binary: &str) -> HaproxyVersion {
        crate::drivers::haproxy_check::target_version(
            self.haproxy_version,
            std::path::Path::new(binary),
        )
    }
}

#[derive(Debug, clap::Args)]
pub struct MigrateArgs {
    /// Manifest files or folders holding the Ingresses (and any Services or Secrets to use
    /// with them), e.g. the output of `kubectl get ingress -A -o yaml`; `-` reads standard
    /// input.
    pub inputs: Vec<PathBuf>,
    /// Read every object the config watches from the cluster instead (with the config's own
    /// selectors), through the kubeconfig.
    #[arg(long, conflicts_with = "inputs")]
    pub cluster: bool,
    /// The kubeconfig for --cluster (default: KUBECONFIG, then ~/.kube/config).
    #[arg(long, requires = "cluster")]
    pub kubeconfig: Option<PathBuf>,
    /// The HAProxyTemplateConfig to judge with (default: the embedded Ingress library).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
    /// Keep each Ingress's own class instead of taking every one as the config's.
    #[arg(long)]
    pub keep_class: bool,
    /// Output format.
    #[arg(short = 'o', long = "output", value_enum, default_value = "text")]
    pub output: MigrateOutput,
    /// The haproxy binary whose version the render is for.
    #[arg(long, default_value_t = installed_haproxy(), env = "HAPROXY_BIN")]
    pub haproxy_bin: String,
    #[command(flatten)]
    pub versions: VersionArgs,
}

/// Output format of `haptor migrate`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum MigrateOutput {
    Text,
    Json,
}

#[derive(Debug, clap::Args)]
pub struct AnnotationsArgs {
    /// The HAProxyTemplateConfig whose annotations to describe (default: the embedded
    /// Ingress library).
    #[arg(short = 'f', long = "file")]
    pub file: Option<PathBuf>,
}

/// Format of `lint --dump`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum DumpFormat {
    Json,
}

/// Runs a parsed command line and returns the process exit code. `log_level` changes the
/// level of the logging `main` installed (`None` when none was), for `haptor local`'s
/// `logging.level`.
pub fn execute(cli: Cli, log_level: Option<LogLevelHandle>) -> ExitCode {
    match cli.command {
        Command::Crd => offline::print_crds(),
        Command::Migrate(args) => migrate::migrate(&args),
        Command::Annotations(args) => migrate::annotations(args.file.as_deref()),
        Command::Version => {
            print_version();
            ExitCode::SUCCESS
        }
        Command::Validate(args) => offline::validate(&args),
        Command::Render(args) => offline::render(&args),
        Command::Bench(args) => render_report::bench(&args),
        Command::Lint(args) => offline::lint(&args),
        Command::Plan(args) => offline::plan(&args),
        Command::Run(args) => run_in_cluster(*args, log_level),
        Command::Local(args) => run_local(args, log_level),
    }
}

/// `haptor version`: the package version, the commit and target it was built from and for
/// (`build.rs`), and the `haproxy -c` checker commands run by default (`HAPROXY_BIN`, else
/// the haproxy found) with the version it reports, or why there is none.
fn print_version() {
    outln!("haptor {}", env!("CARGO_PKG_VERSION"));
    outln!(
        "commit: {}",
        option_env!("HAPTOR_GIT_COMMIT").unwrap_or("unknown")
    );
    outln!(
        "built for: {}",
        option_env!("HAPTOR_BUILD_TARGET").unwrap_or("unknown")
    );
    let binary = std::env::var("HAPROXY_BIN")
        .ok()
        .filter(|b| !b.trim().is_empty())
        .unwrap_or_else(installed_haproxy);
    match crate::drivers::haproxy_check::reported_version(std::path::Path::new(&binary)) {
        Ok(version) => outln!("haproxy -c checker: {binary} (HAProxy {version})"),
        Err(error) => outln!("haproxy -c checker: none: {error}"),
    }
}

/// Where `haptor run` takes the address of served Ingresses from.
fn publish_address(
    addresses: &[String],
    service: Option<&str>,
) -> Result<crate::drivers::kube::ingress_status::PublishAddress, String> {
    use crate::drivers::kube::ingress_status::PublishAddress;
    if let Some(service) = service {
        return match service.split_once('/') {
            Some((namespace, name))
                if !namespace.is_empty() && !name.is_empty() && !name.contains('/') =>
            {
                Ok(PublishAddress::Service {
                    namespace: namespace.to_string(),
                    name: name.to_string(),
                })
            }
            _ => Err(format!(
                "--publish-service '{service}' is not NAMESPACE/NAME"
            )),
        };
    }
    if addresses.is_empty() {
        return Ok(PublishAddress::Nothing);
    }
    crate::pure::ingress_status::parse_publish_addresses(addresses).map(PublishAddress::Fixed)
}

fn run_in_cluster(args: RunArgs, log_level: Option<LogLevelHandle>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("haptor run: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_UNUSABLE);
        }
    };
    let publish = match publish_address(&args.publish_address, args.publish_service.as_deref()) {
        Ok(publish) => publish,
        Err(problem) => {
            eprintln!("haptor run: {problem}");
            return ExitCode::from(EXIT_UNUSABLE);
        }
    };
    let options = crate::run::RunOptions {
        config_name: args.config_name,
        publish,
        namespace: args.namespace,
        kubeconfig: args.kubeconfig,
        metrics_addr: args.metrics_addr,
        debug_addr: args.debug_addr,
        health_addr: args.health_addr,
        haproxy_version: args.versions.target(&args.haproxy_bin),
        haproxy_checkers: args.versions.haproxy_checkers,
        haproxy_bin: args.haproxy_bin,
        identity: args.identity,
        log_level,
        watch_namespace: args.watch_namespace.filter(|n| !n.is_empty()),
        fault_injection: args.debug_fault_injection,
        shutdown_delay: args.shutdown_delay,
        webhook: match (
            args.webhook_cert_file,
            args.webhook_key_file,
            args.webhook_self_issued_secret,
            args.webhook_service,
        ) {
            (Some(cert_file), Some(key_file), _, _) => {
                Some(crate::run::WebhookCertificate::Files {
                    cert_file,
                    key_file,
                })
            }
            (_, _, Some(secret), Some(service)) => {
                Some(crate::run::WebhookCertificate::SelfIssued {
                    secret,
                    service,
                    configuration: args.webhook_configuration,
                })
            }
            _ => None,
        }
        .map(|certificate| crate::run::WebhookOptions {
            addr: args.webhook_addr,
            certificate,
            timeout: args.webhook_timeout,
            failure_policy: args.webhook_failure_policy.parse().unwrap_or_default(),
        }),
        create_credentials_secret: args.create_credentials_secret.filter(|n| !n.is_empty()),
        default_certificate_secret: args.default_certificate_secret.filter(|n| !n.is_empty()),
    };
    match runtime.block_on(crate::run::run(
        options,
        crate::local::run::shutdown_signal(),
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("haptor run: {e}");
            ExitCode::from(EXIT_UNUSABLE)
        }
    }
}

fn run_local(args: LocalArgs, log_level: Option<LogLevelHandle>) -> ExitCode {
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("haptor local: cannot start the async runtime: {e}");
            return ExitCode::from(EXIT_UNUSABLE);
        }
    };
    let options = crate::local::run::LocalOptions {
        dir: args.dir,
        work_dir: args.work_dir,
        metrics_addr: args.metrics_addr,
        debug_addr: args.debug_addr,
        haproxy_bin: args.haproxy_bin,
        log_level,
        default_certificate: args
            .default_certificate
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .map(|(ns, name)| (ns.to_string(), name.to_string())),
    };
    match runtime.block_on(crate::local::run::run(
        options,
        crate::local::run::shutdown_signal(),
    )) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("haptor local: {e}");
            ExitCode::from(EXIT_UNUSABLE)
        }
    }
}
