//! The offline subcommands: `crd`, `render`, `validate` and `lint`. They need no cluster and
//! no running HAProxy (only the `haproxy` binary for `haproxy -c`).

use std::process::ExitCode;

use super::{EXIT_UNUSABLE, LintArgs, RenderArgs, ValidateArgs, not_implemented_yet};

pub fn print_crds() -> ExitCode {
    match crate::pure::config::crds_yaml() {
        Ok(yaml) => {
            print!("{yaml}");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("haptor crd: could not serialise the CRDs: {e}");
            ExitCode::from(EXIT_UNUSABLE)
        }
    }
}

pub fn validate(_args: &ValidateArgs) -> ExitCode {
    not_implemented_yet("validate", "the validation-test runner is not built yet")
}

pub fn render(_args: &RenderArgs) -> ExitCode {
    not_implemented_yet("render", "the render pipeline is not wired to the command line yet")
}

pub fn lint(_args: &LintArgs) -> ExitCode {
    not_implemented_yet("lint", "the HAProxy parser is not wired to the command line yet")
}
