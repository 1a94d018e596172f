//! The tuning table file (`shmcoll tune` writes it, like FFTW's wisdom) read without
//! Python, for communicators created outside it (the PMPI library's).
//!
//! The lookup order (python/shmcoll/tuning/lookup.py asks it here, through `_core`, so
//! there is one): `SHMCOLL_TUNING_FILE` (`none`
//! skips files), the user file (`$XDG_CONFIG_HOME/shmcoll/tuning.json`, by default under
//! `~/.config`), the system files (`<first of $XDG_CONFIG_DIRS, default /etc/xdg>/shmcoll/
//! tuning.json`, `/etc/shmcoll/tuning.json`); the first file found wins and the model
//! serves what it does not cover. The Python side validates files against the JSON schema
//! when it writes or loads them; here a file that does not parse, or names an unknown
//! algorithm, is an error, never silently ignored. `compressed` choices (a Python-level
//! pseudo-algorithm) are skipped, as the Python bindings skip them.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::error::{Error, Result};
use crate::op::CollOp;
use crate::select::{Candidate, Range, Table};

/// `SHMCOLL_TUNING_FILE`.
pub const ENV_FILE: &str = "SHMCOLL_TUNING_FILE";
const FORMAT: &str = "shmcoll-tuning";
const COMPRESSED: &str = "compressed";

/// The table file's operations other than Alltoall, with the family each one sets.
const COLL_OPERATIONS: [(&str, CollOp); 7] = [
    ("allreduce", CollOp::Allreduce),
    ("allgather", CollOp::Allgather),
    ("bcast", CollOp::Bcast),
    ("reduce_scatter", CollOp::ReduceScatterBlock),
    ("reduce", CollOp::Reduce),
    ("gather", CollOp::Gather),
    ("scatter", CollOp::Scatter),
];

#[derive(Deserialize, Debug)]
struct Doc {
    format: String,
    operations: BTreeMap<String, Vec<Entry>>,
}

/// An upper bound: a number, or `"inf"`.
#[derive(Deserialize, Clone, Copy, Debug)]
#[serde(untagged)]
enum Bound {
    Num(usize),
    Word(Inf),
}

#[derive(Deserialize, Clone, Copy, Debug)]
enum Inf {
    #[serde(rename = "inf")]
    Inf,
}

impl Bound {
    fn get(self) -> usize {
        match self {
            Bound::Num(n) => n,
            Bound::Word(Inf::Inf) => usize::MAX,
        }
    }
}

#[derive(Deserialize, Debug)]
struct Entry {
    nprocs: (usize, Bound),
    sizes: Vec<SizeRow>,
}

#[derive(Deserialize, Debug)]
struct SizeRow {
    bytes: (usize, Bound),
    choices: Vec<ChoiceRow>,
}

#[derive(Deserialize, Debug)]
struct ChoiceRow {
    algorithm: String,
    order: Option<String>,
    store: Option<String>,
    nt_threshold: Option<usize>,
    chunk_bytes: Option<usize>,
}

/// The tables a file gives for one process count.
#[derive(Debug, Default)]
pub struct FileTables {
    /// Alltoall(v).
    pub alltoall: Option<Table>,
    /// The other collectives, by family.
    pub coll: Vec<(CollOp, Table)>,
}

/// A loaded table file.
#[derive(Debug)]
pub struct TableFile {
    path: PathBuf,
    doc: Doc,
}

fn bad(path: &Path, what: String) -> Error {
    Error::InvalidArgument(format!("{}: {what}", path.display()))
}

/// Where a table file was found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Named by `SHMCOLL_TUNING_FILE`.
    Environment,
    /// The user's file.
    User,
    /// A system file.
    System,
}

impl Origin {
    pub fn name(self) -> &'static str {
        match self {
            Origin::Environment => "environment",
            Origin::User => "user",
            Origin::System => "system",
        }
    }
}

/// The places a table file is looked for after `SHMCOLL_TUNING_FILE`, in order: the user
/// file (`$XDG_CONFIG_HOME/shmcoll/tuning.json`, by default under `~/.config`), then the
/// system files.
pub fn places() -> Vec<(PathBuf, Origin)> {
    let env_dir = |k: &str| {
        std::env::var_os(k)
            .filter(|v| !v.is_empty())
            .map(PathBuf::from)
    };
    // The home directory as Python's expanduser finds it: HOME, else the password entry.
    #[allow(deprecated)] // home_dir's Windows behaviour; on Linux it is right.
    let home = std::env::home_dir().filter(|h| !h.as_os_str().is_empty());
    let user = env_dir("XDG_CONFIG_HOME").or_else(|| home.map(|h| h.join(".config")));
    let site = std::env::var("XDG_CONFIG_DIRS")
        .ok()
        .and_then(|v| v.split(':').find(|d| !d.is_empty()).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from("/etc/xdg"));
    user.map(|u| (u.join("shmcoll/tuning.json"), Origin::User))
        .into_iter()
        .chain([
            (site.join("shmcoll/tuning.json"), Origin::System),
            (PathBuf::from("/etc/shmcoll/tuning.json"), Origin::System),
        ])
        .collect()
}

