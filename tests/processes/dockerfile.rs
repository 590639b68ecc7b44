//! The shape of the root `Dockerfile`, checked on its text (no Docker daemon, no hadolint):
//! a builder stage and a runtime stage that copies the binary from it, base images pinned
//! to a tag, the release build `--locked` with the dependencies in a layer of their own, a
//! runtime stage that installs haproxy (the `haproxy -c` checker) and runs as a non-root
//! user set after its last `RUN`, and an exec-form `ENTRYPOINT`. The file is parsed the way
//! Docker reads it: comments dropped, `\` line continuations joined, one instruction per
//! logical line, stages starting at each `FROM`. And the image `scripts/build-image` builds
//! from the runtime stage without a container engine: its configuration is the stage's, and
//! its haptor runs inside it as the stage's user, with the stage's haproxy as its checker.

use std::path::{Path, PathBuf};

fn repo(path: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// One instruction: its keyword (upper case), its arguments and the line it starts on.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Instruction {
    keyword: String,
    args: String,
    line: usize,
}

/// One build stage: its `FROM` image, its name (`AS name`) and its instructions after the
/// `FROM`.
#[derive(Debug, Clone)]
struct Stage {
    image: String,
    name: Option<String>,
    line: usize,
    instructions: Vec<Instruction>,
}

/// The instructions of a Dockerfile: comment lines (also inside a continued instruction)
/// and blank lines are dropped, a line ending in `\` continues on the next one.
fn instructions(text: &str) -> Vec<Instruction> {
    let mut out = Vec::new();
    let mut pending: Option<(usize, String)> = None;
    for (index, raw) in text.lines().enumerate() {
        let trimmed = raw.trim();
        if trimmed.starts_with('#') || (trimmed.is_empty() && pending.is_none()) {
            continue;
        }
        let (continues, body) = match trimmed.strip_suffix('\\') {
            Some(body) => (true, body.trim_end()),
            None => (false, trimmed),
        };
        let (start, mut logical) = pending.take().unwrap_or((index + 1, String::new()));
        if !logical.is_empty() && !body.is_empty() {
            logical.push(' ');
        }
        logical.push_str(body);
        if continues {
            pending = Some((start, logical));
        } else if !logical.trim().is_empty() {
            out.push(split_instruction(start, &logical));
        }
    }
    if let Some((start, logical)) = pending {
        out.push(split_instruction(start, &logical));
    }
    out
}

fn split_instruction(line: usize, logical: &str) -> Instruction {
    let logical = logical.trim();
    let (keyword, args) = logical
        .split_once(char::is_whitespace)
        .unwrap_or((logical, ""));
    Instruction {
        keyword: keyword.to_ascii_uppercase(),
        args: args.trim().to_string(),
        line,
    }
}

/// The stages: every `FROM` starts one (instructions before the first `FROM`, `ARG`s, are
/// not in any stage). A `FROM` reads `${NAME}` of those `ARG`s at their defaults, as Docker
/// does without `--build-arg`.
fn stages(instructions: &[Instruction]) -> Vec<Stage> {
    let mut out: Vec<Stage> = Vec::new();
    let mut global_args: Vec<(String, String)> = Vec::new();
    for instruction in instructions {
        if instruction.keyword == "ARG" && out.is_empty() {
            if let Some((name, default)) = instruction.args.split_once('=') {
                global_args.push((name.trim().to_string(), default.trim().to_string()));
            }
        } else if instruction.keyword == "FROM" {
            let words: Vec<&str> = instruction
                .args
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let mut image = words.first().copied().unwrap_or_default().to_string();
            for (name, value) in &global_args {
                image = image.replace(&format!("${{{name}}}"), value);
            }
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            };
            out.push(Stage {
                image,
                name,
                line: instruction.line,
                instructions: Vec::new(),
            });
        } else if let Some(stage) = out.last_mut() {
            stage.instructions.push(instruction.clone());
        }
    }
    out
}

