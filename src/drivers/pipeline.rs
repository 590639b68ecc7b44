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
            .map_err(|e| RenderFailure::of_render(&e))?;
        let render_time = started.elapsed();
        let baseline = self
            .baseline
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let validated = self
            .validator
            .validate_after(baseline.as_deref(), rendered)
            .map_err(validation_failure)?;
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

    fn trial(
        &self,
        compiled: &CompiledConfig,
        snapshot: StoresSnapshot,
    ) -> Result<(), RenderFailure> {
        let rendered = compiled
            .render_trial(snapshot, None, self.validator.haproxy_version())
            .map_err(|e| RenderFailure::of_render(&e))?;
        // No baseline: the trial is what lets new content in, so `haproxy -c` reads it even
        // where the rest of the render changes only in runtime-changeable values.
        self.validator
            .validate_after(None, rendered)
            .map(|_| ())
            .map_err(validation_failure)
    }
}

/// A validation failure as the coordinator reports it.
fn validation_failure(error: PipelineError) -> RenderFailure {
    match error {
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
    }
}
