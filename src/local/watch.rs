//! When `haptor local` scans its manifest folder: the folder is watched with inotify (the
//! `notify` crate), and a change it reports is scanned at once; a timer keeps scanning
//! beside the watch, or alone when there is no watch.
//!
//! Changes come in bursts (an editor's save is a handful of events, a copied folder
//! thousands): every change already queued when a scan starts is covered by that one scan.
//! Events that cannot change what a scan reads are dropped where they arrive: opens, reads
//! and closes without a write (the scans' own among them), hidden entries (the scan skips
//! them) and anything under the work directory, where haproxy's files, logs and sockets are
//! written all the time (`DIR/.haptor` by default); a file's content changing is scanned on
//! the next tick, and only a change that completes (a write closed, a rename, a removal, new
//! metadata) at once, so a file is seldom read half written.
//!
//! The timer ticks every [`SCAN_INTERVAL`]. With a watch, a tick scans while the last scan
//! left something to look at again (a file within its vanishing grace, which only timed
//! scans end, so `folder::VANISHED_SCANS` stays a time; a file to read again; the folder
//! gone), when a change asked for the next tick, and otherwise every
//! [`SAFETY_SCAN_INTERVAL`], for what inotify does not tell: the default certificate's
//! Secret, read from the work directory; a file written into a new subfolder before its
//! watch was added; a file system that reports nothing. Without a watch (it could not be
//! made, for inotify's limits or a file system without inotify, or it reported an error,
//! which is told once as a warning) every tick scans, as polling does. A folder deleted or
//! moved away takes its watch with it: once it can be read again, the watch is made anew.
//!
//! The decisions are plain code tested directly: [`ChangeFilter`] (which events matter, and
//! how soon) and [`ScanSchedule`] (when to scan); [`FolderWatch`] is the edge.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use notify::event::{AccessKind, AccessMode, CreateKind, ModifyKind, RemoveKind};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::mpsc;

use crate::pure::manifests::is_manifest_file;

/// The timer's tick: how often the folder is polled without a watch, and scanned with one
/// while the last scan left something to look at again.
pub const SCAN_INTERVAL: Duration = Duration::from_millis(100);

/// With a watch, the longest time between two scans when nothing asked for one.
pub const SAFETY_SCAN_INTERVAL: Duration = Duration::from_secs(1);

/// What changes ask of the scanner; merged over a burst with `|`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Wanted {
    /// A scan at once.
    pub now: bool,
    /// A timed scan, on the next tick.
    pub next_tick: bool,
    /// The watch to be made again once the folder can be read (the folder itself was
    /// deleted or moved away, and its watch with it).
    pub rewatch: bool,
}

impl Wanted {
    pub const NOTHING: Wanted = Wanted {
        now: false,
        next_tick: false,
        rewatch: false,
    };
    pub const NOW: Wanted = Wanted {
        now: true,
        ..Wanted::NOTHING
    };
    pub const NEXT_TICK: Wanted = Wanted {
        next_tick: true,
        ..Wanted::NOTHING
    };
}

impl std::ops::BitOr for Wanted {
    type Output = Wanted;

    fn bitor(self, other: Wanted) -> Wanted {
        Wanted {
            now: self.now || other.now,
            next_tick: self.next_tick || other.next_tick,
            rewatch: self.rewatch || other.rewatch,
        }
    }
}

impl std::ops::BitOrAssign for Wanted {
    fn bitor_assign(&mut self, other: Wanted) {
        *self = *self | other;
    }
}

/// Which of the watch's events can change what a scan of the folder reads.
#[derive(Debug, Clone)]
pub struct ChangeFilter {
    dir: PathBuf,
    /// `None` when the folder is inside it: then haproxy writes outside the folder.
    work_dir: Option<PathBuf>,
}

impl ChangeFilter {
    /// For the folder `dir` (as the watch names it) and the work directory `work_dir`
    /// haptor and haproxy write into.
    pub fn new(dir: impl Into<PathBuf>, work_dir: impl Into<PathBuf>) -> ChangeFilter {
        let (dir, work_dir) = (dir.into(), work_dir.into());
        ChangeFilter {
            work_dir: (!dir.starts_with(&work_dir)).then_some(work_dir),
            dir,
        }
    }

