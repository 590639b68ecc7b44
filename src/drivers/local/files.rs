//! The local target's files: atomic writes (a temporary file in the same directory, then a
//! rename), the manifest naming the auxiliary files of the last deployment, reading a
//! deployment back from disk (so planning and drift detection work after a controller
//! restart), snapshots that put files back after a failed reload, and the fencing epoch.

use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::pure::rendered::{AuxFile, AuxKind, RenderedConfig};

use super::LocalTargetError;
use super::layout::{WorkDir, inject_local_settings, strip_local_settings, with_local_settings};

/// The mode of a new file HAProxy reads: HAProxy may run as another user than haptor (a
/// sidecar sharing the directory), so it must be readable by others.
const READABLE_MODE: u32 = 0o644;

/// The mode of a new certificate file (it holds a private key).
const PRIVATE_MODE: u32 = 0o600;

/// Writes a file atomically: readers see the old content or the new one, never a mix. A
/// replaced file keeps its permissions; a new one gets mode 0644.
pub(crate) fn write_atomic(path: &Path, content: &[u8]) -> Result<(), LocalTargetError> {
    write_atomic_with(path, &[content], READABLE_MODE, false)
}

/// Like [`write_atomic`], with the content given in parts written one after the other.
fn write_atomic_parts(path: &Path, parts: &[&[u8]]) -> Result<(), LocalTargetError> {
    write_atomic_with(path, parts, READABLE_MODE, false)
}

/// Like [`write_atomic`], but a new file gets mode 0600 (certificates and their keys).
pub(crate) fn write_private(path: &Path, content: &[u8]) -> Result<(), LocalTargetError> {
    write_atomic_with(path, &[content], PRIVATE_MODE, false)
}

fn write_atomic_with(
    path: &Path,
    parts: &[&[u8]],
    new_mode: u32,
    durable: bool,
) -> Result<(), LocalTargetError> {
    let failure = |action: &'static str| {
        let path = path.to_path_buf();
        move |source| LocalTargetError::Io {
            action,
            path,
            source,
        }
    };
    let dir = path.parent().unwrap_or(Path::new("."));
    fs::create_dir_all(dir).map_err(failure("create the directory of"))?;
    let mut temp = tempfile::NamedTempFile::new_in(dir).map_err(failure("write"))?;
    for part in parts {
        temp.write_all(part).map_err(failure("write"))?;
    }
    let permissions = match fs::metadata(path) {
        Ok(existing) => existing.permissions(),
        Err(_) => fs::Permissions::from_mode(new_mode),
    };
    temp.as_file()
        .set_permissions(permissions)
        .map_err(failure("set the permissions of"))?;
    if durable {
        temp.as_file().sync_all().map_err(failure("write"))?;
    }
    put_in_place(temp, path).map_err(failure("replace"))
}

/// Puts a written temporary file at `path` in one step: readers see the old file or the new
/// one. A regular file already there is exchanged with the new one (`renameat2` with
/// `RENAME_EXCHANGE`) and then deleted under the temporary name: ext4 writes a file renamed
/// over another out to disk before the rename returns (its `auto_da_alloc` safeguard), which
/// took milliseconds for `haproxy.cfg` at 10 000 backends on every endpoint change, while an
/// exchange returns at once. Anything else (no file there yet, a directory, a file system or
/// kernel without exchange) is a plain rename, as before.
fn put_in_place(temp: tempfile::NamedTempFile, path: &Path) -> io::Result<()> {
    #[cfg(target_os = "linux")]
    if fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_file()) {
        use rustix::fs::{CWD, RenameFlags, renameat_with};
        use rustix::io::Errno;
        match renameat_with(CWD, temp.path(), CWD, path, RenameFlags::EXCHANGE) {
            Ok(()) => {
                // The temporary name holds the old file now. The new one is in place
                // whatever happens to the old one, so failing to delete it is only told.
                let old = temp.path().to_path_buf();
                if let Err(error) = temp.close() {
                    tracing::warn!(path = %old.display(), %error, "cannot delete a replaced file");
                }
                return Ok(());
            }
            Err(Errno::NOENT | Errno::INVAL | Errno::NOSYS | Errno::OPNOTSUPP) => {}
            Err(error) => return Err(error.into()),
        }
    }
    temp.persist(path).map(drop).map_err(|e| e.error)
}

