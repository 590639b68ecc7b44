//! The Data Plane API v3 deploy target: brings one HAProxy pod to a rendered configuration
//! through its Data Plane API (`http://<pod-ip>:<port>/v3`, HTTP Basic auth), executing the
//! [`plan`](crate::pure::deploy::plan::plan) from what the pod runs to the render, so `haptor plan` and a
//! deployment agree on what needs a reload.
//!
//! A deployment:
//! 1. fences in memory: a request from an epoch lower than the highest this target accepted
//!    is refused before any request is sent, and the same epoch with an older generation is
//!    stale;
//! 2. reads `/v3/info` once and refuses APIs older than [`ApiVersion::MINIMUM`] (v3.2.0),
//!    naming the version needed (a build without version flags, ` dev.dirty`, is deployed
//!    to as the oldest supported version, with a warning); when the settings name the
//!    HAProxy version renders are validated for ([`DataplaneSettings::haproxy_version`]),
//!    reads the pod's from `/v3/services/haproxy/runtime/info` once and refuses a pod whose
//!    major.minor differs (`/v3/info` describes the API and the system, not HAProxy);
//! 3. fences on the pod: the epoch is also kept in the general storage file [`EPOCH_FILE`],
//!    read back before every deployment and raised when a newer leader arrives, so a
//!    restarted controller, or a deposed leader in another process, is refused by the pod
//!    too. The storage API has no compare-and-swap: two leaders writing in the same instant
//!    can both pass, a window the leader lease keeps to one deployment at most;
//! 4. plans from the render it last deployed. When it knows none (a restarted controller, a
//!    new leader), the general storage file [`DEPLOYED_FILE`] that every deployment leaves
//!    on the pod names the render the pod runs and the API's checksum of the `haproxy.cfg`
//!    it left: while the pod's checksum is still that one and the request is that render,
//!    the pod is up to date and nothing is written (0 reloads after a restart). When the
//!    request is another render (the endpoints moved while no one led), the pod's render is
//!    rebuilt from the record: [`DEPLOYED_CONFIG_FILE`] keeps its `haproxy.cfg` as rendered,
//!    the record lists its files' checksums (the request's own files where they match, maps
//!    and general files read back where not), and it is used only when its checksum is the
//!    recorded one; the change is then planned from it, live where it can be. Otherwise it
//!    plans from the pod's `haproxy.cfg` with no auxiliary files known, so every file is
//!    written and HAProxy reloads;
//! 5. for a plan without reload: writes the changed map files (`skip_reload`), writes
//!    `haproxy.cfg` with `skip_reload` so a later reload keeps the changes, then applies them
//!    live: servers through `PUT /runtime/backends/{b}/servers/{s}` (address, port and weight
//!    need API v3.3.1; older v3 APIs get them as `X-Runtime-Actions` on the configuration
//!    push), map entries through `/runtime/maps/{map}/entries`. A change the runtime API
//!    cannot express, one HAProxy refuses (the API's 500 carrying HAProxy's `[N]` answer,
//!    e.g. a weight on a `balance source` backend, or a failed `X-Runtime-Actions` action
//!    after the file was stored), or a `haproxy.cfg` changed by someone else, turns the
//!    deployment into a reload at once;
//! 6. otherwise: uploads maps, certificates and general files (create, or replace with
//!    `skip_reload`), pushes `haproxy.cfg` with `?version=N` (a 409, or a 406, re-reads the
//!    version and retries, a bounded number of times; the API answers a stale version 409, and
//!    406 when another commit outdated the push's own transaction), waits for the queued
//!    reload through its `Reload-ID`, then for a worker other than the one that served
//!    before the push to answer the runtime API (`pid` of `/runtime/info`): the API reports
//!    a reload `succeeded` when its reload command exits 0, which a command that only
//!    signals HAProxy does before the new worker serves, and even when HAProxy refused the
//!    configuration. Only then are files the render no longer has deleted (the API refuses
//!    to delete a file the configuration still names, and a failed reload restores the old
//!    one);
//! 7. records the render in [`DEPLOYED_FILE`] when it changed.
//!
//! A deployment that fails half way leaves the target not knowing what the pod runs: the
//! next one plans from the pod's `haproxy.cfg` and reloads.
//!
//! Connection failures, timeouts, refused credentials and 5xx answers with no known meaning
//! are [`DeployError::Unreachable`]; other 4xx answers, failed or unconfirmed reloads and
//! content the API refuses (a certificate it cannot parse, or without its key: a 500 whose
//! message says so) are [`DeployError::Rejected`], naming the file and with the API's own
//! message. File names are the API's own: every auxiliary path is named as the API stores
//! an upload ([`crate::pure::rendered::storage_file_name`]), and a file named otherwise is
//! refused before anything is written.
//!
//! What the real API (v3.4.0, `tests/real_dataplaneapi/dataplane_api.rs`) does that a naive client trips on:
//! it prints the configuration it stores again through its own parser, so the text read
//! back never equals the render and the pod's file is recognised by the API's
//! `Configuration-Checksum` as the push answered it; and its runtime map endpoints find a
//! map by `<maps_dir>/<name>.map` while HAProxy knows it by the path the configuration wrote,
//! so entries go to the `storage_name` `GET /runtime/maps?include_unmanaged=true` lists for
//! the loaded map, and a map it lists without one is changed by a reload.
//!
//! Limitations: [`DeployTarget::deployed_checksum`] reads the pod's `haproxy.cfg` and
//! combines it with the auxiliary files this target last deployed, so a map or certificate
//! changed on the pod behind haptor's back goes unnoticed. Map entries added live go to the
//! end of the map: exact-match maps (`map`, `map_str`, the usual host map) behave as after a
//! reload, first-match maps (`map_beg`, `map_reg`, ...) see the new entries last until the
//! next reload. A controller that restarts while the render changes costs one reload per
//! pod whose render has auxiliary files (the record names the render, not its files), and
//! forgets files that an earlier render left behind.

mod api;

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use futures::future::BoxFuture;
use reqwest::Url;
use serde_json::Value;