fn dockerfile() -> Vec<Stage> {
    let path = repo("Dockerfile");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{} cannot be read: {e}", path.display()));
    let stages = stages(&instructions(&text));
    assert!(!stages.is_empty(), "the Dockerfile has no FROM");
    stages
}

fn final_stage(stages: &[Stage]) -> &Stage {
    stages.last().expect("the Dockerfile has a stage")
}

/// The value of a `--flag=value` option among an instruction's arguments.
fn flag<'a>(args: &'a str, name: &str) -> Option<&'a str> {
    let prefix = format!("--{name}=");
    args.split_whitespace()
        .find_map(|w| w.strip_prefix(&prefix))
}

/// An image reference's tag (`rust:1.89-bookworm` → `1.89-bookworm`), if it has one: a `:`
/// after the last `/` (a registry's port comes before it).
fn tag(image: &str) -> Option<&str> {
    let (_, last) = image.rsplit_once('/').unwrap_or(("", image));
    let last = last.split('@').next().unwrap_or(last);
    last.split_once(':').map(|(_, tag)| tag)
}

/// The packages the `apt-get install` commands of a `RUN` name.
fn apt_installed(run: &str) -> Vec<&str> {
    run.split(['&', ';', '|'])
        .filter_map(|command| command.split_once("apt-get install"))
        .flat_map(|(_, rest)| rest.split_whitespace())
        .filter(|word| !word.starts_with('-'))
        .collect()
}

/// Whether one side of a `USER` spec (`65532:65532`, `app`, `1000:app`) is root.
fn is_root(id: &str) -> bool {
    id == "0" || id.eq_ignore_ascii_case("root")
}

#[test]
fn continued_lines_and_comments_are_read_as_one_instruction_each() {
    let text = "# syntax comment\nFROM debian:bookworm-slim AS base\nRUN apt-get update \\\n    # a comment inside\n    && apt-get install -y haproxy\n\nuser 1000\n";
    let parsed = instructions(text);
    assert_eq!(
        parsed,
        vec![
            Instruction {
                keyword: "FROM".into(),
                args: "debian:bookworm-slim AS base".into(),
                line: 2
            },
            Instruction {
                keyword: "RUN".into(),
                args: "apt-get update && apt-get install -y haproxy".into(),
                line: 3
            },
            Instruction {
                keyword: "USER".into(),
                args: "1000".into(),
                line: 7
            },
        ]
    );
    let stages = stages(&parsed);
    assert_eq!(stages.len(), 1);
    assert_eq!(stages[0].image, "debian:bookworm-slim");
    assert_eq!(stages[0].name.as_deref(), Some("base"));
    assert_eq!(tag("registry.example:5000/team/rust:1.89"), Some("1.89"));
    assert_eq!(tag("registry.example:5000/team/rust"), None);
}

#[test]
fn the_binary_is_built_in_a_builder_stage_and_the_final_stage_copies_it_from_there() {
    let stages = dockerfile();
    assert!(
        stages.len() >= 2,
        "the Dockerfile is not multi-stage: {} FROM",
        stages.len()
    );
    let last = final_stage(&stages);
    let earlier: Vec<String> = stages[..stages.len() - 1]
        .iter()
        .enumerate()
        .flat_map(|(i, s)| [Some(i.to_string()), s.name.clone()])
        .flatten()
        .collect();
    let copies: Vec<&Instruction> = last
        .instructions
        .iter()
        .filter(|i| i.keyword == "COPY")
        .filter(|i| flag(&i.args, "from").is_some_and(|from| earlier.iter().any(|e| e == from)))
        .collect();
    assert!(
        copies
            .iter()
            .any(|c| c.args.contains("/usr/local/bin/haptor")),
        "the final stage (FROM {} on line {}) copies no /usr/local/bin/haptor from an earlier \
         stage ({earlier:?}); its COPY --from instructions: {copies:?}",
        last.image,
        last.line
    );
}

