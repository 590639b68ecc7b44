//! The reconcile pipeline production runs ([`FullPipeline`], the `ReconcilePipeline` seam):
//! render with the config's templates, then the three validation phases of
//! `pure::pipeline::Validator` (its cache, and `haproxy -c` through the checker it was built
//! with), keeping the last accepted render as the baseline that lets a runtime-only change
//! skip `haproxy -c`.

use std::sync::Arc;
use std::time::Instant;

use crate::messages::deploy::{FailureStage, RenderFailure, RenderedAndValidated};
use crate::pure::pipeline::{CompiledConfig, PipelineError, Validator};
use crate::pure::store::StoresSnapshot;
use crate::seams::ReconcilePipeline;

/// Render with the config's templates, then the three validation phases (cached). A render
/// that differs from the last accepted one only in runtime-changeable values skips
/// `haproxy -c` (see [`Validator::validate_after`]).
#[derive(Debug)]
pub struct FullPipeline {
    pub validator: Validator,
    /// The last accepted render. It passed all three phases, or differs from one that did
    /// only in runtime-changeable values: "differs only in those values" is transitive, so
    /// every render since the last full validation keeps its structure, and comparing with
    /// the latest keeps the comparison to the lines this render changed.
    baseline: std::sync::Mutex<Option<Arc<crate::pure::rendered::RenderedConfig>>>,
}

impl FullPipeline {
    pub fn new(validator: Validator) -> FullPipeline {
        FullPipeline {
            validator,
            baseline: std::sync::Mutex::new(None),
        }
    }
}

impl ReconcilePipeline for FullPipeline {
    fn run(
        &self,
        compiled: &CompiledConfig,
        snapshot: StoresSnapshot,
    ) -> Result<RenderedAndValidated, RenderFailure> {
        let started = Instant::now();
        let rendered = compiled
            .render(snapshot, None, self.validator.haproxy_version())
            .map_err(|e| RenderFailure {
                stage: FailureStage::Render,
                message: e.to_string(),
                template: e.template().map(String::from),
                line: e.line(),
            })?;
        let render_time = started.elapsed();
        let baseline = self
            .baseline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let validated = self
            .validator
            .validate_after(baseline.as_deref(), rendered)
            .map_err(|e| match e {
                PipelineError::Invalid(invalid) => RenderFailure {
                    stage: FailureStage::Validation(invalid.phase),
                    line: invalid.problems.first().and_then(|p| p.line),
                    template: invalid.problems.first().map(|p| p.file.clone()),
                    message: invalid.to_string(),
                },
                PipelineError::Render(e) => RenderFailure {
                    stage: FailureStage::Render,
                    message: e.to_string(),
                    template: None,
                    line: None,
                },
                PipelineError::CheckUnavailable(message) => RenderFailure {
                    stage: FailureStage::CheckUnavailable,
                    message,
                    template: None,
                    line: None,
                },
            })?;
        *self.baseline.lock().unwrap_or_else(|p| p.into_inner()) =
            Some(Arc::clone(&validated.rendered));
        Ok(RenderedAndValidated {
            rendered: validated.rendered,
            checksum: validated.checksum,
            render_time,
            validate_time: validated.duration,
            cache_hit: validated.from_cache,
            semantic_skipped: validated.semantic_skipped,
        })
    }
}