use self::api::{Answer, Api, ApiError};
use crate::pure::checksum::legacy_checksum;
use crate::pure::deploy::dataplane::{
    ApiVersion, CertificateCall, DeployedMarker, LiveChanges, Placement, ReportedApiVersion,
    StorageKind, is_content_refusal, is_runtime_action_failure, is_runtime_refusal, live_changes,
    loaded_map_reference, placement, placements, runs_pushed, strip_version_lines,
};
use crate::pure::deploy::fence::Fence;
use crate::pure::deploy::plan::{DeploymentPlan, Operation, plan};
use crate::pure::deploy::{DeployError, DeployOutcome, DeployRequest, DeployTarget, ReloadReason};
use crate::pure::haproxy::HaproxyVersion;
use crate::pure::rendered::{AuxFile, Checksum, RenderedConfig};

pub use crate::pure::deploy::dataplane::{DEPLOYED_CONFIG_FILE, DEPLOYED_FILE, EPOCH_FILE};

/// How long the runtime API may stay silent after a reload before the reload is taken as
/// done on the API's word alone (see `DataplaneTarget::wait_for_new_worker`).
const UNCONFIRMED_GRACE: Duration = Duration::from_secs(3);

/// How to reach one pod's Data Plane API and how long to wait for it.
#[derive(Clone)]
pub struct DataplaneSettings {
    /// `http://<pod-ip>:<port>`; a trailing `/v3` is accepted and not doubled.
    pub url: String,
    pub username: String,
    pub password: String,
    /// Time to establish a connection.
    pub connect_timeout: Duration,
    /// Time for one request, answer included (a configuration push runs `haproxy -c`).
    pub request_timeout: Duration,
    /// Time for a queued reload to finish; the API waits `reload_delay` (5 s by default)
    /// before it reloads, so keep this well above that plus HAProxy's start time.
    pub reload_timeout: Duration,
    /// Pause between two reload status polls.
    pub reload_poll_interval: Duration,
    /// How many times a configuration push is retried after a version conflict.
    pub max_version_retries: u32,
    /// The HAProxy version (major.minor) renders are validated for: a pod reporting
    /// another is not deployed to. `None` (the default): not asked.
    pub haproxy_version: Option<HaproxyVersion>,
}

impl DataplaneSettings {
    /// Settings with default timeouts: connect 3 s, request 30 s, reload 60 s polled every
    /// 500 ms, 3 retries after version conflicts.
    pub fn new(
        url: impl Into<String>,
        username: impl Into<String>,
        password: impl Into<String>,
    ) -> DataplaneSettings {
        DataplaneSettings {
            url: url.into(),
            username: username.into(),
            password: password.into(),
            connect_timeout: Duration::from_secs(3),
            request_timeout: Duration::from_secs(30),
            reload_timeout: Duration::from_secs(60),
            reload_poll_interval: Duration::from_millis(500),
            max_version_retries: 3,
            haproxy_version: None,
        }
    }

    /// The API base, `…/v3`.
    pub fn base_url(&self) -> Result<Url, DataplaneSetupError> {
        let invalid = |reason: &str| DataplaneSetupError::InvalidUrl {
            url: self.url.clone(),
            reason: reason.to_string(),
        };
        let mut url = Url::parse(self.url.trim()).map_err(|e| invalid(&e.to_string()))?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(invalid("the scheme must be http or https"));
        }
        if url.host_str().is_none_or(str::is_empty) {
            return Err(invalid("it names no host"));
        }
        url.set_query(None);
        url.set_fragment(None);
        let path = url.path().trim_end_matches('/');
        let path = path.strip_suffix("/v3").unwrap_or(path);
        let path = format!("{path}/v3");
        url.set_path(&path);
        Ok(url)
    }
}

impl fmt::Debug for DataplaneSettings {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataplaneSettings")
            .field("url", &self.url)
            .field("username", &self.username)
            .field("password", &"<redacted>")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .field("reload_timeout", &self.reload_timeout)
            .field("reload_poll_interval", &self.reload_poll_interval)
            .field("max_version_retries", &self.max_version_retries)
            .field("haproxy_version", &self.haproxy_version)
            .finish()
    }
}

/// A [`DataplaneTarget`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DataplaneSetupError {
    #[error(
        "Data Plane API URL '{url}' is not usable: {reason} (expected http://<pod-ip>:<port>, e.g. http://10.0.0.5:5555)"
    )]
    InvalidUrl { url: String, reason: String },
    #[error("cannot build the HTTP client for the Data Plane API at {url}: {reason}")]
    Client { url: String, reason: String },
}

/// What the target remembers between deployments.
#[derive(Debug, Default)]
struct TargetState {
    api_version: Option<ApiVersion>,
    /// The pod reported the expected HAProxy version.
    haproxy_version_confirmed: bool,
    /// The epoch and generation accepted (the epoch also kept on the pod, [`EPOCH_FILE`]).
    fence: Fence,
    /// The render the pod runs, when this target knows it, and its checksum.
    last_deployed: Option<Arc<RenderedConfig>>,
    last_checksum: Option<Checksum>,
    /// The API's checksum of the `haproxy.cfg` haptor last pushed, as the push answered it:
    /// the API rewrites the text, so this is how the pod's file is recognised as ours.
    pushed_checksum: Option<String>,
    /// A deployment stopped half way: the next one reloads whatever its plan says.
    reload_required: bool,
    /// Files of earlier renders whose deletion failed, by auxiliary path.
    pending_deletions: BTreeMap<String, Placement>,
    /// The [`DEPLOYED_FILE`] record as this target last wrote or read it.
    recorded: Option<DeployedMarker>,
}

/// The outcome of applying a plan without a reload.
enum Live {
    Applied,
    /// The runtime API cannot finish the job; a reload will.
    NeedsReload(String),
}

/// The outcome of a configuration push.
enum Pushed {
    Done(Answer),
    /// The pod's configuration is not the one the runtime changes were planned from.
    ChangedUnderneath,
    /// The API stored the configuration, then an `X-Runtime-Actions` action failed: the
    /// API's message.
    ActionRefused(String),
}

/// One HAProxy pod reached through its Data Plane API v3.
pub struct DataplaneTarget {
    name: String,
    api: Api,
    reload_timeout: Duration,
    reload_poll_interval: Duration,
    max_version_retries: u32,
    haproxy_version: Option<HaproxyVersion>,
    /// Deployments to one pod run one at a time.
    deploy_lock: tokio::sync::Mutex<()>,
    state: Mutex<TargetState>,
}

