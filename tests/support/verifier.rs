//! The verifier mock tier, as kube-rs controller-rs has it: a `kube::Client` over
//! `tower_test::mock::pair()` and an [`ApiServerVerifier`] that plays a scenario against
//! it — each expected request in order, its method, its path with the exact query and its
//! JSON body asserted, then answered with the given status and JSON. A request that
//! differs, an expected request that never comes (the client was dropped first, or nothing
//! came for [`REQUEST_TIMEOUT`]) and any request after the last expected one fail the
//! scenario, and with it the test. For the request sequences the in-cluster code must get
//! exactly right (server-side-apply status patches, Lease updates); what the apiserver does
//! with them is the real-apiserver tier's business (`tests/support/kube.rs`). Included with
//! `#[path = "support/verifier.rs"] mod verifier;`.
#![allow(dead_code)]

use std::time::Duration;

use http::{Method, Request, Response, StatusCode};
use kube::Client;
use kube::client::Body;
use serde_json::Value;

/// How long the verifier waits for each expected request before failing the scenario:
/// generous, as only a scenario that is going to fail anyway ever waits this long.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// One expected request and the answer to it.
#[derive(Debug, Clone)]
pub struct Expect {
    method: Method,
    uri: String,
    content_type: Option<String>,
    body: Option<Value>,
    status: StatusCode,
    reply: Value,
}

impl Expect {
    /// A request of `method` to `uri` (path and query, exactly as sent), answered
    /// `200 {}` unless [`Expect::reply`] says otherwise, whose body is not looked at unless
    /// [`Expect::body`] gives one.
    pub fn request(method: Method, uri: &str) -> Expect {
        Expect {
            method,
            uri: uri.to_string(),
            content_type: None,
            body: None,
            status: StatusCode::OK,
            reply: Value::Object(Default::default()),
        }
    }

    pub fn get(uri: &str) -> Expect {
        Expect::request(Method::GET, uri)
    }

    pub fn patch(uri: &str) -> Expect {
        Expect::request(Method::PATCH, uri)
    }

    pub fn put(uri: &str) -> Expect {
        Expect::request(Method::PUT, uri)
    }

    pub fn post(uri: &str) -> Expect {
        Expect::request(Method::POST, uri)
    }

    /// The request's `Content-Type` must be `content_type`.
    pub fn content_type(mut self, content_type: &str) -> Expect {
        self.content_type = Some(content_type.to_string());
        self
    }

    /// The request's body must be this JSON (compared as values, not as text).
    pub fn body(mut self, body: Value) -> Expect {
        self.body = Some(body);
        self
    }

    /// Answer with `status` and this JSON.
    pub fn reply(mut self, status: StatusCode, reply: Value) -> Expect {
        self.status = status;
        self.reply = reply;
        self
    }

    fn describe(&self) -> String {
        format!("{} {}", self.method, self.uri)
    }
}

/// The apiserver side of a mock client.
pub struct ApiServerVerifier {
    handle: tower_test::mock::Handle<Request<Body>, Response<Body>>,
}

/// A client whose every request goes to the returned verifier.
pub fn mock_client() -> (Client, ApiServerVerifier) {
    let (service, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    (
        Client::new(service, "default"),
        ApiServerVerifier { handle },
    )
}

impl ApiServerVerifier {
    /// Plays `scenario` on a task of its own. Await the handle after the code under test
    /// has finished and dropped its client: it fails (with the scenario's message) when a
    /// request differed, an expected one did not come or an extra one came.
    pub fn run(self, scenario: Vec<Expect>) -> Scenario {
        Scenario(tokio::spawn(self.play(scenario)))
    }

    async fn play(mut self, scenario: Vec<Expect>) {
        let total = scenario.len();
        for (n, expected) in scenario.into_iter().enumerate() {
            let step = format!("request {} of {total}, {}", n + 1, expected.describe());
            let next = tokio::time::timeout(REQUEST_TIMEOUT, self.handle.next_request())
                .await
                .unwrap_or_else(|_| panic!("{step}: no request came within {REQUEST_TIMEOUT:?}"));
            let Some((request, respond)) = next else {
                panic!("{step}: never sent (the client was dropped first)");
            };
            let (parts, body) = request.into_parts();
            let uri = parts
                .uri
                .path_and_query()
                .map(|p| p.as_str().to_string())
                .unwrap_or_default();
            assert_eq!(
                (&parts.method, uri.as_str()),
                (&expected.method, expected.uri.as_str()),
                "{step}: a different request came"
            );
            if let Some(content_type) = &expected.content_type {
                let sent = parts
                    .headers
                    .get(http::header::CONTENT_TYPE)
                    .and_then(|v| v.to_str().ok());
                assert_eq!(sent, Some(content_type.as_str()), "{step}: Content-Type");
            }
            if let Some(want) = &expected.body {
                let bytes = body.collect_bytes().await.expect("the request's body");
                let sent: Value = serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                    panic!(
                        "{step}: body is not JSON ({e}): {}",
                        String::from_utf8_lossy(&bytes)
                    )
                });
                assert!(
                    &sent == want,
                    "{step}: body differs\n sent: {}\n want: {}",
                    serde_json::to_string_pretty(&sent).unwrap_or_default(),
                    serde_json::to_string_pretty(want).unwrap_or_default()
                );
            }
            let reply = serde_json::to_vec(&expected.reply).expect("JSON");
            respond.send_response(
                Response::builder()
                    .status(expected.status)
                    .header(http::header::CONTENT_TYPE, "application/json")
                    .body(Body::from(reply))
                    .expect("a response"),
            );
        }
        let extra = tokio::time::timeout(REQUEST_TIMEOUT, self.handle.next_request())
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "after the {total} expected requests the client was not dropped within \
                     {REQUEST_TIMEOUT:?}: drop it before awaiting the scenario"
                )
            });
        if let Some((request, _)) = extra {
            panic!(
                "an extra request after the {total} expected ones: {} {}",
                request.method(),
                request.uri()
            );
        }
    }
}

/// A scenario being played; see [`ApiServerVerifier::run`].
pub struct Scenario(tokio::task::JoinHandle<()>);

impl Scenario {
    /// Waits until the scenario is played out; its failure is the caller's panic.
    pub async fn finished(self) {
        if let Err(e) = self.0.await {
            std::panic::resume_unwind(e.into_panic());
        }
    }
}
