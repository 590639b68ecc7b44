//! What `haptor migrate` reports: for each Ingress of the input, whether the library serves
//! it as it is, serves it with parts left out (which, and why), or does not serve it, and
//! a summary across the input. Decided from the outcomes one render recorded
//! ([`Outcomes`]), the same render and the same library the controller runs, so the report
//! cannot disagree with what `haptor run` would do.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::Serialize;
use serde_json::Value;

use crate::pure::rendered::{ObjectKey, Outcome, Outcomes};

/// How much of an Ingress the library serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, PartialOrd, Ord)]
#[serde(rename_all = "kebab-case")]
pub enum Verdict {
    /// Every part, every annotation honoured.
    AsIs,
    /// Served, with the parts in `left_out` left out.
    WithParts,
    /// Not served at all.
    NotServed,
}

impl Verdict {
    fn words(self) -> &'static str {
        match self {
            Verdict::AsIs => "served as it is",
            Verdict::WithParts => "served with parts left out",
            Verdict::NotServed => "not served",
        }
    }
}

/// One thing left out of an Ingress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LeftOut {
    /// The annotation it is about, when it is about one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub annotation: Option<String>,
    /// Why, and what to use instead where there is something.
    pub reason: String,
}

/// The report of one Ingress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IngressReport {
    pub namespace: String,
    pub name: String,
    pub verdict: Verdict,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub left_out: Vec<LeftOut>,
}

/// How the Ingresses of the input use one annotation.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AnnotationUse {
    /// Ingresses that carry it.
    pub ingresses: usize,
    /// Of those, the ones where it is left out.
    pub left_out: usize,
}

/// The whole report.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MigrationReport {
    pub ingresses: Vec<IngressReport>,
    pub summary: Summary,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Summary {
    pub total: usize,
    pub as_is: usize,
    pub with_parts_left_out: usize,
    pub not_served: usize,
    /// Every annotation under `prefixes` that an Ingress of the input carries.
    pub annotations: BTreeMap<String, AnnotationUse>,
}

impl MigrationReport {
    /// The report of `ingresses` (the objects as read) from the outcomes of their render;
    /// `prefixes` are the annotation prefixes the summary counts.
    pub fn new(ingresses: &[Value], outcomes: &Outcomes, prefixes: &[String]) -> MigrationReport {
        let mut reports = Vec::new();
        let mut annotations: BTreeMap<String, AnnotationUse> = BTreeMap::new();
        for ingress in ingresses {
            let text = |pointer: &str| {
                ingress
                    .pointer(pointer)
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string()
            };
            let (namespace, name) = (text("/metadata/namespace"), text("/metadata/name"));
            let key = ObjectKey {
                api_version: text("/apiVersion"),
                kind: text("/kind"),
                namespace: namespace.clone(),
                name: name.clone(),
            };
            let (verdict, reasons) = match outcomes.get(&key) {
                Some(Outcome::Served) => (Verdict::AsIs, Vec::new()),
                Some(Outcome::PartlyServed(reasons)) => (Verdict::WithParts, reasons.clone()),
                Some(Outcome::Ignored(reasons)) => (Verdict::NotServed, reasons.clone()),
                None => (
                    Verdict::NotServed,
                    vec![
                        "the library gives it no route (no rule with a path and no defaultBackend)"
                            .to_string(),
                    ],
                ),
            };
            let left_out: Vec<LeftOut> = reasons
                .into_iter()
                .map(|reason| LeftOut {
                    annotation: annotation_of(&reason),
                    reason,
                })
                .collect();
            if let Some(carried) = ingress
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
            {
                for annotation in carried
                    .keys()
                    .filter(|a| prefixes.iter().any(|p| a.starts_with(p.as_str())))
                {
                    let usage = annotations.entry(annotation.clone()).or_default();
                    usage.ingresses += 1;
                    if left_out
                        .iter()
                        .any(|l| l.annotation.as_deref() == Some(annotation.as_str()))
                    {
                        usage.left_out += 1;
                    }
                }
            }
            reports.push(IngressReport {
                namespace,
                name,
                verdict,
                left_out,
            });
        }
        let count = |verdict| reports.iter().filter(|r| r.verdict == verdict).count();
        let summary = Summary {
            total: reports.len(),
            as_is: count(Verdict::AsIs),
            with_parts_left_out: count(Verdict::WithParts),
            not_served: count(Verdict::NotServed),
            annotations,
        };
        MigrationReport {
            ingresses: reports,
            summary,
        }
    }