/// Removes a file; one that is already gone is fine.
pub(crate) fn remove(path: &Path) -> Result<(), LocalTargetError> {
    match fs::remove_file(path) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => Err(LocalTargetError::Io {
            action: "delete",
            path: path.to_path_buf(),
            source: e,
        }),
        _ => Ok(()),
    }
}

fn read_optional(path: &Path) -> Result<Option<Vec<u8>>, LocalTargetError> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LocalTargetError::Io {
            action: "read",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// One auxiliary file of the last deployment, as the manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct ManifestEntry {
    path: String,
    kind: AuxKind,
    name: String,
}

/// What the last deployment wrote besides `haproxy.cfg`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Manifest {
    aux_files: Vec<ManifestEntry>,
}

/// The manifest text for a render.
pub(crate) fn manifest_for(rendered: &RenderedConfig) -> String {
    let manifest = Manifest {
        aux_files: rendered
            .aux_files
            .values()
            .map(|f| ManifestEntry {
                path: f.path.clone(),
                kind: f.kind,
                name: f.name.clone(),
            })
            .collect(),
    };
    // A struct of strings and a unit enum always serializes.
    serde_json::to_string_pretty(&manifest).unwrap_or_default()
}

/// Whether two renders have the same manifest: the same auxiliary files by path, kind and
/// name (their contents aside).
pub(crate) fn same_manifest(a: &RenderedConfig, b: &RenderedConfig) -> bool {
    a.aux_files.len() == b.aux_files.len()
        && a.aux_files
            .values()
            .zip(b.aux_files.values())
            .all(|(x, y)| x.path == y.path && x.kind == y.kind && x.name == y.name)
}

/// The text written to `haproxy.cfg` for a render.
pub(crate) fn config_text(rendered: &RenderedConfig, work_dir: &WorkDir) -> String {
    inject_local_settings(&rendered.haproxy_cfg, work_dir)
}

/// Writes `haproxy.cfg` for a render: [`config_text`], from its parts.
pub(crate) fn write_config(
    rendered: &RenderedConfig,
    work_dir: &WorkDir,
) -> Result<(), LocalTargetError> {
    let parts = with_local_settings(&rendered.haproxy_cfg, work_dir);
    let bytes: Vec<&[u8]> = parts.iter().map(|part| part.as_bytes()).collect();
    write_atomic_parts(&work_dir.config_file(), &bytes)
}

/// The deployment the work directory holds, read back from disk: `haproxy.cfg` without the
/// local settings, and the auxiliary files the manifest names. `None` when haptor never
/// deployed here (no manifest, or one that cannot be read, which the next deployment
/// rewrites). Edits behind haptor's back show up in the result, so its checksum differs from
/// the render's (drift); a `haproxy.cfg` whose local settings were edited is returned as it
/// is on disk, so it differs too.
pub(crate) fn read_back(work_dir: &WorkDir) -> Result<Option<RenderedConfig>, LocalTargetError> {
    let manifest_path = work_dir.manifest_file();
    let Some(manifest_bytes) = read_optional(&manifest_path)? else {
        return Ok(None);
    };
    let manifest: Manifest = match serde_json::from_slice(&manifest_bytes) {
        Ok(manifest) => manifest,
        Err(e) => {
            tracing::warn!(
                manifest = %manifest_path.display(),
                error = %e,
                "the deployment manifest cannot be read; the next deployment rewrites everything"
            );
            return Ok(None);
        }
    };
    let written = read_optional(&work_dir.config_file())?
        .map(|bytes| String::from_utf8_lossy(&bytes).into_owned())
        .unwrap_or_default();
    let stripped = strip_local_settings(&written);
    let haproxy_cfg = if inject_local_settings(&stripped, work_dir) == written {
        stripped
    } else {
        written
    };
    let mut rendered = RenderedConfig {
        haproxy_cfg,
        ..RenderedConfig::default()
    };
    for entry in manifest.aux_files {
        let Ok(path) = work_dir.aux_file(&entry.path) else {
            continue;
        };
        if let Some(bytes) = read_optional(&path)? {
            rendered.aux_files.insert(
                entry.path.clone(),
                AuxFile {
                    kind: entry.kind,
                    name: entry.name,
                    path: entry.path,
                    content: String::from_utf8_lossy(&bytes).into_owned(),
                },
            );
        }
    }
    Ok(Some(rendered))
}