impl fmt::Debug for DataplaneTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DataplaneTarget")
            .field("name", &self.name)
            .field("api", &self.api)
            .finish_non_exhaustive()
    }
}

impl DataplaneTarget {
    /// A target named `name` (the pod's name) for the API `settings` describe. Nothing is
    /// sent until the first deployment.
    pub fn new(
        name: impl Into<String>,
        settings: DataplaneSettings,
    ) -> Result<DataplaneTarget, DataplaneSetupError> {
        let base = settings.base_url()?;
        let api = Api::new(
            base.clone(),
            settings.username.clone(),
            settings.password.clone(),
            settings.connect_timeout,
            settings.request_timeout,
        )
        .map_err(|reason| DataplaneSetupError::Client {
            url: base.to_string(),
            reason,
        })?;
        Ok(DataplaneTarget {
            name: name.into(),
            api,
            reload_timeout: settings.reload_timeout,
            reload_poll_interval: settings.reload_poll_interval,
            max_version_retries: settings.max_version_retries,
            haproxy_version: settings.haproxy_version,
            deploy_lock: tokio::sync::Mutex::new(()),
            state: Mutex::default(),
        })
    }

    /// The API base URL, `…/v3`.
    pub fn base_url(&self) -> &str {
        self.api.base()
    }

    fn lock(&self) -> MutexGuard<'_, TargetState> {
        // The state is plain data updated in single statements; a panic elsewhere leaves it
        // consistent.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Turns an API failure at step `doing` into the deploy error it means.
    fn failure(&self, doing: &str, error: ApiError) -> DeployError {
        let at = format!("{} ({})", self.name, self.api.base());
        match error {
            ApiError::Transport(reason) => {
                DeployError::Unreachable(format!("{at}: {doing}: {reason}"))
            }
            ApiError::Status {
                status: status @ (401 | 403),
                message,
            } => DeployError::Unreachable(format!(
                "{at}: the Data Plane API refused the credentials of user '{}' while {doing} (HTTP {status}: {message}); check the Data Plane API username and password",
                self.api.username()
            )),
            ApiError::Status { status, message } if status >= 500 => {
                DeployError::Unreachable(format!("{at}: {doing}: HTTP {status}: {message}"))
            }
            ApiError::Status { status, message } => {
                DeployError::Rejected(format!("{at}: {doing}: HTTP {status}: {message}"))
            }
        }
    }

    /// Epoch fencing and generation ordering against what this target accepted, with no I/O.
    fn fence_in_memory(&self, request: &DeployRequest) -> Result<(), DeployError> {
        self.lock().fence.admit(request)
    }

    /// Epoch fencing against the epoch kept on the pod; raises it for a newer leader and
    /// records the request as accepted.
    async fn fence_on_instance(&self, request: &DeployRequest) -> Result<(), DeployError> {
        let doing = "reading the fencing epoch";
        let stored = self
            .api
            .storage_read(StorageKind::General, EPOCH_FILE)
            .await
            .map_err(|e| self.failure(doing, e))?;
        let stored_epoch = match stored.as_deref().map(str::trim) {
            None => None,
            Some(text) => match text.parse::<u64>() {
                Ok(epoch) => Some(epoch),
                Err(_) => {
                    tracing::warn!(target_name = %self.name, content = text, "the fencing epoch file holds no number; overwriting it");
                    None
                }
            },
        };
        if let Some(stored_epoch) = stored_epoch {
            let mut state = self.lock();
            state.fence.learn(stored_epoch);
            state.fence.admit(request)?;
        }
        if stored_epoch != Some(request.epoch) {
            self.write_epoch(request.epoch, stored.is_some()).await?;
        }
        self.lock().fence.accept(request);
        Ok(())
    }

    async fn write_epoch(&self, epoch: u64, exists: bool) -> Result<(), DeployError> {
        let content = format!("{epoch}\n");
        let placement = Placement {
            kind: StorageKind::General,
            name: EPOCH_FILE.to_string(),
        };
        self.upload(&placement, &content, exists)
            .await
            .map_err(|e| self.failure("storing the fencing epoch", e))
    }

    /// The API version, read from `/v3/info` once.
    async fn api_version(&self) -> Result<ApiVersion, DeployError> {
        if let Some(version) = self.lock().api_version {
            return Ok(version);
        }
        let text = match self.api.info().await {
            Ok(text) => text,
            Err(ApiError::Status { status: 404, .. }) => {
                return Err(DeployError::Rejected(format!(
                    "{} ({}): there is no /v3/info (HTTP 404), so this is not a Data Plane API v3 (v2 serves /v2); haptor needs the Data Plane API v3 or later",
                    self.name,
                    self.api.base()
                )));
            }
            Err(e) => return Err(self.failure("reading /v3/info", e)),
        };
        let version = match ReportedApiVersion::read(&text) {
            Some(ReportedApiVersion::Release(version)) => version,
            Some(ReportedApiVersion::DevelopmentBuild) => {
                tracing::warn!(target_name = %self.name, reported = %text.trim(), assumed = %ApiVersion::MINIMUM, "the Data Plane API reports no release version (a build without the release's version flags); deploying as to the oldest version haptor supports");
                ApiVersion::MINIMUM
            }
            None => {
                return Err(DeployError::Rejected(format!(
                    "{} ({}): /v3/info reports the API version '{text}', which haptor cannot read",
                    self.name,
                    self.api.base()
                )));
            }
        };
        if version < ApiVersion::MINIMUM {
            return Err(DeployError::Rejected(format!(
                "{} ({}): the pod runs Data Plane API {version}; haptor needs {} or later (from {} on a certificate upload can skip the reload, so a deployment reloads HAProxy once, after its configuration)",
                self.name,
                self.api.base(),
                ApiVersion::MINIMUM,
                ApiVersion::MINIMUM
            )));
        }
        tracing::debug!(target_name = %self.name, %version, "data plane API version");
        self.lock().api_version = Some(version);
        Ok(version)
    }