    /// What `event` asks of the scanner.
    pub fn wanted(&self, event: &Event) -> Wanted {
        if event.need_rescan() {
            // The kernel's queue overflowed: changes were lost.
            return Wanted::NOW;
        }
        // The kind's wish, and whether it is only about files (so only a manifest file's
        // matters; one about a path that may be a directory matters whatever its name).
        let (wanted, files_only) = match event.kind {
            EventKind::Access(AccessKind::Close(AccessMode::Write)) => (Wanted::NOW, true),
            // Opens, reads and closes without a write change nothing; the scans make them.
            EventKind::Access(_) => return Wanted::NOTHING,
            // A new file is empty until its writer closes it.
            EventKind::Create(CreateKind::File) | EventKind::Modify(ModifyKind::Data(_)) => {
                (Wanted::NEXT_TICK, true)
            }
            // A new subfolder: scanned at once and on the next tick, for files written into
            // it before its watch was added.
            EventKind::Create(CreateKind::Folder) => (Wanted::NOW | Wanted::NEXT_TICK, false),
            EventKind::Remove(RemoveKind::File) => (Wanted::NOW, true),
            // Renames, metadata (a chmod, a modification time), removals of folders, and
            // whatever the watch cannot classify.
            EventKind::Create(_)
            | EventKind::Modify(_)
            | EventKind::Remove(_)
            | EventKind::Any
            | EventKind::Other => (Wanted::NOW, false),
        };
        let root_gone = matches!(
            event.kind,
            EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(_))
        ) && event.paths.iter().any(|path| path == &self.dir);
        if root_gone {
            return Wanted {
                rewatch: true,
                ..wanted
            };
        }
        let matters = event.paths.is_empty()
            || event
                .paths
                .iter()
                .any(|path| self.scan_reads(path, files_only));
        if matters { wanted } else { Wanted::NOTHING }
    }

    /// Whether a scan of the folder reads `path`: a manifest file (or, unless `file`, a
    /// folder of any name) in the folder, not hidden and not in the work directory.
    fn scan_reads(&self, path: &Path, file: bool) -> bool {
        if self
            .work_dir
            .as_ref()
            .is_some_and(|work_dir| path.starts_with(work_dir))
        {
            return false;
        }
        if file && !is_manifest_file(path) {
            return false;
        }
        // A path outside the folder (one the watch reached through a symbolic link, say)
        // is taken as read.
        let Ok(relative) = path.strip_prefix(&self.dir) else {
            return true;
        };
        !relative.components().any(|part| {
            matches!(part, std::path::Component::Normal(name) if name.to_string_lossy().starts_with('.'))
        })
    }
}

/// Which scan to run: a timed one counts toward a vanished file's grace, one a change asked
/// for does not (`ManifestFolder::scan`, `ManifestFolder::scan_for_change`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scan {
    Timed,
    ForChange,
}

/// When to scan, from the timer's ticks, the watch's changes and what the last scan left.
#[derive(Debug)]
pub struct ScanSchedule {
    watching: bool,
    last_scan: Instant,
    /// A change asked for a timed scan on the next tick.
    next_tick: bool,
    /// The last scan left something to look at again.
    recheck: bool,
    /// The watch is to be made again once the folder can be read.
    rewatch: bool,
}

impl ScanSchedule {
    /// After the first scan, made at `now` (`recheck`: as [`ScanSchedule::scanned`] takes
    /// it); `watching` whether the folder is watched.
    pub fn new(watching: bool, now: Instant, recheck: bool) -> ScanSchedule {
        ScanSchedule {
            watching,
            last_scan: now,
            next_tick: false,
            recheck,
            rewatch: false,
        }
    }

    /// Whether the folder is watched (else polled).
    pub fn watching(&self) -> bool {
        self.watching
    }

    /// The watch is gone for good (it could not be made again, or it reported an error):
    /// every tick scans from now on.
    pub fn watch_lost(&mut self) {
        self.watching = false;
        self.rewatch = false;
    }

