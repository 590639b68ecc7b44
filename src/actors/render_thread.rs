//! The render thread: one long-lived OS thread on which the coordinator runs its pipeline
//! (render, parser, schema check, and the wait for `haproxy -c`), one job at a time. A
//! render at 10 000 Ingresses allocates tens of megabytes for a moment. glibc gives each
//! thread an allocator arena of its own and keeps what a thread freed for that thread's next
//! allocations, so renders spread over the blocking pool's changing threads each grew
//! another arena; on one thread, every render reuses the memory of the one before.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::mpsc;

type Job = Box<dyn FnOnce() + Send>;

/// The thread and the queue of jobs it runs in order. The thread ends when this is dropped.
#[derive(Debug)]
pub struct RenderThread {
    jobs: mpsc::Sender<Job>,
}

impl RenderThread {
    /// Starts the thread.
    pub fn start() -> std::io::Result<RenderThread> {
        let (jobs, queue) = mpsc::channel::<Job>();
        std::thread::Builder::new()
            .name("haptor-render".into())
            .spawn(move || {
                for job in queue {
                    job();
                }
            })?;
        Ok(RenderThread { jobs })
    }

    /// Runs `job` on the render thread and waits for its result without blocking the async
    /// runtime. `None` when the job panicked (the thread goes on with the next job).
    pub async fn run<T: Send + 'static>(
        &self,
        job: impl FnOnce() -> T + Send + 'static,
    ) -> Option<T> {
        let (reply, result) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            if let Ok(value) = catch_unwind(AssertUnwindSafe(job)) {
                let _ = reply.send(value);
            }
        });
        self.jobs.send(job).ok()?;
        result.await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn jobs_run_in_order_on_one_thread_and_a_panic_spares_the_next_job() {
        let thread = RenderThread::start().expect("thread starts");
        let first = thread.run(|| std::thread::current().id()).await;
        let panicked = thread.run(|| -> u8 { panic!("a broken job") }).await;
        let second = thread.run(|| std::thread::current().id()).await;
        assert_eq!(panicked, None);
        assert!(first.is_some());
        assert_eq!(first, second, "the same thread");
        assert_ne!(first, Some(std::thread::current().id()));
    }
}