    /// Confirms, once, that the pod runs the HAProxy version renders are validated for.
    async fn confirm_haproxy_version(&self) -> Result<(), DeployError> {
        let Some(expected) = self.haproxy_version else {
            return Ok(());
        };
        if self.lock().haproxy_version_confirmed {
            return Ok(());
        }
        let info = self
            .api
            .haproxy_info()
            .await
            .map_err(|e| self.failure("reading the HAProxy version", e))?;
        let at = format!("{} ({})", self.name, self.api.base());
        let Some(reported) = HaproxyVersion::from_dataplane_json(&info) else {
            return Err(DeployError::Rejected(format!(
                "{at}: /services/haproxy/runtime/info names no HAProxy version, so haptor cannot tell whether its renders (validated for HAProxy {expected}) suit this pod; not deployed"
            )));
        };
        if reported != expected {
            return Err(DeployError::Rejected(format!(
                "{at}: the pod runs HAProxy {reported}, but haptor validates renders for HAProxy {expected} (--haproxy-version, --haproxy-checker); not deployed, as a configuration checked with another version's haproxy -c may not load"
            )));
        }
        tracing::debug!(target_name = %self.name, haproxy = %reported, "HAProxy version confirmed");
        self.lock().haproxy_version_confirmed = true;
        Ok(())
    }

    /// What the pod runs, as far as its `haproxy.cfg` tells (`None` when it is empty), and
    /// the API's checksum of that file.
    async fn running_configuration(
        &self,
    ) -> Result<(Option<RenderedConfig>, Option<String>), DeployError> {
        let raw = self
            .api
            .raw_configuration()
            .await
            .map_err(|e| self.failure("reading haproxy.cfg", e))?;
        let text = strip_version_lines(&raw.text);
        let running = (!text.trim().is_empty()).then(|| RenderedConfig {
            haproxy_cfg: text.to_string(),
            aux_files: BTreeMap::new(),
            ..Default::default()
        });
        Ok((running, raw.checksum))
    }

    /// The [`DEPLOYED_FILE`] record on the pod, if it holds one this target can read.
    async fn read_record(&self) -> Result<Option<DeployedMarker>, DeployError> {
        let text = self
            .api
            .storage_read(StorageKind::General, DEPLOYED_FILE)
            .await
            .map_err(|e| self.failure("reading the deployed-render record", e))?;
        let record = text.as_deref().and_then(DeployedMarker::parse);
        if text.is_some() && record.is_none() {
            tracing::warn!(target_name = %self.name, file = DEPLOYED_FILE, "the deployed-render record cannot be read; the next deployment reloads and writes it again");
        }
        self.lock().recorded = record.clone();
        Ok(record)
    }

    /// The render `record` names, rebuilt: its `haproxy.cfg` from [`DEPLOYED_CONFIG_FILE`],
    /// its files from the record (see [`Self::recorded_files`]), and kept only when its
    /// checksum is the recorded one — as haptor computes it now, or as an earlier haptor did
    /// ([`legacy_checksum`]: a record written before an upgrade still names the render the
    /// pod runs, so the upgrade reloads nothing). `None` when it cannot be: the pod is
    /// planned as unknown.
    async fn recorded_render(
        &self,
        record: &DeployedMarker,
        to: &RenderedConfig,
    ) -> Option<RenderedConfig> {
        let haproxy_cfg = self
            .api
            .storage_read(StorageKind::General, DEPLOYED_CONFIG_FILE)
            .await
            .ok()??;
        let deployed = RenderedConfig {
            haproxy_cfg,
            aux_files: self.recorded_files(record, to).await?,
            ..Default::default()
        };
        (deployed.checksum() == record.render || legacy_checksum(&deployed) == record.render)
            .then_some(deployed)
    }

    /// The auxiliary files the pod holds as `record` lists them: those `to` has unchanged,
    /// and maps and general files that changed read back from the pod's storage (each must
    /// match the record's checksum). `None` when one is not known that way (a certificate
    /// that changed, a file `to` no longer has).
    async fn recorded_files(
        &self,
        record: &DeployedMarker,
        to: &RenderedConfig,
    ) -> Option<BTreeMap<String, AuxFile>> {
        let (mut files, unknown) = record.files_known_in(to);
        for path in unknown {
            let file = to.aux_files.get(&path)?;
            let place = placement(file).ok()?;
            if place.kind == StorageKind::SslCertificates {
                return None;
            }
            let content = self
                .api
                .storage_read(place.kind, &place.name)
                .await
                .ok()??;
            if Some(&Checksum::of(content.as_bytes())) != record.files.get(&path) {
                return None;
            }
            files.insert(
                path,
                AuxFile {
                    content,
                    ..file.clone()
                },
            );
        }
        Some(files)
    }

    /// Writes the [`DEPLOYED_FILE`] record for the render just deployed, when it differs
    /// from the one on the pod. A failure costs one reload after the next restart, not this
    /// deployment: it is logged.
    async fn write_record(&self, request: &DeployRequest) {
        let (record, exists) = {
            let state = self.lock();
            let Some(configuration) = state.pushed_checksum.clone() else {
                return;
            };
            let record = DeployedMarker::of(request.checksum, configuration, &request.rendered);
            if state.recorded.as_ref() == Some(&record) {
                return;
            }
            (record, state.recorded.is_some())
        };
        // The render's haproxy.cfg first: a record is only ever read with its copy in place
        // (and a copy that does not match it fails the checksum, which costs a reload).
        let copy = Placement {
            kind: StorageKind::General,
            name: DEPLOYED_CONFIG_FILE.to_string(),
        };
        if let Err(error) = self
            .upload(&copy, &request.rendered.haproxy_cfg, exists)
            .await
        {
            tracing::warn!(target_name = %self.name, %error, "cannot keep the deployed haproxy.cfg on the pod; a new leader with another render will reload this pod once");
        }
        let placement = Placement {
            kind: StorageKind::General,
            name: DEPLOYED_FILE.to_string(),
        };
        match self.upload(&placement, &record.to_text(), exists).await {
            Ok(()) => self.lock().recorded = Some(record),
            Err(error) => {
                tracing::warn!(target_name = %self.name, %error, "cannot record the deployed render on the pod; a restarted controller will reload this pod once");
            }
        }
    }