    /// Whether every Ingress is served as it is.
    pub fn all_as_is(&self) -> bool {
        self.summary.as_is == self.summary.total
    }

    /// The report as text: one block per Ingress, then the summary.
    pub fn text(&self) -> String {
        let mut out = String::new();
        for report in &self.ingresses {
            let _ = writeln!(
                out,
                "{}/{}: {}",
                report.namespace,
                report.name,
                report.verdict.words()
            );
            for left_out in &report.left_out {
                let _ = writeln!(out, "  - {}", left_out.reason);
            }
        }
        let summary = &self.summary;
        let _ = writeln!(
            out,
            "\n{} Ingress(es): {} served as they are, {} with parts left out, {} not served",
            summary.total, summary.as_is, summary.with_parts_left_out, summary.not_served
        );
        if !summary.annotations.is_empty() {
            let _ = writeln!(
                out,
                "annotations (Ingresses carrying it / of them left out):"
            );
            let width = summary
                .annotations
                .keys()
                .map(String::len)
                .max()
                .unwrap_or(0);
            for (annotation, usage) in &summary.annotations {
                let _ = writeln!(
                    out,
                    "  {annotation:<width$}  {:>5} / {}",
                    usage.ingresses, usage.left_out
                );
            }
        }
        out
    }
}

/// The annotation a reason is about: reasons the `annotation` and `annotated` helpers
/// record start with `annotation <name>`.
fn annotation_of(reason: &str) -> Option<String> {
    let rest = reason.strip_prefix("annotation ")?;
    let name: String = rest
        .chars()
        .take_while(|c| !c.is_whitespace() && *c != ':')
        .collect();
    name.contains('/').then_some(name)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn ingress(name: &str, annotations: Value) -> Value {
        json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
               "metadata": {"namespace": "web", "name": name, "annotations": annotations}})
    }

    fn key(name: &str) -> ObjectKey {
        ObjectKey {
            api_version: "networking.k8s.io/v1".into(),
            kind: "Ingress".into(),
            namespace: "web".into(),
            name: name.into(),
        }
    }

    #[test]
    fn each_ingress_gets_its_verdict_and_the_summary_counts_annotations_by_name() {
        let ingresses = [
            ingress("plain", json!({})),
            ingress(
                "snippet",
                json!({"nginx.ingress.kubernetes.io/configuration-snippet": "x",
                       "nginx.ingress.kubernetes.io/ssl-redirect": "true"}),
            ),
            ingress(
                "broken",
                json!({"nginx.ingress.kubernetes.io/ssl-redirect": "true"}),
            ),
            ingress("silent", json!({})),
        ];
        let outcomes = Outcomes::from([
            (key("plain"), Outcome::Served),
            (
                key("snippet"),
                Outcome::PartlyServed(vec![
                    "annotation nginx.ingress.kubernetes.io/configuration-snippet is not supported: nginx syntax".into(),
                ]),
            ),
            (
                key("broken"),
                Outcome::Ignored(vec!["host 'a b' is not a valid DNS name".into()]),
            ),
        ]);
        let prefixes = vec!["nginx.ingress.kubernetes.io/".to_string()];
        let report = MigrationReport::new(&ingresses, &outcomes, &prefixes);
        let verdicts: Vec<Verdict> = report.ingresses.iter().map(|r| r.verdict).collect();
        assert_eq!(
            verdicts,
            [
                Verdict::AsIs,
                Verdict::WithParts,
                Verdict::NotServed,
                Verdict::NotServed
            ]
        );
        assert_eq!(
            report.ingresses[1].left_out[0].annotation.as_deref(),
            Some("nginx.ingress.kubernetes.io/configuration-snippet")
        );
        assert_eq!(report.ingresses[2].left_out[0].annotation, None);
        let usage = &report.summary.annotations;
        assert_eq!(
            usage["nginx.ingress.kubernetes.io/ssl-redirect"],
            AnnotationUse {
                ingresses: 2,
                left_out: 0
            }
        );
        assert_eq!(
            usage["nginx.ingress.kubernetes.io/configuration-snippet"],
            AnnotationUse {
                ingresses: 1,
                left_out: 1
            }
        );
        assert!(!report.all_as_is());
        let text = report.text();
        assert!(text.contains("web/snippet: served with parts left out\n  - annotation"));
        assert!(
            text.contains(
                "4 Ingress(es): 1 served as they are, 1 with parts left out, 2 not served"
            )
        );
    }
}