    /// On a tick of the timer: whether to run a timed scan.
    pub fn on_tick(&self, now: Instant) -> bool {
        !self.watching
            || self.next_tick
            || self.recheck
            || now.saturating_duration_since(self.last_scan) >= SAFETY_SCAN_INTERVAL
    }

    /// On the changes the watch reported (every one queued, merged): whether to scan at once.
    pub fn on_change(&mut self, wanted: Wanted) -> bool {
        self.next_tick |= wanted.next_tick;
        self.rewatch |= wanted.rewatch && self.watching;
        wanted.now
    }

    /// After a scan made at `now`: `recheck` is whether it left something to look at again
    /// (`ManifestFolder::needs_rescan`), `readable` whether it could read the folder. Returns
    /// whether to make the watch again, now.
    pub fn scanned(&mut self, scan: Scan, now: Instant, recheck: bool, readable: bool) -> bool {
        self.last_scan = now;
        self.recheck = recheck;
        if scan == Scan::Timed {
            self.next_tick = false;
        }
        if !readable {
            // Gone, or no longer readable: whatever comes back at that path needs a watch.
            self.rewatch = self.watching;
            return false;
        }
        let rewatch = std::mem::take(&mut self.rewatch);
        // What was written between this scan and the new watch is read on the next tick.
        self.next_tick |= rewatch;
        rewatch
    }
}

/// What the watch tells the run loop.
#[derive(Debug)]
pub enum Signal {
    /// Changes that matter, as [`ChangeFilter::wanted`] judged them.
    Change(Wanted),
    /// The watch failed; the folder must be polled.
    Failed(String),
}

impl Signal {
    /// Two signals as one: changes merge, a failure wins (the first one told).
    pub fn merge(self, later: Signal) -> Signal {
        match (self, later) {
            (Signal::Change(first), Signal::Change(second)) => Signal::Change(first | second),
            (Signal::Failed(why), _) | (_, Signal::Failed(why)) => Signal::Failed(why),
        }
    }
}

/// The folder's inotify watch (recursive: the scan reads subfolders), its events judged by a
/// [`ChangeFilter`] on the watch's thread, so those that do not matter wake nobody.
pub struct FolderWatch {
    _watcher: notify::RecommendedWatcher,
    signals: mpsc::UnboundedReceiver<Signal>,
}

impl FolderWatch {
    /// Watches `dir`, ignoring `work_dir` (an absolute path, resolved: the work directory's).
    pub fn start(dir: &Path, work_dir: &Path) -> Result<FolderWatch, notify::Error> {
        // Events name paths under the watched one: resolved, like the work directory's.
        let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
        let filter = ChangeFilter::new(dir.clone(), work_dir);
        let (sender, signals) = mpsc::unbounded_channel();
        let mut watcher = notify::recommended_watcher(move |result: notify::Result<Event>| {
            let signal = match result {
                Ok(event) => match filter.wanted(&event) {
                    Wanted::NOTHING => return,
                    wanted => Signal::Change(wanted),
                },
                Err(error) => Signal::Failed(describe(&error)),
            };
            // The run loop is gone when this fails: nothing to tell.
            let _ = sender.send(signal);
        })?;
        watcher.watch(&dir, RecursiveMode::Recursive)?;
        Ok(FolderWatch {
            _watcher: watcher,
            signals,
        })
    }

    /// The next signal, merged with every one queued behind it (one scan covers them all;
    /// only those queued by then, so a busy writer cannot keep this from returning).
    pub async fn next(&mut self) -> Signal {
        let Some(mut signal) = self.signals.recv().await else {
            return Signal::Failed("the watch stopped".into());
        };
        for _ in 0..self.signals.len() {
            match self.signals.try_recv() {
                Ok(more) => signal = signal.merge(more),
                Err(_) => break,
            }
        }
        signal
    }
}