    async fn run_deploy(&self, request: &DeployRequest) -> Result<DeployOutcome, DeployError> {
        self.fence_in_memory(request)?;
        let _one_at_a_time = self.deploy_lock.lock().await;
        self.fence_in_memory(request)?;
        let version = self.api_version().await?;
        self.confirm_haproxy_version().await?;
        self.fence_on_instance(request).await?;

        let to = &request.rendered;
        let placements = placements(to).map_err(|reason| {
            DeployError::Rejected(format!("{} ({}): {reason}", self.name, self.api.base()))
        })?;
        let (known, reload_required) = {
            let state = self.lock();
            (state.last_deployed.clone(), state.reload_required)
        };
        let mut planned_from_the_pod = known.is_none();
        let from = match known {
            Some(known) => Some(known),
            None => {
                // A restarted controller, a new leader, or a deployment that stopped half
                // way: the pod's record tells whether it already runs this render.
                let record = self.read_record().await?;
                let (running, live_checksum) = self.running_configuration().await?;
                let recorded = record.filter(|record| {
                    !reload_required && record.still_runs(live_checksum.as_deref())
                });
                if let Some(record) = &recorded
                    && record.render == request.checksum
                {
                    tracing::info!(target_name = %self.name, render = %record.render, "the pod already runs this render (its deployed-render record and configuration checksum say so)");
                    self.lock().pushed_checksum = Some(record.configuration.clone());
                    self.remember(request);
                    return Ok(DeployOutcome {
                        unchanged: true,
                        ..DeployOutcome::default()
                    });
                }
                match (recorded, running) {
                    // The pod runs the recorded render: its haproxy.cfg is the running one and
                    // its files those the record lists, so the change is planned as it would be
                    // by the controller that deployed it (live where it can be).
                    (Some(record), Some(running)) => {
                        match self.recorded_render(&record, to).await {
                            Some(deployed) => {
                                tracing::info!(target_name = %self.name, recorded = %record.render, render = %request.checksum, "the pod runs the render its record names; planning the change from it");
                                planned_from_the_pod = false;
                                self.lock().pushed_checksum = Some(record.configuration.clone());
                                Some(Arc::new(deployed))
                            }
                            None => Some(Arc::new(running)),
                        }
                    }
                    (_, running) => running.map(Arc::new),
                }
            }
        };
        let plan = plan(from.as_deref(), to).map_err(|e| {
            DeployError::Rejected(format!("{} ({}): {e}", self.name, self.api.base()))
        })?;
        // Remembered before anything is written, so a deployment that fails half way still
        // deletes them once a later one succeeds.
        let orphans = self.orphans(from.as_deref(), &plan, &placements);
        self.lock().pending_deletions = orphans.clone();

        if plan.is_empty() && !reload_required {
            self.delete_orphans(orphans).await;
            self.remember(request);
            self.write_record(request).await;
            return Ok(DeployOutcome {
                unchanged: true,
                ..DeployOutcome::default()
            });
        }

        // From here on the pod is being changed; until this deployment ends well, what it
        // runs is unknown and the next deployment reloads.
        {
            let mut state = self.lock();
            state.last_deployed = None;
            state.last_checksum = None;
            state.reload_required = true;
        }
        let mut written = BTreeSet::new();
        let mut reload_reason = if planned_from_the_pod || reload_required {
            ReloadReason::StateUnknown
        } else {
            ReloadReason::Structural
        };
        let live_from = from.as_deref().filter(|_| !plan.reload && !reload_required);
        let mut live_outcome = None;
        if let Some(live_from) = live_from {
            let reason = match live_changes(&plan, live_from, &placements, version) {
                Ok(changes) => match self
                    .apply_live(live_from, to, &plan, &changes, &placements, &mut written)
                    .await?
                {
                    Live::Applied => {
                        for removed in &plan.removed_backends {
                            tracing::info!(target_name = %self.name, generation = request.generation, "{removed}");
                        }
                        live_outcome = Some(DeployOutcome {
                            runtime_changes: changes.count,
                            ..DeployOutcome::default()
                        });
                        None
                    }
                    Live::NeedsReload(reason) => Some(reason),
                },
                Err(reason) => Some(reason),
            };
            if let Some(reason) = reason {
                tracing::info!(target_name = %self.name, %reason, "reloading instead of runtime changes");
                reload_reason = ReloadReason::RuntimeRefused;
            }
        }
        let outcome = match live_outcome {
            Some(outcome) => outcome,
            None => {
                self.apply_with_reload(
                    request,
                    reload_reason,
                    from.as_deref(),
                    &plan,
                    &placements,
                    &mut written,
                )
                .await?
            }
        };
        self.delete_orphans(orphans).await;
        self.remember(request);
        self.write_record(request).await;
        Ok(outcome)
    }

    /// Records a finished deployment.
    fn remember(&self, request: &DeployRequest) {
        let mut state = self.lock();
        state.last_deployed = Some(request.rendered.clone());
        state.last_checksum = Some(request.checksum);
        state.reload_required = false;
    }

    /// Files to delete after this deployment: those the plan drops and those an earlier
    /// deletion left behind, unless the new render stores something under the same name.
    fn orphans(
        &self,
        from: Option<&RenderedConfig>,
        plan: &DeploymentPlan,
        placements: &BTreeMap<String, Placement>,
    ) -> BTreeMap<String, Placement> {
        let mut orphans = self.lock().pending_deletions.clone();
        if let Some(from) = from {
            for op in &plan.operations {
                if let Operation::DeleteFile { path } = op
                    && let Some(file) = from.aux_files.get(path)
                    && let Ok(placement) = placement(file)
                {
                    orphans.insert(path.clone(), placement);
                }
            }
        }
        orphans.retain(|path, placement| {
            !placements.contains_key(path) && !placements.values().any(|p| p == placement)
        });
        orphans
    }

    /// Deletes orphaned files; a failure is logged and retried after the next deployment.
    async fn delete_orphans(&self, orphans: BTreeMap<String, Placement>) {
        let mut failed = BTreeMap::new();
        for (path, placement) in orphans {
            match self
                .api
                .storage_delete(placement.kind, &placement.name)
                .await
            {
                Ok(()) => tracing::debug!(target_name = %self.name, %path, "deleted"),
                Err(error) => {
                    tracing::warn!(target_name = %self.name, %path, %error, "cannot delete a file the render no longer has; retrying after the next deployment");
                    failed.insert(path, placement);
                }
            }
        }
        self.lock().pending_deletions = failed;
    }

