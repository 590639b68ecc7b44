//! Build information that `haptor version` prints: the git commit the binary was built from
//! and the target it was built for. `HAPTOR_GIT_COMMIT` in the build's environment names the
//! commit (a build from a source archive, such as the container image's, which has no
//! `.git`); otherwise `git rev-parse` is asked, and a build outside a checkout says so.

use std::path::Path;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=HAPTOR_GIT_COMMIT");
    // A new commit moves the branch HEAD points to; a checkout moves HEAD itself.
    // Only files that exist are named: cargo runs a build script again on every build when
    // a file it names is missing.
    let git = Path::new(".git");
    let watch = |path: &Path| {
        if path.exists() {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    };
    watch(&git.join("HEAD"));
    watch(&git.join("packed-refs"));
    if let Ok(head) = std::fs::read_to_string(git.join("HEAD"))
        && let Some(reference) = head.trim().strip_prefix("ref: ")
    {
        watch(&git.join(reference));
    }
    let commit = std::env::var("HAPTOR_GIT_COMMIT")
        .ok()
        .filter(|c| !c.trim().is_empty())
        .or_else(|| {
            let output = Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .output()
                .ok()?;
            let commit = String::from_utf8(output.stdout).ok()?;
            (output.status.success() && !commit.trim().is_empty())
                .then(|| commit.trim().to_string())
        })
        .unwrap_or_else(|| "unknown (built outside a git checkout)".to_string());
    println!("cargo:rustc-env=HAPTOR_GIT_COMMIT={}", commit.trim());
    let target = std::env::var("TARGET").unwrap_or_else(|_| "unknown".to_string());
    println!("cargo:rustc-env=HAPTOR_BUILD_TARGET={target}");
}
