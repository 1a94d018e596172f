//! The probe's figures kept in the user's cache directory, one file per machine, so that
//! only the first process on a node pays for the probe.
//!
//! A file is a machine's only while its fingerprint (CPU, cores, caches, page size, kernel
//! release) is this machine's: another machine sharing the home directory, a kernel update
//! or a resized VM makes it foreign, and a foreign, truncated, edited or otherwise corrupt
//! file is ignored (and replaced by the next probe), never trusted: every value read is
//! checked against what the probe can produce, and the crossover it records must be the
//! one its figures give. Files are written whole under a temporary name, then renamed.
//!
//! A probe that found no figures worth keeping (it gave up, or its budget cut it short: a
//! busy machine) leaves a marker beside the file instead, so that the node's next
//! processes do not each pay up to the probe's cap: for `RETRY_AFTER` they keep CMA where
//! the model's sizes put it, as that probe's process did not, and then one probes again.

use std::hash::{Hash, Hasher};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use shmcoll_kernels::hw::Machine;

use super::probe::{Figures, REPS, SIZES};

/// Bumped whenever the file's meaning changes.
const FORMAT: u32 = 1;
/// Larger files are not the probe's.
const MAX_FILE_BYTES: u64 = 16 << 10;
/// No transfer the probe times takes a second; no probe takes a minute.
const MAX_NS: u64 = 1_000_000_000;
const MAX_TOOK_US: u64 = 60_000_000;

/// How long a probe that kept nothing spares the node's later processes from probing.
pub const RETRY_AFTER: Duration = Duration::from_secs(600);

/// The marker a probe that kept nothing leaves beside the figures' file at `path`.
pub fn marker(path: &Path) -> PathBuf {
    path.with_extension("gave-up")
}

/// Leave the marker (its modification time is when), the directory created if needed.
pub fn mark_gave_up(path: &Path) -> std::io::Result<()> {
    let m = marker(path);
    if let Some(dir) = m.parent() {
        std::fs::create_dir_all(dir)?;
    }
    std::fs::write(&m, b"")
}

/// How long ago a probe on this node kept nothing, if within `within` (a marker from the
/// future, a clock set back, counts as now).
pub fn gave_up_within(path: &Path, within: Duration) -> Option<Duration> {
    let when = std::fs::metadata(marker(path))
        .and_then(|m| m.modified())
        .ok()?;
    let age = SystemTime::now().duration_since(when).unwrap_or_default();
    (age < within).then_some(age)
}

/// What makes two machines' figures interchangeable.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Fingerprint {
    pub vendor: String,
    pub model_name: String,
    pub physical_cores: usize,
    pub sockets: usize,
    pub l1d_bytes: usize,
    pub l2_bytes: usize,
    pub l3_bytes: usize,
    pub page_size: usize,
    /// The running kernel's release (its system call and pinning costs are the kernel's).
    pub kernel: String,
}

impl Fingerprint {
    pub fn of(m: &Machine) -> Fingerprint {
        let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "unknown".into());
        Fingerprint {
            vendor: m.vendor.clone(),
            model_name: m.model_name.clone(),
            physical_cores: m.physical_cores,
            sockets: m.sockets,
            l1d_bytes: m.l1d_bytes,
            l2_bytes: m.l2_bytes,
            l3_bytes: m.l3_bytes,
            page_size: m.page_size,
            kernel,
        }
    }

    /// The file's name in the cache directory (std's SipHash with fixed keys; a name that
    /// changes with the build only costs one probe).
    pub fn file_name(&self) -> String {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        self.hash(&mut h);
        format!("cma-probe-{:016x}.json", h.finish())
    }
}

#[derive(Debug, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    format: u32,
    fingerprint: Fingerprint,
    figures: Figures,
    cma_from: usize,
}

/// `$XDG_CACHE_HOME/shmcoll`, else `$HOME/.cache/shmcoll` (relative paths are ignored, as
/// the XDG specification says).
pub fn dir_from(xdg_cache_home: Option<&str>, home: Option<&str>) -> Option<PathBuf> {
    let absolute = |s: Option<&str>| s.map(PathBuf::from).filter(|p| p.is_absolute());
    absolute(xdg_cache_home)
        .or_else(|| absolute(home).map(|h| h.join(".cache")))
        .map(|d| d.join("shmcoll"))
}