/// The table file to use and where it was found, if any (see the module doc for the
/// order); an error when `SHMCOLL_TUNING_FILE` names a file that does not exist.
pub fn find_file() -> Result<Option<(PathBuf, Origin)>> {
    if let Some(v) = std::env::var_os(ENV_FILE) {
        let s = v.to_string_lossy();
        let s = s.trim();
        if s.eq_ignore_ascii_case("none") {
            return Ok(None);
        }
        if !s.is_empty() {
            // `~/` as a shell would expand it (the variable may come from a job script).
            let p = match (s.strip_prefix("~/"), std::env::var_os("HOME")) {
                (Some(rest), Some(home)) => PathBuf::from(home).join(rest),
                _ => PathBuf::from(s),
            };
            if !p.is_file() {
                return Err(Error::InvalidArgument(format!(
                    "{}: {ENV_FILE} names a file that does not exist",
                    p.display()
                )));
            }
            return Ok(Some((p, Origin::Environment)));
        }
    }
    Ok(places().into_iter().find(|(p, _)| p.is_file()))
}

impl TableFile {
    pub fn load(path: &Path) -> Result<TableFile> {
        let text = std::fs::read_to_string(path).map_err(|e| bad(path, e.to_string()))?;
        let doc: Doc = serde_json::from_str(&text)
            .map_err(|e| bad(path, format!("not a tuning table: {e}")))?;
        if doc.format != FORMAT {
            return Err(bad(
                path,
                format!("format {:?}, expected {FORMAT:?}", doc.format),
            ));
        }
        Ok(TableFile {
            path: path.to_path_buf(),
            doc,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn entry(&self, op: &str, nprocs: usize) -> Option<&Entry> {
        self.doc.operations.get(op)?.iter().find(|e| {
            let (lo, hi) = e.nprocs;
            lo <= nprocs && nprocs <= hi.get()
        })
    }

    /// The tables this file gives for `nprocs` ranks (None where it covers none).
    pub fn tables_for(&self, nprocs: usize) -> Result<FileTables> {
        let mut out = FileTables::default();
        if let Some(e) = self.entry("alltoall", nprocs) {
            out.alltoall = Some(self.alltoall_table(e)?);
        }
        for (name, family) in COLL_OPERATIONS {
            if let Some(e) = self.entry(name, nprocs) {
                out.coll.push((family, self.coll_table(name, family, e)?));
            }
        }
        Ok(out)
    }

    fn alltoall_table(&self, e: &Entry) -> Result<Table> {
        let mut ranges = Vec::with_capacity(e.sizes.len());
        for s in &e.sizes {
            let mut candidates = Vec::new();
            for c in s.choices.iter().filter(|c| c.algorithm != COMPRESSED) {
                let order = c.order.as_deref().unwrap_or("shifted");
                let store = c.store.as_deref().unwrap_or("hybrid");
                let cand = Candidate::from_names(
                    CollOp::Alltoall,
                    &c.algorithm,
                    Some(order),
                    Some(store),
                    c.nt_threshold,
                    c.chunk_bytes,
                );
                candidates.push(cand.map_err(|e| bad(&self.path, format!("alltoall: {e}")))?);
            }
            ranges.push(Range {
                min_bytes: s.bytes.0,
                max_bytes: s.bytes.1.get(),
                candidates,
            });
        }
        Table::new(ranges).map_err(|e| bad(&self.path, format!("alltoall: {e}")))
    }

    /// The rows of a collective other than Alltoall: each covers the sizes up to its upper
    /// bound (the lower bounds only order them), choices name an algorithm only.
    fn coll_table(&self, op: &str, family: CollOp, e: &Entry) -> Result<Table> {
        let mut sizes: Vec<&SizeRow> = e.sizes.iter().collect();
        sizes.sort_by_key(|s| s.bytes.0);
        let mut rows = Vec::with_capacity(sizes.len());
        for s in sizes {
            let candidates = s
                .choices
                .iter()
                .filter(|c| c.algorithm != COMPRESSED)
                .map(|c| {
                    Candidate::from_names(
                        family,
                        &c.algorithm,
                        c.order.as_deref(),
                        c.store.as_deref(),
                        c.nt_threshold,
                        c.chunk_bytes,
                    )
                    .map_err(|e| bad(&self.path, format!("{op}: {e}")))
                })
                .collect::<Result<Vec<_>>>()?;
            rows.push((s.bytes.1.get(), candidates));
        }
        Ok(Table::from_upper_bounds(family, rows))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::Order;
    use crate::registry::{Algo, Store};

    const DOC: &str = r#"{
      "format": "shmcoll-tuning", "version": 1, "fingerprint": {"vendor": "x"},
      "operations": {
        "alltoall": [
          {"nprocs": [2, 3], "sizes": [
            {"bytes": [0, 1024], "choices": [{"algorithm": "compressed"},
                                              {"algorithm": "inline", "order": "linear", "store": "temporal"}]},
            {"bytes": [1025, "inf"], "choices": [{"algorithm": "staging", "chunk_bytes": 4096}]}]},
          {"nprocs": [4, "inf"], "sizes": [{"bytes": [0, "inf"], "choices": [{"algorithm": "push"}]}]}],
        "reduce_scatter": [
          {"nprocs": [1, "inf"], "sizes": [
            {"bytes": [513, "inf"], "choices": [{"algorithm": "staging"}]},
            {"bytes": [0, 512], "choices": [{"algorithm": "inline"}, {"algorithm": "direct"}]}]}]
      }
    }"#;

    fn file(text: &str, name: &str) -> PathBuf {
        let p =
            std::env::temp_dir().join(format!("shmcoll-tuning-{}-{name}.json", std::process::id()));
        std::fs::write(&p, text).unwrap();
        p
    }

    #[test]
    fn rows_for_a_process_count_skip_compressed_and_default_order_and_store() {
        let p = file(DOC, "good");
        let f = TableFile::load(&p).unwrap();
        let t = f.tables_for(3).unwrap();
        let a = t.alltoall.unwrap();
        let r0 = a.find(100).unwrap();
        assert_eq!(r0.candidates.len(), 1);
        assert_eq!(r0.candidates[0].algo, Algo::Inline);
        assert_eq!(r0.candidates[0].order, Order::parse("linear"));
        assert_eq!(r0.candidates[0].store, Some(Store::Temporal));
        let r1 = a.find(1 << 30).unwrap();
        assert_eq!(r1.candidates[0].algo, Algo::Staging);
        assert_eq!(r1.candidates[0].store, Some(Store::Hybrid));
        assert_eq!(r1.candidates[0].chunk_bytes, Some(4096));
        assert_eq!(t.coll.len(), 1);
        let (family, rs) = &t.coll[0];
        assert_eq!(*family, CollOp::ReduceScatterBlock);
        let algos = |bytes| {
            rs.find(bytes)
                .map(|r| r.candidates.iter().map(|c| c.algo).collect::<Vec<_>>())
        };
        assert_eq!(algos(100), Some(vec![Algo::Inline, Algo::Direct]));
        assert_eq!(algos(1 << 20), Some(vec![Algo::Staging]));
        // Process counts pick their entry; none covers 1 rank for Alltoall.
        let four = f.tables_for(4).unwrap().alltoall.unwrap();
        assert_eq!(four.find(8).unwrap().candidates[0].algo, Algo::Push);
        assert!(f.tables_for(1).unwrap().alltoall.is_none());
        std::fs::remove_file(p).unwrap();
    }

    #[test]
    fn broken_files_are_errors_that_name_the_file() {
        for (name, text, needle) in [
            ("syntax", "{", "not a tuning table"),
            (
                "format",
                r#"{"format": "other", "operations": {}}"#,
                "format",
            ),
            (
                "algo",
                r#"{"format": "shmcoll-tuning", "operations": {"bcast": [{"nprocs": [1, "inf"],
                    "sizes": [{"bytes": [0, "inf"], "choices": [{"algorithm": "warp"}]}]}]}}"#,
                "unknown algorithm \"warp\"",
            ),
            (
                "params",
                r#"{"format": "shmcoll-tuning", "operations": {"bcast": [{"nprocs": [1, "inf"],
                    "sizes": [{"bytes": [0, "inf"], "choices": [{"algorithm": "staging", "chunk_bytes": 4096}]}]}]}}"#,
                "names only an algorithm",
            ),
            (
                "overlap",
                r#"{"format": "shmcoll-tuning", "operations": {"alltoall": [{"nprocs": [1, "inf"],
                    "sizes": [{"bytes": [0, 100], "choices": [{"algorithm": "inline"}]},
                              {"bytes": [50, "inf"], "choices": [{"algorithm": "push"}]}]}]}}"#,
                "alltoall",
            ),
        ] {
            let p = file(text, name);
            let e = TableFile::load(&p).and_then(|f| f.tables_for(2).map(|_| ()));
            let msg = e.expect_err(name).to_string();
            assert!(msg.contains(&*p.to_string_lossy()), "{name}: {msg}");
            assert!(msg.contains(needle), "{name}: {msg}");
            std::fs::remove_file(p).unwrap();
        }
    }
}
