//! Reading folders of manifests: every `*.yaml`, `*.yml` and `*.json` file in a folder and
//! its subfolders (hidden entries skipped), in path order, parsed by
//! `pure::manifests::parse_manifests`. A file that cannot be read becomes a problem naming
//! it; the others are still read.

use std::path::{Path, PathBuf};

use crate::pure::manifests::{ManifestError, ManifestSet, is_manifest_file, parse_manifests};

/// Reads every `*.yaml`, `*.yml` and `*.json` file directly in `dir` and in its
/// subdirectories (hidden entries skipped), in path order.
pub fn load_dir(dir: &Path) -> Result<ManifestSet, ManifestError> {
    let files = manifest_files(dir)?;
    let mut set = ManifestSet::default();
    for file in files {
        match std::fs::read_to_string(&file) {
            Ok(text) => {
                let parsed = parse_manifests(&file, &text);
                set.manifests.extend(parsed.manifests);
                set.problems.extend(parsed.problems);
            }
            Err(e) => set.problems.push(ManifestError {
                file: file.clone(),
                line: None,
                message: format!("cannot read: {e}"),
            }),
        }
    }
    Ok(set)
}

/// The manifest files (by extension) directly in `dir` and in its subdirectories, hidden
/// entries skipped, in path order.
pub fn manifest_files(dir: &Path) -> Result<Vec<PathBuf>, ManifestError> {
    let mut files = Vec::new();
    collect_files(dir, &mut files)?;
    files.sort();
    Ok(files)
}

fn collect_files(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), ManifestError> {
    let entries = std::fs::read_dir(dir).map_err(|e| ManifestError {
        file: dir.to_path_buf(),
        line: None,
        message: format!("cannot read the folder: {e}"),
    })?;
    for entry in entries.flatten() {
        let path = entry.path();
        let hidden = entry.file_name().to_string_lossy().starts_with('.');
        if hidden {
            continue;
        }
        if path.is_dir() {
            collect_files(&path, out)?;
        } else if is_manifest_file(&path) {
            out.push(path);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pure::manifests::Manifest;

    #[test]
    fn a_folder_is_read_in_path_order_skipping_hidden_entries() {
        let dir = tempfile::tempdir().expect("tempdir");
        std::fs::write(
            dir.path().join("b.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: b}\n",
        )
        .expect("write");
        std::fs::write(
            dir.path().join("a.yml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: a}\n",
        )
        .expect("write");
        std::fs::write(dir.path().join("notes.txt"), "not a manifest").expect("write");
        std::fs::create_dir(dir.path().join(".haptor")).expect("mkdir");
        std::fs::write(
            dir.path().join(".haptor/x.yaml"),
            "apiVersion: v1\nkind: Service\nmetadata: {name: hidden}\n",
        )
        .expect("write");
        let set = load_dir(dir.path()).expect("reads");
        let names: Vec<String> = set.manifests.iter().map(Manifest::display_name).collect();
        assert_eq!(names, vec!["Service default/a", "Service default/b"]);
    }
}