/// This user's cache directory for shmcoll.
pub fn dir() -> Option<PathBuf> {
    let var = |n: &str| std::env::var(n).ok();
    dir_from(var("XDG_CACHE_HOME").as_deref(), var("HOME").as_deref())
}

/// Why `f` cannot be figures the probe wrote with ring chunks of `chunk` bytes, if so.
fn invalid(f: &Figures, chunk: usize) -> Option<String> {
    if f.sizes != SIZES {
        return Some(format!("sizes {:?}", f.sizes));
    }
    for (name, v) in [
        ("cma_read_ns", &f.cma_read_ns),
        ("cma_write_ns", &f.cma_write_ns),
        ("staged_ns", &f.staged_ns),
        ("inline_ns", &f.inline_ns),
    ] {
        if v.len() != SIZES.len() || v.iter().any(|&ns| ns == 0 || ns > MAX_NS) {
            return Some(format!("{name} {v:?}"));
        }
    }
    if f.chunk_bytes != chunk {
        return Some(format!("a chunk of {} bytes, not {chunk}", f.chunk_bytes));
    }
    // Only a probe that took every repetition is kept (mod.rs).
    if f.reps != REPS || f.took_us > MAX_TOOK_US {
        return Some(format!("{} repetitions in {} us", f.reps, f.took_us));
    }
    None
}

/// The figures and crossover in the file at `path`, if it is a valid file of machine `fp`
/// for ring chunks of `chunk` bytes; else why not.
pub fn load(path: &Path, fp: &Fingerprint, chunk: usize) -> Result<(Figures, usize), String> {
    let mut text = String::new();
    std::fs::File::open(path)
        .and_then(|f| f.take(MAX_FILE_BYTES + 1).read_to_string(&mut text))
        .map_err(|e| format!("unreadable: {e}"))?;
    if text.len() as u64 > MAX_FILE_BYTES {
        return Err(format!("longer than {MAX_FILE_BYTES} bytes"));
    }
    let file: File = serde_json::from_str(&text).map_err(|e| format!("not a probe file: {e}"))?;
    if file.format != FORMAT {
        return Err(format!("format {}, not {FORMAT}", file.format));
    }
    if file.fingerprint != *fp {
        return Err("another machine's (its fingerprint differs)".into());
    }
    if let Some(why) = invalid(&file.figures, chunk) {
        return Err(format!("impossible figures: {why}"));
    }
    if file.figures.crossover() != Some(file.cma_from) {
        return Err(format!(
            "a crossover of {} bytes that its figures do not give",
            file.cma_from
        ));
    }
    Ok((file.figures, file.cma_from))
}