#[test]
fn every_base_image_is_pinned_to_a_tag_other_than_latest() {
    let stages = dockerfile();
    let names: Vec<&str> = stages.iter().filter_map(|s| s.name.as_deref()).collect();
    for stage in &stages {
        if names.contains(&stage.image.as_str()) {
            continue; // FROM an earlier stage
        }
        let pinned_by_digest = stage.image.contains("@sha256:");
        match tag(&stage.image) {
            Some(tag) => assert!(
                tag != "latest" && !tag.is_empty(),
                "FROM {} on line {} uses the tag {tag:?}: pin a version",
                stage.image,
                stage.line
            ),
            None => assert!(
                pinned_by_digest,
                "FROM {} on line {} has no tag (it means latest): pin a version",
                stage.image, stage.line
            ),
        }
    }
}

/// The HAProxy line of each Debian suite a runtime stage may start from (its `haproxy`).
const SUITE_LINES: [(&str, &str); 3] = [("bookworm", "2.6"), ("trixie", "3.0"), ("forky", "3.2")];

/// The chart's default values.
fn chart_values() -> serde_json::Value {
    let text = std::fs::read_to_string(repo("deploy/chart/haptor/values.yaml"))
        .expect("the chart's values read");
    serde_yaml_ng::from_str(&text).expect("the chart's values are YAML")
}

/// haptor checks a render only with a haproxy of the line the pods run: the image built as
/// the Dockerfile stands must hold the checker of the line the chart deploys by default.
#[test]
fn the_runtime_stage_ships_the_checker_of_the_haproxy_line_the_chart_deploys() {
    let stages = dockerfile();
    let runtime = final_stage(&stages);
    let suite = runtime
        .image
        .strip_prefix("debian:")
        .and_then(|rest| rest.strip_suffix("-slim"))
        .unwrap_or_else(|| {
            panic!(
                "the runtime stage starts FROM {}, not a debian:SUITE-slim",
                runtime.image
            )
        });
    let line = SUITE_LINES
        .iter()
        .find(|(s, _)| *s == suite)
        .map(|(_, line)| *line)
        .unwrap_or_else(|| panic!("the runtime suite {suite} has no known HAProxy line"));
    let values = chart_values();
    assert_eq!(
        values["image"]["haproxyVersion"], line,
        "the chart says the controller image's haproxy is {}, the Dockerfile ships {suite}'s {line}",
        values["image"]["haproxyVersion"]
    );
    assert_eq!(
        values["haproxy"]["version"], line,
        "the chart's HAProxy pods default to {}, the controller image checks {line}",
        values["haproxy"]["version"]
    );
    for image in [
        &values["haproxy"]["image"],
        &values["haproxy"]["dataplane"]["image"],
    ] {
        let tag = image["tag"].as_str().expect("a tag");
        assert!(
            tag.starts_with(&format!("{line}.")),
            "the pods' image {}:{tag} is not a pinned {line}.x release",
            image["repository"]
        );
    }
}

#[test]
fn the_builder_toolchain_is_the_rust_version_cargo_toml_declares() {
    let manifest = std::fs::read_to_string(repo("Cargo.toml")).expect("Cargo.toml reads");
    let rust_version = manifest
        .lines()
        .find_map(|l| l.trim().strip_prefix("rust-version"))
        .and_then(|rest| rest.split('"').nth(1))
        .expect("Cargo.toml declares rust-version");
    let stages = dockerfile();
    let rust = stages
        .iter()
        .find(|s| s.image.starts_with("rust:") || s.image.contains("/rust:"))
        .expect("a stage builds FROM a rust image");
    let tag = tag(&rust.image).unwrap_or_default();
    assert!(
        tag == rust_version || tag.starts_with(&format!("{rust_version}-")),
        "FROM {} builds with a toolchain other than Cargo.toml's rust-version {rust_version}",
        rust.image
    );
}

