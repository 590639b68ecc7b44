//! The `haptor` binary: parses the command line, installs the process-wide rustls crypto
//! provider (ring, the only one compiled in), sets up logging and hands over to
//! `haptor::cli` with the handle that changes the log level.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: haptor's renders and deployment plans allocate and
/// free large transient trees, and glibc's arenas kept that memory (see `scripts/soak`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// mimalloc's `mi_option_purge_delay` (the position of `mi_option_purge_delay` in
/// `mi_option_e` of the bundled mimalloc 3, whose bindings name no constant for it; the test
/// below checks it still is that option by its default).
const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;

/// How long mimalloc keeps memory freed before it returns it to the system, in ms: not at
/// all. Its default (1 s) keeps each render's freed transient memory while the next render,
/// a moment later under churn, allocates more: at 10 000 Ingresses that put some 30 MB on the
/// peak RSS (`scripts/measure-scale`: 176 MB at the end with the default, 150 with 10 ms, 144
/// with 0, endpoint changes as fast with each).
const PURGE_DELAY_MS: std::ffi::c_long = 0;

#[expect(
    unsafe_code,
    reason = "mimalloc's options are set through its C API alone"
)]
fn return_freed_memory_promptly() {
    // Safety: setting a mimalloc option is a plain store into its option table, allowed at
    // any time from any thread.
    unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS) };
}

fn main() -> ExitCode {
    return_freed_memory_promptly();
    let cli = haptor::cli::Cli::parse();
    // kube, reqwest and the HTTPS servers all use rustls; exactly one provider (ring) is
    // compiled in and installed here before any TLS object is built.
    if rustls::crypto::ring::default_provider()
        .install_default()
        .is_err()
    {
        eprintln!("haptor: a rustls crypto provider was already installed; continuing with it");
    }
    let log_level = match haptor::telemetry::init_logging(cli.log_format, &cli.log_level) {
        Ok(handle) => Some(handle),
        Err(e) => {
            eprintln!("haptor: logging was set up already ({e}); the log level stays as it is");
            None
        }
    };
    haptor::cli::execute(cli, log_level)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[expect(
        unsafe_code,
        reason = "mimalloc's options are read through its C API alone"
    )]
    fn the_purge_delay_option_is_the_one_mimalloc_documents_with_a_default_of_one_second() {
        // Safety: reading an option is a plain load from mimalloc's option table.
        let default = unsafe { libmimalloc_sys::mi_option_get(MI_OPTION_PURGE_DELAY) };
        assert_eq!(
            default, 1000,
            "option {MI_OPTION_PURGE_DELAY} is not purge_delay"
        );
    }
}