/// Write the figures of machine `fp` to `path` (its directory created if needed): only
/// figures `load` would accept, so only a probe that took every repetition (one that its
/// budget cut short ran on a busy machine and speaks for its process alone).
pub fn store(path: &Path, fp: &Fingerprint, figures: &Figures) -> std::io::Result<()> {
    if let Some(why) = invalid(figures, figures.chunk_bytes) {
        return Err(std::io::Error::other(format!("not kept: {why}")));
    }
    let cma_from = figures
        .crossover()
        .ok_or_else(|| std::io::Error::other("figures without a crossover"))?;
    let file = File {
        format: FORMAT,
        fingerprint: fp.clone(),
        figures: figures.clone(),
        cma_from,
    };
    let text = serde_json::to_string_pretty(&file).map_err(std::io::Error::other)?;
    let dir = path
        .parent()
        .ok_or_else(|| std::io::Error::other("a cache path without a directory"))?;
    std::fs::create_dir_all(dir)?;
    let tmp = dir.join(format!(
        ".{}.{}.tmp",
        path.file_name()
            .map_or("probe".into(), |n| n.to_string_lossy()),
        std::process::id()
    ));
    let written = std::fs::File::create(&tmp).and_then(|mut f| {
        f.write_all(text.as_bytes())?;
        f.sync_all()
    });
    match written.and_then(|()| std::fs::rename(&tmp, path)) {
        Ok(()) => Ok(()),
        Err(e) => {
            let _ = std::fs::remove_file(&tmp);
            Err(e)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn figures() -> Figures {
        Figures {
            sizes: SIZES.to_vec(),
            cma_read_ns: vec![1500, 2500, 6000, 21000, 80000],
            cma_write_ns: vec![1500, 2500, 6000, 22000, 81000],
            staged_ns: vec![500, 2700, 10000, 33000, 125000],
            inline_ns: vec![400, 2000, 9000, 30000, 120000],
            chunk_bytes: 32 << 10,
            reps: 5,
            took_us: 9000,
        }
    }

    fn fingerprint() -> Fingerprint {
        Fingerprint::of(shmcoll_kernels::hw::machine())
    }

    fn tmp_dir(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("shmcoll-cache-{}-{name}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        d
    }

    #[test]
    fn a_probe_that_kept_nothing_spares_the_next_ones_for_a_while() {
        let d = tmp_dir("gave-up");
        let path = d.join(fingerprint().file_name());
        assert_eq!(gave_up_within(&path, RETRY_AFTER), None);
        mark_gave_up(&path).unwrap();
        assert!(gave_up_within(&path, RETRY_AFTER).is_some());
        assert_eq!(gave_up_within(&path, Duration::ZERO), None, "too old");
        assert!(!path.exists(), "no figures file");
    }

    #[test]
    fn an_incomplete_probe_is_not_kept() {
        let d = tmp_dir("incomplete");
        let fp = fingerprint();
        let path = d.join(fp.file_name());
        let short = Figures {
            reps: 2,
            ..figures()
        };
        assert!(store(&path, &fp, &short).is_err());
        assert!(!path.exists());
    }

    #[test]
    fn written_then_reused() {
        let d = tmp_dir("reuse");
        let fp = fingerprint();
        let path = d.join(fp.file_name());
        store(&path, &fp, &figures()).unwrap();
        let (f, c) = load(&path, &fp, 32 << 10).unwrap();
        assert_eq!(f, figures());
        assert_eq!(Some(c), figures().crossover());
        // Nothing but the file is left behind.
        assert_eq!(std::fs::read_dir(&d).unwrap().count(), 1);
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn foreign_and_corrupt_files_are_refused() {
        let d = tmp_dir("refuse");
        let fp = fingerprint();
        let path = d.join(fp.file_name());
        store(&path, &fp, &figures()).unwrap();
        let good = std::fs::read_to_string(&path).unwrap();
        let mut other = fp.clone();
        other.kernel.push_str("-other");
        assert!(load(&path, &other, 32 << 10)
            .unwrap_err()
            .contains("another machine"));
        assert!(load(&path, &fp, 64 << 10).unwrap_err().contains("chunk"));
        let bad = |text: &str| {
            std::fs::write(&path, text).unwrap();
            load(&path, &fp, 32 << 10).unwrap_err()
        };
        assert!(bad(&good[..good.len() / 2]).contains("not a probe file"));
        assert!(bad("").contains("not a probe file"));
        assert!(bad(&" ".repeat(20 << 10)).contains("longer"));
        assert!(bad(&good.replace("\"format\": 1", "\"format\": 2")).contains("format"));
        assert!(bad(&good.replace("\"reps\": 5", "\"reps\": 6")).contains("repetitions"));
        assert!(bad(&good.replace("\"reps\": 5", "\"reps\": 2")).contains("repetitions"));
        assert!(bad(&good.replace("1500", "0")).contains("impossible"));
        assert!(bad(&good.replace("80000", "-1")).contains("not a probe file"));
        assert!(
            bad(&good.replace("\"took_us\"", "\"extra\": 1, \"took_us\""))
                .contains("not a probe file")
        );
        let c = figures().crossover().unwrap();
        let lie = good.replace(&format!("\"cma_from\": {c}"), "\"cma_from\": 4096");
        assert!(bad(&lie).contains("do not give"), "{lie}");
        assert!(load(&d.join("absent.json"), &fp, 32 << 10)
            .unwrap_err()
            .contains("unreadable"));
        std::fs::remove_dir_all(&d).unwrap();
    }

    #[test]
    fn the_directory_follows_xdg() {
        assert_eq!(
            dir_from(Some("/x/cache"), Some("/home/u")),
            Some(PathBuf::from("/x/cache/shmcoll"))
        );
        assert_eq!(
            dir_from(Some("relative"), Some("/home/u")),
            Some(PathBuf::from("/home/u/.cache/shmcoll"))
        );
        assert_eq!(dir_from(None, Some("relative")), None);
        assert_eq!(dir_from(None, None), None);
    }

    #[test]
    fn the_file_name_is_the_fingerprint_s() {
        let fp = fingerprint();
        let mut other = fp.clone();
        other.l2_bytes += 1;
        assert_eq!(fp.file_name(), fingerprint().file_name());
        assert_ne!(fp.file_name(), other.file_name());
    }
}