#[test]
fn the_release_build_uses_the_lock_file_and_builds_the_dependencies_before_copying_the_sources() {
    let stages = dockerfile();
    let builds: Vec<(&Stage, usize, &Instruction)> = stages
        .iter()
        .flat_map(|s| {
            s.instructions
                .iter()
                .enumerate()
                .filter(|(_, i)| i.keyword == "RUN" && i.args.contains("cargo build"))
                .map(move |(n, i)| (s, n, i))
        })
        .collect();
    assert!(!builds.is_empty(), "no RUN runs cargo build");
    for (_, _, build) in &builds {
        for part in build.args.split("&&").filter(|p| p.contains("cargo build")) {
            assert!(
                part.contains("--locked") && part.contains("--release"),
                "line {}: `{}` is not a --release --locked build",
                build.line,
                part.trim()
            );
        }
    }
    // The first build sees only the manifest and the lock file: the dependency layer.
    let (stage, first, _) = builds[0];
    let copied_before: Vec<&str> = stage.instructions[..first]
        .iter()
        .filter(|i| i.keyword == "COPY")
        .flat_map(|i| i.args.split_whitespace())
        .collect();
    assert!(
        copied_before.contains(&"Cargo.toml") && copied_before.contains(&"Cargo.lock"),
        "Cargo.toml and Cargo.lock are not copied before the first cargo build: {copied_before:?}"
    );
    assert!(
        !copied_before
            .iter()
            .any(|w| w.starts_with("src") || *w == "."),
        "the sources are copied before the dependency build, so every change rebuilds the \
         dependencies: {copied_before:?}"
    );
    assert!(
        builds.len() >= 2,
        "only one cargo build: the dependencies are not built in a layer of their own"
    );
}

#[test]
fn the_final_stage_installs_haproxy_without_recommends_and_removes_the_apt_lists() {
    let stages = dockerfile();
    let last = final_stage(&stages);
    let install = last
        .instructions
        .iter()
        .find(|i| i.keyword == "RUN" && apt_installed(&i.args).contains(&"haproxy"))
        .unwrap_or_else(|| {
            panic!(
                "the final stage (FROM {}) installs no haproxy, the checker of `haproxy -c`",
                last.image
            )
        });
    assert!(
        install.args.contains("--no-install-recommends"),
        "line {}: apt-get install without --no-install-recommends",
        install.line
    );
    assert!(
        apt_installed(&install.args).contains(&"ca-certificates"),
        "line {}: the final stage installs no ca-certificates",
        install.line
    );
    assert!(
        install.args.contains("rm -rf /var/lib/apt/lists"),
        "line {}: the apt lists stay in the layer",
        install.line
    );
}

#[test]
fn the_final_stage_runs_as_a_non_root_user_set_after_its_last_run() {
    let stages = dockerfile();
    let last = final_stage(&stages);
    let position = |keyword: &str| last.instructions.iter().rposition(|i| i.keyword == keyword);
    let user_at = position("USER").unwrap_or_else(|| {
        panic!(
            "the final stage (FROM {}) sets no USER: it runs as root",
            last.image
        )
    });
    let user = &last.instructions[user_at];
    let (name, group) = user
        .args
        .split_once(':')
        .map_or((user.args.as_str(), None), |(u, g)| (u, Some(g)));
    assert!(
        !name.is_empty() && !is_root(name),
        "line {}: USER {} is root",
        user.line,
        user.args
    );
    assert!(
        group.is_none_or(|g| !is_root(g)),
        "line {}: USER {} runs in the root group",
        user.line,
        user.args
    );
    if let Some(run_at) = position("RUN") {
        assert!(
            run_at < user_at,
            "line {}: a RUN after the last USER (line {}) runs as that user or resets the \
             intent; set USER after the last RUN",
            last.instructions[run_at].line,
            user.line
        );
    }
}