    /// Creates or replaces one storage file; `probably_exists` picks which to try first.
    async fn upload(
        &self,
        placement: &Placement,
        content: &str,
        probably_exists: bool,
    ) -> Result<(), ApiError> {
        let (kind, name) = (placement.kind, placement.name.as_str());
        if probably_exists && self.api.storage_replace(kind, name, content).await? {
            return Ok(());
        }
        if self.api.storage_create(kind, name, content).await? {
            return Ok(());
        }
        // It exists after all (409 on create).
        if self.api.storage_replace(kind, name, content).await? {
            return Ok(());
        }
        Err(ApiError::Status {
            status: 409,
            message: format!(
                "{kind} file '{name}' was reported both existing and missing; another writer is changing it"
            ),
        })
    }

    /// Uploads the auxiliary files the plan writes and that this deployment did not write yet.
    async fn upload_planned(
        &self,
        from: Option<&RenderedConfig>,
        to: &RenderedConfig,
        plan: &DeploymentPlan,
        placements: &BTreeMap<String, Placement>,
        written: &mut BTreeSet<String>,
    ) -> Result<(), DeployError> {
        for op in &plan.operations {
            let Operation::WriteFile { path } = op else {
                continue;
            };
            if written.contains(path) {
                continue;
            }
            let (Some(file), Some(placement)) = (to.aux_files.get(path), placements.get(path))
            else {
                continue;
            };
            let exists = from.is_some_and(|f| f.aux_files.contains_key(path));
            self.upload(placement, &file.content, exists)
                .await
                .map_err(|e| match e {
                    ApiError::Status { status, message }
                        if is_content_refusal(placement.kind, status, &message) =>
                    {
                        DeployError::Rejected(format!(
                            "{} ({}): the Data Plane API refused {} {path} (stored as {} file '{}'): HTTP {status}: {message}",
                            self.name,
                            self.api.base(),
                            file.kind,
                            placement.kind,
                            placement.name
                        ))
                    }
                    e => self.failure(
                        &format!("uploading {} {path} as {}", file.kind, placement.kind),
                        e,
                    ),
                })?;
            written.insert(path.clone());
        }
        Ok(())
    }

    /// Pushes `haproxy.cfg` with the current version, retrying after 409 (the version moved)
    /// and 406 (the write's base is outdated: start over from a fresh version). With
    /// `planned_from`, a conflict first checks that the pod still runs that text; if not,
    /// the push stops with [`Pushed::ChangedUnderneath`].
    async fn push(
        &self,
        text: &str,
        skip_reload: bool,
        runtime_actions: Option<&str>,
        planned_from: Option<&str>,
    ) -> Result<Pushed, DeployError> {
        let doing = "pushing haproxy.cfg";
        let mut version = self
            .api
            .configuration_version()
            .await
            .map_err(|e| self.failure("reading the configuration version", e))?;
        let mut last_conflict = String::new();
        for attempt in 0..=self.max_version_retries {
            match self
                .api
                .push_configuration(text, version, skip_reload, runtime_actions)
                .await
            {
                Ok(answer) => {
                    self.lock().pushed_checksum = answer.configuration_checksum();
                    return Ok(Pushed::Done(answer));
                }
                Err(ApiError::Status {
                    status: status @ (406 | 409),
                    message,
                }) => {
                    tracing::info!(target_name = %self.name, status, %message, attempt, "configuration push conflicted; re-reading the version");
                    last_conflict = format!("HTTP {status}: {message}");
                    version = match planned_from {
                        Some(expected) => {
                            let live = self
                                .api
                                .raw_configuration()
                                .await
                                .map_err(|e| self.failure("re-reading haproxy.cfg", e))?;
                            let pushed = self.lock().pushed_checksum.clone();
                            if !runs_pushed(
                                &live.text,
                                live.checksum.as_deref(),
                                expected,
                                pushed.as_deref(),
                            ) {
                                return Ok(Pushed::ChangedUnderneath);
                            }
                            match live.version {
                                Some(version) => version,
                                None => self.api.configuration_version().await.map_err(|e| {
                                    self.failure("re-reading the configuration version", e)
                                })?,
                            }
                        }
                        None => {
                            self.api.configuration_version().await.map_err(|e| {
                                self.failure("re-reading the configuration version", e)
                            })?
                        }
                    };
                }
                Err(ApiError::Status { status, message })
                    if runtime_actions.is_some() && is_runtime_action_failure(status, &message) =>
                {
                    return Ok(Pushed::ActionRefused(message));
                }
                Err(e) => return Err(self.failure(doing, e)),
            }
        }
        Err(DeployError::Rejected(format!(
            "{} ({}): {doing}: the configuration version changed under every one of {} attempts (another writer on this pod?); last answer: {last_conflict}",
            self.name,
            self.api.base(),
            self.max_version_retries + 1
        )))
    }

    /// The pid of the HAProxy worker that answers the runtime API now, or `None` when the
    /// API cannot say (no runtime socket, an older API): the reload is then confirmed by
    /// the API's word alone.
    async fn serving_worker(&self) -> Option<u64> {
        match self.api.haproxy_info().await {
            Ok(info) => worker_pid(&info),
            Err(error) => {
                tracing::debug!(target_name = %self.name, %error, "cannot read the serving worker; a reload is confirmed by the API alone");
                None
            }
        }
    }