/// What the filesystem says about one file haptor wrote: its length, modification time and
/// inode. Writes are atomic renames, so each gets a new inode; an edit in place changes the
/// time or the length. Equal stamps mean nobody wrote the file since.
#[derive(Debug, Clone, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

/// The stamps of the files of one deployment, taken right after haptor wrote them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct WrittenStamps(Vec<(PathBuf, Option<FileStamp>)>);

impl WrittenStamps {
    /// Stamps `haproxy.cfg`, the manifest and every auxiliary file of `rendered` as they are
    /// now (a missing file is stamped as missing).
    pub(crate) fn take(
        work_dir: &WorkDir,
        rendered: &RenderedConfig,
    ) -> Result<WrittenStamps, LocalTargetError> {
        let mut paths = vec![work_dir.config_file(), work_dir.manifest_file()];
        for path in rendered.aux_files.keys() {
            paths.push(work_dir.aux_file(path)?);
        }
        let mut stamps = Vec::with_capacity(paths.len());
        for path in paths {
            let stamp = stamp_of(&path)?;
            stamps.push((path, stamp));
        }
        Ok(WrittenStamps(stamps))
    }

    /// Whether every file still has the stamp it had when haptor wrote it.
    pub(crate) fn still_hold(&self) -> Result<bool, LocalTargetError> {
        for (path, stamp) in &self.0 {
            if stamp_of(path)? != *stamp {
                return Ok(false);
            }
        }
        Ok(true)
    }
}

fn stamp_of(path: &Path) -> Result<Option<FileStamp>, LocalTargetError> {
    use std::os::unix::fs::MetadataExt;
    match fs::metadata(path) {
        Ok(meta) => Ok(Some(FileStamp {
            len: meta.len(),
            modified: meta.modified().ok(),
            inode: meta.ino(),
        })),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(LocalTargetError::Io {
            action: "inspect",
            path: path.to_path_buf(),
            source,
        }),
    }
}

/// The bytes some files had before a deployment touched them, to put back if HAProxy refuses
/// the new configuration (`None`: the file did not exist).
#[derive(Debug, Default)]
pub(crate) struct Snapshot {
    files: Vec<(PathBuf, Option<Vec<u8>>)>,
}

impl Snapshot {
    pub(crate) fn capture(
        paths: impl IntoIterator<Item = PathBuf>,
    ) -> Result<Snapshot, LocalTargetError> {
        let mut files = Vec::new();
        for path in paths {
            let content = read_optional(&path)?;
            files.push((path, content));
        }
        Ok(Snapshot { files })
    }

    /// Puts every file back as it was; keeps going past failures and reports the first.
    pub(crate) fn restore(&self) -> Result<(), LocalTargetError> {
        let mut first_error = None;
        for (path, content) in &self.files {
            let result = match content {
                Some(bytes) => write_atomic(path, bytes),
                None => remove(path),
            };
            if let Err(e) = result {
                tracing::error!(error = %e, "cannot restore a file after a failed deployment");
                first_error.get_or_insert(e);
            }
        }
        first_error.map_or(Ok(()), Err)
    }
}

/// The highest epoch accepted so far (0 when none was ever stored).
pub(crate) fn read_epoch(work_dir: &WorkDir) -> Result<u64, LocalTargetError> {
    let path = work_dir.epoch_file();
    let Some(bytes) = read_optional(&path)? else {
        return Ok(0);
    };
    let text = String::from_utf8_lossy(&bytes);
    text.trim()
        .parse()
        .map_err(|_| LocalTargetError::BadEpochFile {
            path,
            content: text.trim().chars().take(40).collect(),
        })
}