#[test]
fn the_entrypoint_is_the_haptor_binary_in_exec_form_and_the_command_is_run() {
    let stages = dockerfile();
    let last = final_stage(&stages);
    let exec_form = |keyword: &str| -> Option<Vec<String>> {
        let instruction = last.instructions.iter().rfind(|i| i.keyword == keyword)?;
        let parsed: Result<Vec<String>, _> = serde_json::from_str(&instruction.args);
        Some(parsed.unwrap_or_else(|e| {
            panic!(
                "line {}: {keyword} {} is not in exec form (a JSON array of strings): {e}",
                instruction.line, instruction.args
            )
        }))
    };
    let entrypoint = exec_form("ENTRYPOINT").expect("the final stage has an ENTRYPOINT");
    assert_eq!(entrypoint, ["/usr/local/bin/haptor"]);
    assert_eq!(exec_form("CMD"), Some(vec!["run".to_string()]));
}

#[test]
fn the_build_context_leaves_out_the_target_directory_and_git() {
    let ignore = std::fs::read_to_string(repo(".dockerignore")).expect(".dockerignore reads");
    let patterns: Vec<&str> = ignore
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| l.trim_start_matches('/').trim_end_matches('/'))
        .collect();
    for wanted in ["target", ".git"] {
        assert!(
            patterns.contains(&wanted),
            ".dockerignore does not leave out {wanted}: {patterns:?}"
        );
    }
    for needed in ["Cargo.toml", "Cargo.lock", "src", "deploy"] {
        assert!(
            !patterns.contains(&needed),
            ".dockerignore leaves out {needed}, which the build copies"
        );
    }
}

/// The dependency layer's `RUN`, run for real up to its `cargo build` (no container
/// engine here): in a scratch directory holding what the builder stage has at that point
/// (`Cargo.toml`, `Cargo.lock`), its stub-making commands leave a tree in which cargo finds
/// every target the manifest declares. A bench or test added to `Cargo.toml` without a stub
/// made `cargo build` fail there, and with it the image.
#[test]
fn the_dependency_layers_stubs_give_cargo_every_target_the_manifest_declares() {
    let stages = dockerfile();
    let run = stages
        .iter()
        .flat_map(|s| &s.instructions)
        .find(|i| i.keyword == "RUN" && i.args.contains("cargo build"))
        .expect("a RUN that runs cargo build");
    let before_build: Vec<&str> = run
        .args
        .split("&&")
        .map(str::trim)
        .take_while(|part| !part.contains("cargo build"))
        .collect();
    assert!(
        !before_build.is_empty(),
        "line {}: no stubs are made",
        run.line
    );
    let scratch = tempfile::tempdir().expect("a scratch directory");
    for file in ["Cargo.toml", "Cargo.lock"] {
        std::fs::copy(repo(file), scratch.path().join(file)).expect("the manifest files");
    }
    let script = before_build.join(" && ");
    let made = std::process::Command::new("sh")
        .args(["-ec", &script])
        .current_dir(scratch.path())
        .output()
        .expect("sh runs");
    assert!(
        made.status.success(),
        "line {}: `{script}` failed: {}",
        run.line,
        String::from_utf8_lossy(&made.stderr)
    );
    // The layer's own `cargo build`, stopped once cargo has found its targets: asked for a
    // binary that does not exist, it names that binary if it found every declared target,
    // and the missing stub if one is not there, before it compiles anything.
    let build = run
        .args
        .split("&&")
        .map(str::trim)
        .find(|part| part.starts_with("cargo build"))
        .expect("the cargo build");
    let words: Vec<&str> = build.split_whitespace().skip(1).collect();
    let probe = std::process::Command::new(env!("CARGO"))
        .args(&words)
        .args(["--offline", "--bin", "no-such-binary-in-haptor"])
        .current_dir(scratch.path())
        .env_remove("CARGO_TARGET_DIR")
        .output()
        .expect("cargo runs");
    let stderr = String::from_utf8_lossy(&probe.stderr);
    assert!(
        stderr.contains("no bin target named `no-such-binary-in-haptor`"),
        "line {}: after the stubs, `{build}` does not find every target the manifest declares:\n{stderr}",
        run.line
    );
}

/// The arguments of the runtime stage's last `keyword` instruction.
fn last_args<'a>(stage: &'a Stage, keyword: &str) -> &'a str {
    stage
        .instructions
        .iter()
        .rev()
        .find(|i| i.keyword == keyword)
        .map(|i| i.args.as_str())
        .unwrap_or_else(|| panic!("the runtime stage has no {keyword}"))
}