    /// After the API reported reload `id` done: waits until a worker other than `before`
    /// answers the runtime API. A reload command that only signals HAProxy makes the API
    /// report success before the new worker serves, or when HAProxy refused the
    /// configuration and the old worker goes on; this tells the two apart. A runtime API
    /// that stops answering after the reload (a configuration without the stats socket)
    /// leaves the API's word: accepted with a warning once it has not answered for
    /// [`UNCONFIRMED_GRACE`].
    async fn wait_for_new_worker(
        &self,
        id: &str,
        before: u64,
        deadline: tokio::time::Instant,
    ) -> Result<(), DeployError> {
        let mut unanswered_since: Option<tokio::time::Instant> = None;
        loop {
            let now = self.serving_worker().await;
            match now {
                Some(pid) if pid != before => {
                    tracing::debug!(target_name = %self.name, reload_id = %id, old = before, new = pid, "reload confirmed: a new worker serves");
                    return Ok(());
                }
                Some(_) => unanswered_since = None,
                None => {
                    let since = *unanswered_since.get_or_insert_with(tokio::time::Instant::now);
                    if since.elapsed() >= UNCONFIRMED_GRACE {
                        tracing::warn!(target_name = %self.name, reload_id = %id, "the runtime API does not answer since the reload, so the new worker cannot be confirmed; taking the API's word that the reload succeeded");
                        return Ok(());
                    }
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(DeployError::Rejected(format!(
                    "{} ({}): reload {id} was reported succeeded, but HAProxy's worker {before} still serves, so the new configuration does not run (HAProxy may have refused it: see the haproxy container's log); the reload command must wait for the new worker and fail when HAProxy does, as the chart's reload.sh does",
                    self.name,
                    self.api.base()
                )));
            }
            tokio::time::sleep(self.reload_poll_interval).await;
        }
    }

    /// Polls a queued reload until it succeeds, fails or `deadline` passes.
    async fn wait_for_reload(
        &self,
        id: &str,
        deadline: tokio::time::Instant,
    ) -> Result<(), DeployError> {
        let at = format!("{} ({})", self.name, self.api.base());
        loop {
            let state = match self.api.reload(id).await {
                Ok(state) => state,
                Err(ApiError::Status { status: 404, .. }) => {
                    return Err(DeployError::Unreachable(format!(
                        "{at}: reload {id} is unknown to the API (it forgets reloads after --reload-retention); whether HAProxy took the configuration is unknown"
                    )));
                }
                Err(e) => return Err(self.failure(&format!("polling reload {id}"), e)),
            };
            match state.status.as_str() {
                "succeeded" => return Ok(()),
                "failed" => {
                    return Err(DeployError::Rejected(format!(
                        "{at}: HAProxy did not take the configuration: reload {id} failed (the API restored the previous configuration): {}",
                        state.response.trim()
                    )));
                }
                _ => {}
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(DeployError::Unreachable(format!(
                    "{at}: reload {id} is still '{}' after {:?}; the reload timeout must exceed the API's reload_delay (5 s by default) plus HAProxy's start time",
                    state.status, self.reload_timeout
                )));
            }
            tokio::time::sleep(self.reload_poll_interval).await;
        }
    }

    /// Files, then `haproxy.cfg` (queuing a reload), then waits for the reload.
    async fn apply_with_reload(
        &self,
        request: &DeployRequest,
        reason: ReloadReason,
        from: Option<&RenderedConfig>,
        plan: &DeploymentPlan,
        placements: &BTreeMap<String, Placement>,
        written: &mut BTreeSet<String>,
    ) -> Result<DeployOutcome, DeployError> {
        let to = &request.rendered;
        self.upload_planned(from, to, plan, placements, written)
            .await?;
        // The push triggers the reload even when haproxy.cfg itself is unchanged (only a
        // certificate changed, say).
        let worker_before = self.serving_worker().await;
        let Pushed::Done(answer) = self.push(&to.haproxy_cfg, false, None, None).await? else {
            // Without `planned_from` a push never reports a changed configuration.
            return Err(DeployError::Rejected(format!(
                "{} ({}): the configuration push ended without an answer",
                self.name,
                self.api.base()
            )));
        };
        let reloaded = match answer.reload_id() {
            Some(id) => {
                let deadline =
                    tokio::time::Instant::now() + self.reload_timeout.min(request.reload_wait());
                self.wait_for_reload(&id, deadline).await?;
                if let Some(before) = worker_before {
                    self.wait_for_new_worker(&id, before, deadline).await?;
                }
                true
            }
            None => {
                tracing::info!(target_name = %self.name, status = %answer.status, "the configuration push queued no reload");
                false
            }
        };
        Ok(DeployOutcome {
            reloaded,
            reload_reason: reloaded.then_some(reason),
            runtime_changes: 0,
            unchanged: false,
            degraded: None,
        })
    }

    /// Map files and `haproxy.cfg` without reload, then the runtime changes.
    async fn apply_live(
        &self,
        from: &RenderedConfig,
        to: &RenderedConfig,
        plan: &DeploymentPlan,
        changes: &LiveChanges,
        placements: &BTreeMap<String, Placement>,
        written: &mut BTreeSet<String>,
    ) -> Result<Live, DeployError> {
        self.upload_planned(Some(from), to, plan, placements, written)
            .await?;
        if plan.operations.contains(&Operation::WriteConfig) {
            let actions = (!changes.actions.is_empty()).then(|| changes.actions.join(";"));
            match self
                .push(
                    &to.haproxy_cfg,
                    true,
                    actions.as_deref(),
                    Some(&from.haproxy_cfg),
                )
                .await?
            {
                Pushed::Done(answer) => {
                    if let Some(id) = answer.reload_id() {
                        tracing::warn!(target_name = %self.name, reload_id = %id, "a push with skip_reload queued a reload");
                    }
                }
                Pushed::ChangedUnderneath => {
                    return Ok(Live::NeedsReload(
                        "haproxy.cfg on the pod changed behind haptor's back".into(),
                    ));
                }
                Pushed::ActionRefused(message) => {
                    return Ok(Live::NeedsReload(format!(
                        "HAProxy refused a runtime action of the configuration push ({message})"
                    )));
                }
            }
        }
        for (backend, server) in &changes.deleted_servers {
            let result = self.api.runtime_delete_server(backend, server).await;
            if let Some(reason) = self.refusal(&format!("server {backend}/{server}"), result)? {
                return Ok(Live::NeedsReload(reason));
            }
        }
        for ((backend, server), fields) in &changes.servers {
            let result = self
                .api
                .runtime_server(backend, server, Value::Object(fields.clone()))
                .await;
            if let Some(reason) = self.refusal(&format!("server {backend}/{server}"), result)? {
                return Ok(Live::NeedsReload(reason));
            }
        }
        for added in &changes.added_servers {
            let what = format!("server {}/{}", added.backend, added.server);
            let result = self
                .api
                .runtime_add_server(&added.backend, Value::Object(added.body.clone()))
                .await;
            if let Some(reason) = self.refusal(&what, result)? {
                return Ok(Live::NeedsReload(reason));
            }
            if added.ready {
                let ready = serde_json::json!({ "admin_state": "ready" });
                let result = self
                    .api
                    .runtime_server(&added.backend, &added.server, ready)
                    .await;
                if let Some(reason) = self.refusal(&what, result)? {
                    return Ok(Live::NeedsReload(reason));
                }
            }
        }
        for call in &changes.certificates {
            let (what, result) = match call {
                CertificateCall::Replace { name, pem } => (
                    format!("certificate {name}"),
                    self.api.runtime_certificate_replace(name, pem).await,
                ),
                CertificateCall::DeleteEntry { list, certificate } => (
                    format!("crt-list {list}"),
                    self.api
                        .runtime_crt_list_entry_delete(list, certificate)
                        .await,
                ),
                CertificateCall::Delete { name } => (
                    format!("certificate {name}"),
                    self.api.runtime_certificate_delete(name).await,
                ),
            };
            if let Some(reason) = self.refusal(&what, result)? {
                return Ok(Live::NeedsReload(reason));
            }
        }
        let loaded = if changes.maps.is_empty() {
            Vec::new()
        } else {
            match self.api.loaded_maps().await {
                Ok(loaded) => loaded,
                Err(e) => match self.refusal("the loaded maps", Err(e))? {
                    Some(reason) => return Ok(Live::NeedsReload(reason)),
                    None => Vec::new(),
                },
            }
        };
        for change in &changes.maps {
            let map = match loaded_map_reference(&loaded, &change.path) {
                Ok(map) => map,
                Err(reason) => return Ok(Live::NeedsReload(reason)),
            };
            let map = map.as_str();
            for (key, value) in &change.adds {
                let result = self.api.map_entry_add(map, key, value).await;
                if let Some(reason) = self.refusal(&format!("map {}", change.path), result)? {
                    return Ok(Live::NeedsReload(reason));
                }
            }
            for (key, value) in &change.sets {
                let result = self.api.map_entry_set(map, key, value).await;
                if let Some(reason) = self.refusal(&format!("map {}", change.path), result)? {
                    return Ok(Live::NeedsReload(reason));
                }
            }
            for key in &change.deletes {
                let result = self.api.map_entry_delete(map, key).await;
                if let Some(reason) = self.refusal(&format!("map {}", change.path), result)? {
                    return Ok(Live::NeedsReload(reason));
                }
            }
        }
        // A removed backend's servers, now that no map entry routes to it: the running
        // HAProxy keeps the backend empty until the next reload.
        for (backend, server) in &changes.emptied_servers {
            let result = self.api.runtime_delete_server(backend, server).await;
            if let Some(reason) = self.refusal(&format!("server {backend}/{server}"), result)? {
                return Ok(Live::NeedsReload(reason));
            }
        }
        Ok(Live::Applied)
    }

    /// A runtime call's result: `Ok(None)` when it worked, `Ok(Some(reason))` when the API
    /// refused it (a reload will do it instead), an error when the API cannot be used.
    fn refusal(
        &self,
        what: &str,
        result: Result<(), ApiError>,
    ) -> Result<Option<String>, DeployError> {
        match result {
            Ok(()) => Ok(None),
            Err(ApiError::Status { status, message }) if is_runtime_refusal(status, &message) => {
                Ok(Some(format!(
                    "the runtime API refused a change to {what} (HTTP {status}: {message})"
                )))
            }
            Err(e) => Err(self.failure(&format!("changing {what} at runtime"), e)),
        }
    }
}

impl DeployTarget for DataplaneTarget {
    fn name(&self) -> &str {
        &self.name
    }