/// A watch error, with what to do about inotify's limit.
pub fn describe(error: &notify::Error) -> String {
    match error.kind {
        notify::ErrorKind::MaxFilesWatch => format!(
            "{error} (inotify's limit on watches; raise the sysctl fs.inotify.max_user_watches)"
        ),
        // EMFILE from inotify_init: the limit on inotify instances, or on open files.
        notify::ErrorKind::Io(ref io) if io.raw_os_error() == Some(24) => format!(
            "{error} (inotify's limit on instances, the sysctl fs.inotify.max_user_instances, or the limit on open files)"
        ),
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use notify::event::{DataChange, MetadataKind, RenameMode};

    use super::*;

    fn filter() -> ChangeFilter {
        ChangeFilter::new("/m", "/m/.haptor")
    }

    fn event(kind: EventKind, paths: &[&str]) -> Event {
        paths
            .iter()
            .fold(Event::new(kind), |event, path| event.add_path(path.into()))
    }

    const CLOSE_WRITE: EventKind = EventKind::Access(AccessKind::Close(AccessMode::Write));
    const DATA: EventKind = EventKind::Modify(ModifyKind::Data(DataChange::Any));

    #[test]
    fn a_manifest_written_renamed_removed_or_touched_is_scanned_at_once() {
        let filter = filter();
        for kind in [
            CLOSE_WRITE,
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Remove(RemoveKind::File),
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
        ] {
            for path in ["/m/apps.yaml", "/m/sub/deeper/apps.json", "/m/x.yml"] {
                assert_eq!(
                    filter.wanted(&event(kind, &[path])),
                    Wanted::NOW,
                    "{kind:?} {path}"
                );
            }
        }
    }

    #[test]
    fn a_manifest_being_written_or_just_created_is_scanned_on_the_next_tick() {
        let filter = filter();
        assert_eq!(
            filter.wanted(&event(DATA, &["/m/apps.yaml"])),
            Wanted::NEXT_TICK
        );
        assert_eq!(
            filter.wanted(&event(
                EventKind::Create(CreateKind::File),
                &["/m/apps.yaml"]
            )),
            Wanted::NEXT_TICK
        );
    }

    #[test]
    fn a_new_subfolder_is_scanned_at_once_and_on_the_next_tick() {
        assert_eq!(
            filter().wanted(&event(EventKind::Create(CreateKind::Folder), &["/m/more"])),
            Wanted::NOW | Wanted::NEXT_TICK
        );
    }

    #[test]
    fn the_scans_own_reads_wake_nobody() {
        let filter = filter();
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
            EventKind::Access(AccessKind::Read),
        ] {
            assert_eq!(
                filter.wanted(&event(kind, &["/m/apps.yaml"])),
                Wanted::NOTHING
            );
            assert_eq!(filter.wanted(&event(kind, &["/m"])), Wanted::NOTHING);
        }
    }

    #[test]
    fn haproxys_writes_in_the_work_directory_wake_nobody_wherever_it_is() {
        for (filter, work) in [
            (filter(), "/m/.haptor"),
            // A work directory in the folder under a name that is not hidden.
            (ChangeFilter::new("/m", "/m/work"), "/m/work"),
        ] {
            for kind in [
                CLOSE_WRITE,
                DATA,
                EventKind::Create(CreateKind::File),
                EventKind::Create(CreateKind::Folder),
                EventKind::Remove(RemoveKind::File),
                EventKind::Modify(ModifyKind::Name(RenameMode::Both)),
                EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            ] {
                for file in [
                    "haproxy.cfg",
                    "haproxy.log",
                    "master.sock",
                    "maps/hosts.map",
                ] {
                    let path = format!("{work}/{file}");
                    assert_eq!(
                        filter.wanted(&event(kind, &[&path])),
                        Wanted::NOTHING,
                        "{kind:?} {path}"
                    );
                }
            }
        }
    }

    #[test]
    fn a_folder_inside_the_work_directory_is_watched_all_the_same() {
        let filter = ChangeFilter::new("/w/m", "/w");
        assert_eq!(
            filter.wanted(&event(CLOSE_WRITE, &["/w/m/apps.yaml"])),
            Wanted::NOW
        );
    }

    #[test]
    fn hidden_entries_and_files_that_are_no_manifests_wake_nobody() {
        let filter = filter();
        for (kind, path) in [
            (CLOSE_WRITE, "/m/.apps.yaml.swp"),
            (CLOSE_WRITE, "/m/.git/config.json"),
            (EventKind::Create(CreateKind::Folder), "/m/.git/objects"),
            (
                EventKind::Modify(ModifyKind::Name(RenameMode::To)),
                "/m/sub/.hidden/a.yaml",
            ),
            (CLOSE_WRITE, "/m/notes.txt"),
            (DATA, "/m/slice.yaml.tmp"),
            (EventKind::Remove(RemoveKind::File), "/m/slice.yaml.tmp"),
        ] {
            assert_eq!(
                filter.wanted(&event(kind, &[path])),
                Wanted::NOTHING,
                "{kind:?} {path}"
            );
        }
    }

    #[test]
    fn a_rename_matters_when_either_name_is_read_and_a_folders_whatever_its_name() {
        let filter = filter();
        let both = EventKind::Modify(ModifyKind::Name(RenameMode::Both));
        assert_eq!(
            filter.wanted(&event(both, &["/m/slice.yaml.tmp", "/m/slice.yaml"])),
            Wanted::NOW
        );
        assert_eq!(
            filter.wanted(&event(both, &["/m/a.yaml", "/m/.a.yaml.bak"])),
            Wanted::NOW
        );
        assert_eq!(
            filter.wanted(&event(
                EventKind::Remove(RemoveKind::Folder),
                &["/m/team-a"]
            )),
            Wanted::NOW
        );
    }

    #[test]
    fn a_lost_queue_or_an_unknown_event_is_scanned_at_once() {
        let filter = filter();
        let overflow = Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan);
        assert_eq!(filter.wanted(&overflow), Wanted::NOW);
        assert_eq!(filter.wanted(&event(EventKind::Any, &[])), Wanted::NOW);
    }

    #[test]
    fn the_folder_itself_deleted_or_moved_away_asks_for_a_new_watch() {
        let filter = filter();
        for kind in [
            EventKind::Remove(RemoveKind::Folder),
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
        ] {
            assert_eq!(
                filter.wanted(&event(kind, &["/m"])),
                Wanted {
                    rewatch: true,
                    ..Wanted::NOW
                }
            );
        }
        assert!(!filter.wanted(&event(CLOSE_WRITE, &["/m/a.yaml"])).rewatch);
    }

    #[test]
    fn signals_queued_behind_one_another_merge_into_one_and_a_failure_wins() {
        let merged = Signal::Change(Wanted::NEXT_TICK).merge(Signal::Change(Wanted::NOW));
        assert!(
            matches!(merged, Signal::Change(w) if w == Wanted::NOW | Wanted::NEXT_TICK),
            "{merged:?}"
        );
        let failed = Signal::Change(Wanted::NOW)
            .merge(Signal::Failed("first".into()))
            .merge(Signal::Failed("second".into()))
            .merge(Signal::Change(Wanted::NOW));
        assert!(
            matches!(&failed, Signal::Failed(why) if why == "first"),
            "{failed:?}"
        );
    }

    fn schedule(start: Instant) -> ScanSchedule {
        ScanSchedule::new(true, start, false)
    }

    #[test]
    fn a_watched_folder_is_scanned_by_the_timer_only_every_safety_interval_when_nothing_waits() {
        let start = Instant::now();
        let schedule = schedule(start);
        assert!(!schedule.on_tick(start + SCAN_INTERVAL));
        assert!(!schedule.on_tick(start + SAFETY_SCAN_INTERVAL - SCAN_INTERVAL));
        assert!(schedule.on_tick(start + SAFETY_SCAN_INTERVAL));
        assert!(
            ScanSchedule::new(true, start, true).on_tick(start + SCAN_INTERVAL),
            "unless the first scan left something to look at again"
        );
    }

    #[test]
    fn a_scan_for_a_change_puts_off_the_safety_scan() {
        let start = Instant::now();
        let mut schedule = schedule(start);
        assert!(schedule.on_change(Wanted::NOW));
        let later = start + SAFETY_SCAN_INTERVAL / 2;
        assert!(!schedule.scanned(Scan::ForChange, later, false, true));
        assert!(!schedule.on_tick(start + SAFETY_SCAN_INTERVAL));
        assert!(schedule.on_tick(later + SAFETY_SCAN_INTERVAL));
    }

    #[test]
    fn every_tick_scans_while_the_last_scan_left_something_to_look_at_again() {
        let start = Instant::now();
        let mut schedule = schedule(start);
        schedule.scanned(Scan::ForChange, start, true, true);
        for tick in 1..=5 {
            assert!(schedule.on_tick(start + SCAN_INTERVAL * tick));
            schedule.scanned(Scan::Timed, start + SCAN_INTERVAL * tick, tick < 5, true);
        }
        assert!(
            !schedule.on_tick(start + SCAN_INTERVAL * 6),
            "nothing waits any more"
        );
    }

    #[test]
    fn a_change_for_the_next_tick_is_kept_until_a_timed_scan_ran_even_across_scans_for_changes() {
        let start = Instant::now();
        let mut schedule = schedule(start);
        assert!(!schedule.on_change(Wanted::NEXT_TICK), "not at once");
        assert!(schedule.on_change(Wanted::NOW | Wanted::NEXT_TICK));
        schedule.scanned(Scan::ForChange, start, false, true);
        assert!(schedule.on_tick(start + SCAN_INTERVAL));
        schedule.scanned(Scan::Timed, start + SCAN_INTERVAL, false, true);
        assert!(!schedule.on_tick(start + SCAN_INTERVAL * 2));
    }

    #[test]
    fn changes_that_do_not_matter_ask_for_no_scan() {
        let start = Instant::now();
        let mut schedule = schedule(start);
        assert!(!schedule.on_change(Wanted::NOTHING));
        assert!(!schedule.on_tick(start + SCAN_INTERVAL));
    }

    #[test]
    fn a_polled_folder_is_scanned_on_every_tick() {
        let start = Instant::now();
        let mut polled = ScanSchedule::new(false, start, false);
        assert!(polled.on_tick(start));
        let mut lost = schedule(start);
        lost.watch_lost();
        assert!(!lost.watching());
        assert!(lost.on_tick(start + SCAN_INTERVAL));
        assert!(!polled.on_change(
            Wanted::NEXT_TICK
                | Wanted {
                    rewatch: true,
                    ..Wanted::NOTHING
                }
        ));
        assert!(
            !polled.scanned(Scan::Timed, start, false, true),
            "a polled folder is not watched again"
        );
    }

    #[test]
    fn the_watch_is_made_again_once_a_folder_that_went_away_can_be_read() {
        let start = Instant::now();
        // Deleted: the watch says so, and the scan finds it gone; made again once it is back.
        let mut schedule = schedule(start);
        assert!(schedule.on_change(Wanted {
            rewatch: true,
            ..Wanted::NOW
        }));
        assert!(!schedule.scanned(Scan::ForChange, start, true, false));
        assert!(
            !schedule.scanned(Scan::Timed, start, true, false),
            "still gone"
        );
        assert!(
            schedule.scanned(Scan::ForChange, start, false, true),
            "back"
        );
        assert!(
            schedule.on_tick(start + SCAN_INTERVAL),
            "the next tick reads what came before the new watch"
        );
        assert!(!schedule.scanned(Scan::Timed, start, false, true), "once");

        // Deleted and made anew before a scan saw it gone: the watch's word suffices.
        let mut schedule = ScanSchedule::new(true, start, false);
        schedule.on_change(Wanted {
            rewatch: true,
            ..Wanted::NOW
        });
        assert!(schedule.scanned(Scan::ForChange, start, false, true));

        // Unreadable without a word from the watch (a lost event): the same.
        let mut schedule = ScanSchedule::new(true, start, false);
        assert!(!schedule.scanned(Scan::Timed, start, true, false));
        assert!(schedule.scanned(Scan::Timed, start, false, true));
    }
}