/// A JSON file of the OCI layout, by its digest.
fn blob(layout: &Path, digest: &str) -> serde_json::Value {
    let hex = digest.strip_prefix("sha256:").expect("a sha256 digest");
    let text = std::fs::read_to_string(layout.join("blobs/sha256").join(hex)).expect("the blob");
    serde_json::from_str(&text).expect("a JSON blob")
}

#[test]
fn the_image_built_without_docker_is_the_runtime_stage_and_its_binary_runs_in_it_as_its_user() {
    let dir = tempfile::tempdir().expect("a temp dir");
    let layout = dir.path().join("haptor");
    let output = std::process::Command::new(repo("scripts/build-image"))
        .args(["--binary", env!("CARGO_BIN_EXE_haptor"), "--out"])
        .arg(&layout)
        .output()
        .expect("scripts/build-image runs");
    assert!(
        output.status.success(),
        "scripts/build-image failed:\n{}",
        String::from_utf8_lossy(&output.stderr)
    );

    // The image's configuration is what the Dockerfile's runtime stage says.
    let index: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(layout.join("index.json")).expect("index.json"),
    )
    .expect("an OCI index");
    let manifest = blob(
        &layout,
        index["manifests"][0]["digest"]
            .as_str()
            .expect("a manifest"),
    );
    let image = blob(
        &layout,
        manifest["config"]["digest"].as_str().expect("a config"),
    );
    let config = &image["config"];
    let stages = dockerfile();
    let runtime = final_stage(&stages);
    let user = last_args(runtime, "USER");
    assert_eq!(config["User"], user);
    let exec = |keyword| -> Vec<String> {
        serde_json::from_str(last_args(runtime, keyword)).expect("an exec-form list")
    };
    assert_eq!(config["Entrypoint"], serde_json::json!(exec("ENTRYPOINT")));
    assert_eq!(config["Cmd"], serde_json::json!(exec("CMD")));
    let env: Vec<String> = serde_json::from_value(config["Env"].clone()).expect("Env");
    let haproxy_bin = last_args(runtime, "ENV");
    assert!(
        env.iter().any(|e| e == haproxy_bin),
        "{env:?} has {haproxy_bin}"
    );
    for port in last_args(runtime, "EXPOSE").split_whitespace() {
        assert!(
            config["ExposedPorts"].get(format!("{port}/tcp")).is_some(),
            "port {port} is exposed: {config}"
        );
    }
    assert_eq!(image["os"], "linux");

    // Its binary runs in it, as its user, and checks renders with the stage's haproxy.
    let bundle = dir.path().join("bundle");
    let unpacked = std::process::Command::new("umoci")
        .args(["unpack", "--image"])
        .arg(format!("{}:dev", layout.display()))
        .arg(&bundle)
        .output()
        .expect("umoci runs");
    assert!(
        unpacked.status.success(),
        "{}",
        String::from_utf8_lossy(&unpacked.stderr)
    );
    let entrypoint = exec("ENTRYPOINT");
    let version = std::process::Command::new("chroot")
        .arg(format!("--userspec={user}"))
        .arg(bundle.join("rootfs"))
        .arg(&entrypoint[0])
        .arg("version")
        .env_clear()
        .envs(env.iter().filter_map(|e| e.split_once('=')))
        .output()
        .expect("chroot runs");
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&version.stderr)
    );
    let checker = haproxy_bin
        .strip_prefix("HAPROXY_BIN=")
        .expect("HAPROXY_BIN=");
    let line = chart_values()["image"]["haproxyVersion"]
        .as_str()
        .expect("image.haproxyVersion")
        .to_string();
    assert!(
        text.contains(&format!("haproxy -c checker: {checker} (HAProxy {line}")),
        "the image's haptor finds the image's haproxy, of the chart's line {line}:\n{text}"
    );
}
