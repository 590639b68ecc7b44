//! The `haptor` binary: parses the command line, installs the process-wide rustls crypto
//! provider (ring, the only one compiled in), sets up logging and hands over to
//! `haptor::cli` with the handle that changes the log level.

use std::process::ExitCode;

use clap::Parser;

/// mimalloc instead of glibc's malloc: haptor's renders and deployment plans allocate and
/// free large transient trees, and glibc's arenas kept that memory (see `scripts/soak`).
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> ExitCode {
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
