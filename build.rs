//! Build information that `haptor version` prints: the git commit the binary was built from
//! and the target it was built for. `HAPTOR_GIT_COMMIT` in the build's environment names the
//! commit (a build from a source archive, such as the container image's, which has no
//! `.git`); otherwise `git rev-parse` is asked, and a build outside a checkout says so.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-env-changed=HAPTOR_GIT_COMMIT");
    // A new commit moves the branch HEAD points to; a checkout moves HEAD itself. The paths
    // come from git, so a worktree (whose `.git` is a file) is watched where its HEAD and
    // refs really are. Only files that exist are named: cargo runs a build script again on
    // every build when a file it names is missing.
    let git_path = |name: &str| -> Option<PathBuf> {
        let output = Command::new("git")
            .args(["rev-parse", "--git-path", name])
            .output()
            .ok()?;
        let path = String::from_utf8(output.stdout).ok()?;
        (output.status.success() && !path.trim().is_empty()).then(|| PathBuf::from(path.trim()))
    };
    let watch = |path: Option<PathBuf>| {
        if let Some(path) = path.filter(|p| p.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    };
    let head = git_path("HEAD");
    watch(head.clone());
    watch(git_path("packed-refs"));
    if let Some(text) = head.and_then(|h| std::fs::read_to_string(h).ok())
        && let Some(reference) = text.trim().strip_prefix("ref: ")
    {
        watch(git_path(reference));
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