/// Stores a newly accepted epoch durably before anything it allows happens.
pub(crate) fn write_epoch(work_dir: &WorkDir, epoch: u64) -> Result<(), LocalTargetError> {
    write_atomic_with(
        &work_dir.epoch_file(),
        &[format!("{epoch}\n").as_bytes()],
        READABLE_MODE,
        true,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rendered() -> RenderedConfig {
        let mut r = RenderedConfig {
            haproxy_cfg: "global\n  maxconn 5\ndefaults\n  mode http\n".into(),
            ..Default::default()
        };
        r.aux_files.insert(
            "maps/hosts.map".into(),
            AuxFile {
                kind: AuxKind::Map,
                name: "hosts.map".into(),
                path: "maps/hosts.map".into(),
                content: "a.example be_a\n".into(),
            },
        );
        r
    }

    fn write_all(work_dir: &WorkDir, r: &RenderedConfig) {
        write_atomic(&work_dir.config_file(), config_text(r, work_dir).as_bytes()).expect("cfg");
        for (path, file) in &r.aux_files {
            write_atomic(
                &work_dir.aux_file(path).expect("safe"),
                file.content.as_bytes(),
            )
            .expect("aux");
        }
        write_atomic(&work_dir.manifest_file(), manifest_for(r).as_bytes()).expect("manifest");
    }

    #[test]
    fn a_deployment_reads_back_as_the_render_it_came_from() {
        let dir = tempfile::tempdir().expect("temp dir");
        let wd = WorkDir::new(dir.path()).expect("work dir");
        assert_eq!(read_back(&wd).expect("reads"), None);
        let r = rendered();
        write_all(&wd, &r);
        assert_eq!(read_back(&wd).expect("reads"), Some(r));
    }

    #[test]
    fn haproxy_cfg_written_from_its_parts_is_the_text_with_the_local_settings() {
        let dir = tempfile::tempdir().expect("temp dir");
        let wd = WorkDir::new(dir.path()).expect("work dir");
        for cfg in [
            "global\n  daemon\nbackend b\n",
            "defaults\n  mode http\n",
            "",
        ] {
            let r = RenderedConfig {
                haproxy_cfg: cfg.into(),
                ..Default::default()
            };
            write_config(&r, &wd).expect("written");
            let written = fs::read_to_string(wd.config_file()).expect("read");
            assert_eq!(written, config_text(&r, &wd), "{cfg:?}");
        }
    }

    #[test]
    fn written_stamps_hold_until_any_file_is_touched() {
        let dir = tempfile::tempdir().expect("temp dir");
        let wd = WorkDir::new(dir.path()).expect("work dir");
        let r = rendered();
        write_all(&wd, &r);
        let stamps = WrittenStamps::take(&wd, &r).expect("stamps");
        assert!(stamps.still_hold().expect("stats"));

        // Same length, same inode, in place: only the modification time tells. Wait past the
        // file system's timestamp granularity first.
        std::thread::sleep(std::time::Duration::from_millis(20));
        let map = wd.aux_file("maps/hosts.map").expect("safe");
        fs::write(&map, "a.example be_b\n").expect("edit");
        assert!(!stamps.still_hold().expect("stats"), "an edit in place");

        write_all(&wd, &r);
        let stamps = WrittenStamps::take(&wd, &r).expect("stamps");
        // An identical rewrite by someone else is a new file, and so not ours any more.
        write_atomic(&wd.config_file(), config_text(&r, &wd).as_bytes()).expect("cfg");
        assert!(!stamps.still_hold().expect("stats"), "a replaced file");

        let stamps = WrittenStamps::take(&wd, &r).expect("stamps");
        fs::remove_file(&map).expect("delete");
        assert!(!stamps.still_hold().expect("stats"), "a deleted file");
    }

    #[test]
    fn an_edit_behind_the_targets_back_changes_the_checksum() {
        let dir = tempfile::tempdir().expect("temp dir");
        let wd = WorkDir::new(dir.path()).expect("work dir");
        let r = rendered();
        write_all(&wd, &r);
        fs::write(wd.aux_file("maps/hosts.map").expect("safe"), "x y\n").expect("edit");
        let back = read_back(&wd).expect("reads").expect("deployed");
        assert_ne!(back.checksum(), r.checksum());

        write_all(&wd, &r);
        let written = fs::read_to_string(wd.config_file()).expect("cfg");
        let without_socket: String = written
            .lines()
            .filter(|l| !l.contains("stats socket"))
            .map(|l| format!("{l}\n"))
            .collect();
        fs::write(wd.config_file(), without_socket).expect("edit");
        let back = read_back(&wd).expect("reads").expect("deployed");
        assert_ne!(
            back.checksum(),
            r.checksum(),
            "a removed local setting is drift"
        );
    }

    #[test]
    fn a_snapshot_puts_back_changed_files_and_removes_new_ones() {
        let dir = tempfile::tempdir().expect("temp dir");
        let existing = dir.path().join("a");
        let created = dir.path().join("sub/b");
        fs::write(&existing, "old").expect("write");
        let snapshot = Snapshot::capture([existing.clone(), created.clone()]).expect("capture");
        write_atomic(&existing, b"new").expect("write");
        write_atomic(&created, b"new").expect("write");
        snapshot.restore().expect("restore");
        assert_eq!(fs::read_to_string(&existing).expect("read"), "old");
        assert!(!created.exists());
    }

    #[test]
    fn new_files_are_readable_by_haproxy_certificates_are_private_and_modes_are_kept() {
        let dir = tempfile::tempdir().expect("temp dir");
        let mode = |p: &Path| fs::metadata(p).expect("exists").permissions().mode() & 0o777;
        let cfg = dir.path().join("haproxy.cfg");
        let cert = dir.path().join("ssl/site.pem");
        write_atomic(&cfg, b"global\n").expect("write");
        write_private(&cert, b"key").expect("write");
        assert_eq!(mode(&cfg), 0o644);
        assert_eq!(mode(&cert), 0o600);
        fs::set_permissions(&cfg, fs::Permissions::from_mode(0o640)).expect("chmod");
        write_atomic(&cfg, b"global\n  maxconn 1\n").expect("write");
        assert_eq!(mode(&cfg), 0o640, "a replaced file keeps its mode");
    }

    #[test]
    fn a_replaced_file_is_a_new_file_and_leaves_nothing_else_in_its_directory() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().expect("temp dir");
        let cfg = dir.path().join("haproxy.cfg");
        write_atomic(&cfg, b"global\n").expect("write");
        let first = fs::metadata(&cfg).expect("exists").ino();
        write_atomic(&cfg, b"global\n  maxconn 1\n").expect("write");
        assert_eq!(fs::read(&cfg).expect("read"), b"global\n  maxconn 1\n");
        assert_ne!(fs::metadata(&cfg).expect("exists").ino(), first);
        let names: Vec<_> = fs::read_dir(dir.path())
            .expect("listed")
            .map(|entry| entry.expect("entry").file_name())
            .collect();
        assert_eq!(names, ["haproxy.cfg"]);

        // A directory in the way is not replaced.
        let taken = dir.path().join("maps");
        fs::create_dir(&taken).expect("mkdir");
        assert!(write_atomic(&taken, b"x").is_err());
        assert!(taken.is_dir());
    }

    #[test]
    fn the_epoch_survives_in_its_file_and_garbage_is_an_error_naming_it() {
        let dir = tempfile::tempdir().expect("temp dir");
        let wd = WorkDir::new(dir.path()).expect("work dir");
        assert_eq!(read_epoch(&wd).expect("reads"), 0);
        write_epoch(&wd, 42).expect("writes");
        assert_eq!(read_epoch(&wd).expect("reads"), 42);
        fs::write(wd.epoch_file(), "forty-two").expect("edit");
        let err = read_epoch(&wd).expect_err("garbage");
        assert!(err.to_string().contains("haptor-epoch"), "{err}");
    }
}
