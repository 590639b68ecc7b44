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

/// mimalloc's `mi_option_allow_thp` (its position in the same `mi_option_e`, checked the same
/// way: its default is 1).
const MI_OPTION_ALLOW_THP: libmimalloc_sys::mi_option_t = 43;

/// How long mimalloc keeps memory freed before it returns it to the system, in ms: not at
/// all. Its default (1 s) keeps each render's freed transient memory while the next render,
/// a moment later under churn, allocates more: at 10 000 Ingresses that put some 30 MB on the
/// peak RSS (`scripts/measure-scale`: 176 MB at the end with the default, 150 with 10 ms, 144
/// with 0, endpoint changes as fast with each).
const PURGE_DELAY_MS: std::ffi::c_long = 0;

/// Keeps haptor's resident memory close to the memory it uses: freed memory goes back to
/// the system at once, and no transparent huge pages. mimalloc asks for huge pages over its
/// arena (`madvise(MADV_HUGEPAGE)`), and a 2 MiB page partly in use is resident whole: at
/// 10 000 Ingresses that was some 22 MB of the peak RSS (`scripts/measure-scale`: 147 MB at
/// the end with them, 125 without, endpoint changes as fast). mimalloc disables them for the
/// process only when told so before its first allocation, which is before `main`; so
/// `main` both tells mimalloc (for arenas it reserves later) and sets the process's
/// THP-disable flag (`prctl(PR_SET_THP_DISABLE)`, which also covers the arena already
/// reserved, and is inherited by the haproxy `haptor local` starts, which is not hurt by
/// it). Returns the error of a kernel that refuses the flag; haptor runs on without it.
#[expect(
    unsafe_code,
    reason = "mimalloc's options are set through its C API alone"
)]
fn keep_resident_memory_small() -> std::io::Result<()> {
    // Safety: setting a mimalloc option is a plain store into its option table, allowed at
    // any time from any thread.
    unsafe {
        libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, PURGE_DELAY_MS);
        libmimalloc_sys::mi_option_set(MI_OPTION_ALLOW_THP, 0);
    }
    rustix::thread::disable_transparent_huge_pages(true).map_err(std::io::Error::from)
}

fn main() -> ExitCode {
    let huge_pages = keep_resident_memory_small();
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
    if let Err(e) = huge_pages {
        tracing::warn!(
            error = %e,
            "transparent huge pages could not be turned off for haptor; its resident memory may be some 20 MB higher"
        );
    }
    haptor::cli::execute(cli, log_level)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One test, not three: the options are process-wide, and the defaults must be read
    /// before anything in the test process sets them.
    #[test]
    #[expect(
        unsafe_code,
        reason = "mimalloc's options are read through its C API alone"
    )]
    fn the_options_set_are_purge_delay_and_allow_thp_and_huge_pages_end_up_off() {
        // Safety: reading an option is a plain load from mimalloc's option table.
        let get = |option| unsafe { libmimalloc_sys::mi_option_get(option) };
        assert_eq!(
            get(MI_OPTION_PURGE_DELAY),
            1000,
            "option {MI_OPTION_PURGE_DELAY} is not purge_delay (default 1 s)"
        );
        assert_eq!(
            get(MI_OPTION_ALLOW_THP),
            1,
            "option {MI_OPTION_ALLOW_THP} is not allow_thp (default 1)"
        );
        keep_resident_memory_small().expect("the kernel takes PR_SET_THP_DISABLE");
        assert_eq!(get(MI_OPTION_PURGE_DELAY), 0);
        assert_eq!(get(MI_OPTION_ALLOW_THP), 0);
        assert!(
            rustix::thread::transparent_huge_pages_are_disabled().expect("PR_GET_THP_DISABLE"),
            "the process may still be given transparent huge pages"
        );
    }
}