    fn deploy<'a>(
        &'a self,
        request: &'a DeployRequest,
    ) -> BoxFuture<'a, Result<DeployOutcome, DeployError>> {
        Box::pin(async move {
            let result = self.run_deploy(request).await;
            match &result {
                Ok(outcome) => {
                    tracing::info!(target_name = %self.name, epoch = request.epoch, generation = request.generation, reloaded = outcome.reloaded, reload_reason = ?outcome.reload_reason, runtime_changes = outcome.runtime_changes, unchanged = outcome.unchanged, "deployed through the data plane API");
                }
                Err(error) => {
                    tracing::warn!(target_name = %self.name, epoch = request.epoch, generation = request.generation, %error, "deployment through the data plane API failed");
                }
            }
            result
        })
    }

    /// The checksum of the render this target last deployed while the pod's `haproxy.cfg`
    /// is still the file that deployment pushed (the API's checksum of it says so: the text
    /// read back is the API's reprint, never the render's text); before this target deployed
    /// anything, the render the pod's [`DEPLOYED_FILE`] names while the checksum is still
    /// the recorded one. Otherwise the checksum of
    /// the pod's file combined with the auxiliary files this target last deployed (none
    /// after a restart or a failed deployment), which differs from every render: drift.
    /// Files changed on the pod behind haptor's back are not seen.
    fn deployed_checksum(&self) -> BoxFuture<'_, Result<Option<Checksum>, DeployError>> {
        Box::pin(async move {
            let raw = self
                .api
                .raw_configuration()
                .await
                .map_err(|e| self.failure("reading haproxy.cfg", e))?;
            let text = strip_version_lines(&raw.text);
            if text.trim().is_empty() {
                return Ok(None);
            }
            let unknown = self.lock().last_deployed.is_none();
            if unknown
                && let Some(record) = self.read_record().await?
                && record.still_runs(raw.checksum.as_deref())
            {
                return Ok(Some(record.render));
            }
            let state = self.lock();
            if let Some(last) = &state.last_deployed
                && let Some(checksum) = state.last_checksum
                && runs_pushed(
                    &raw.text,
                    raw.checksum.as_deref(),
                    &last.haproxy_cfg,
                    state.pushed_checksum.as_deref(),
                )
            {
                return Ok(Some(checksum));
            }
            let aux_files = state
                .last_deployed
                .as_ref()
                .map(|r| r.aux_files.clone())
                .unwrap_or_default();
            Ok(Some(
                RenderedConfig {
                    haproxy_cfg: text.to_string(),
                    aux_files,
                    ..Default::default()
                }
                .checksum(),
            ))
        })
    }
}

/// The worker pid in `/services/haproxy/runtime/info` (`[{"info": {"pid": N, ...}}]`).
fn worker_pid(info: &Value) -> Option<u64> {
    let info = match info {
        Value::Array(items) => items.first()?,
        other => other,
    };
    info.pointer("/info/pid").and_then(Value::as_u64)
}

#[cfg(test)]
mod tests;
