//! The tuning table file (`shmcoll tune` writes it, like FFTW's wisdom): its one reader,
//! for the Python bindings (python/shmcoll/tuning asks it through `_core`) and for
//! communicators created outside Python (the PMPI library's).
//!
//! The lookup order: `SHMCOLL_TUNING_FILE` (`none` skips files), the user file
//! (`$XDG_CONFIG_HOME/shmcoll/tuning.json`, by default under `~/.config`), the system files
//! (`<first of $XDG_CONFIG_DIRS, default /etc/xdg>/shmcoll/tuning.json`,
//! `/etc/shmcoll/tuning.json`); the first file found wins and the model serves what it does
//! not cover. A file is checked whole when it is read, so that a broken one fails the same
//! way wherever it is read: against the JSON Schema (`schema`), then the names (exact, as
//! the registries spell them), the ranges (non-empty, not overlapping: process counts within
//! an operation, sizes within an entry), and the rules of the `compressed` candidate (a
//! Python-level pseudo-algorithm of the operations that have a compressed form, never alone
//! in a range, skipped in what the engine binds). Every error names the file (or the origin
//! of the text) and the offending entry as a JSON path.

use std::collections::BTreeMap;
use std::hash::{Hash, Hasher};
use std::path::{Path, PathBuf};

use serde::Deserialize;
use serde_json::Value;
use shmcoll_kernels::hw::Machine;

use crate::error::{Error, Result};
use crate::op::CollOp;
use crate::order::Order;
use crate::registry::{Algo, Store};
use crate::select::{Candidate, Range, Table};

mod schema;

pub use schema::{Quote, OPERATIONS};

/// `SHMCOLL_TUNING_FILE`.
pub const ENV_FILE: &str = "SHMCOLL_TUNING_FILE";
const FORMAT: &str = "shmcoll-tuning";
const VERSION: u64 = 1;
/// The candidate that sends compressed data (Python's shmcoll.compress consults it).
pub const COMPRESSED: &str = "compressed";
/// Operations with a compressed form: only these may list `compressed`.
pub const COMPRESSIBLE: [&str; 5] = [
    "alltoall",
    "allreduce",
    "allgather",
    "bcast",
    "reduce_scatter",
];
/// The fingerprint keys that make a table foreign when they differ from this machine.
const FINGERPRINT_KEYS: [&str; 7] = [
    "vendor",
    "model_name",
    "logical_cpus",
    "sockets",
    "l2_bytes",
    "l3_bytes",
    "simd",
];

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

/// The family a collective operation of the file (other than Alltoall) sets.
pub fn coll_family(op: &str) -> Option<CollOp> {
    COLL_OPERATIONS
        .iter()
        .find(|(name, _)| *name == op)
        .map(|(_, f)| *f)
}

#[derive(Deserialize, Debug)]
struct Doc {
    fingerprint: BTreeMap<String, Value>,
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

impl ChoiceRow {
    /// The parameters it names, by key, in the order the keys sort.
    fn parameters(&self) -> Vec<&'static str> {
        [
            ("chunk_bytes", self.chunk_bytes.is_some()),
            ("nt_threshold", self.nt_threshold.is_some()),
            ("order", self.order.is_some()),
            ("store", self.store.is_some()),
        ]
        .into_iter()
        .filter_map(|(k, set)| set.then_some(k))
        .collect()
    }
}

/// The tables a file gives for one process count.
#[derive(Debug, Default)]
pub struct FileTables {
    /// Alltoall(v).
    pub alltoall: Option<Table>,
    /// The other collectives, by family.
    pub coll: Vec<(CollOp, Table)>,
}

/// A size range of an entry: (min bytes, max bytes with `usize::MAX` for inf, whether it
/// lists `compressed`).
pub type CompressedRange = (usize, usize, bool);

/// A loaded table file, checked whole.
#[derive(Debug)]
pub struct TableFile {
    origin: PathBuf,
    doc: Doc,
}

fn bad(path: &Path, what: String) -> Error {
    Error::InvalidArgument(format!("{}: {what}", path.display()))
}

/// A string quoted as Python's repr quotes a printable one (the PMPI library's messages;
/// the Python bindings pass Python's own repr).
pub fn quote(s: &str) -> String {
    let q = if s.contains('\'') && !s.contains('"') {
        '"'
    } else {
        '\''
    };
    let mut out = String::with_capacity(s.len() + 2);
    out.push(q);
    for ch in s.chars() {
        match ch {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == q => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                out.push_str(&format!("\\x{:02x}", c as u32))
            }
            c => out.push(c),
        }
    }
    out.push(q);
    out
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
    /// Read and check a table file; errors name the file.
    pub fn load(path: &Path) -> Result<TableFile> {
        Self::load_quoting(path, &quote)
    }

    /// `load`, quoting names in messages with `quote`.
    pub fn load_quoting(path: &Path, quote: Quote<'_>) -> Result<TableFile> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| bad(path, format!("cannot read the tuning table: {e}")))?;
        Self::parse(&text, &path.display().to_string(), quote)
    }

    /// Check a table given as JSON text; errors name `origin` (a file's path, or what the
    /// text is) and the offending entry.
    pub fn parse(text: &str, origin: &str, quote: Quote<'_>) -> Result<TableFile> {
        let origin = PathBuf::from(origin);
        let value: Value =
            serde_json::from_str(text).map_err(|e| bad(&origin, format!("not JSON ({e})")))?;
        if let Some(d) = schema::defects(&value, quote).into_iter().next() {
            let at = schema::render(&d.at);
            return Err(bad(&origin, format!("entry {at}: {}", d.what)));
        }
        let doc: Doc = serde_json::from_value(value)
            .map_err(|e| bad(&origin, format!("not a tuning table: {e}")))?;
        let file = TableFile { origin, doc };
        file.check(quote)?;
        Ok(file)
    }

    /// The file's path (or the origin its text was given with).
    pub fn path(&self) -> &Path {
        &self.origin
    }

    /// What the schema leaves to the reader: names, ranges, `compressed`.
    fn check(&self, quote: Quote<'_>) -> Result<()> {
        let fail = |what: String| Err(bad(&self.origin, what));
        for (op, entries) in &self.doc.operations {
            let coll = op != "alltoall";
            let mut spans = Vec::with_capacity(entries.len());
            for (i, e) in entries.iter().enumerate() {
                let at = format!("operations/{op}/{i}");
                let (lo, hi) = (e.nprocs.0, e.nprocs.1.get());
                if lo < 1 || hi < lo {
                    let shown = match e.nprocs.1 {
                        Bound::Num(n) => n.to_string(),
                        Bound::Word(_) => quote("inf"),
                    };
                    return fail(format!(
                        "entry {at}/nprocs: empty or invalid range [{lo}, {shown}]"
                    ));
                }
                spans.push((lo, hi, at.clone()));
                for (k, size) in e.sizes.iter().enumerate() {
                    let at = format!("{at}/sizes/{k}/choices");
                    if size.choices.iter().all(|c| c.algorithm == COMPRESSED) {
                        return fail(format!(
                            "entry {at}: {} needs an uncompressed candidate after it (for \
                             calls that carry no codec)",
                            quote(COMPRESSED)
                        ));
                    }
                    for (c, choice) in size.choices.iter().enumerate() {
                        if let Some(what) = self.unknown(op, choice, quote) {
                            return fail(format!("entry {at}/{c}/{what}"));
                        }
                    }
                }
                let sizes = if coll {
                    Self::coll_overlaps(e)
                } else {
                    Self::alltoall_ranges(e).map(|_| ())
                };
                if let Err(why) = sizes {
                    return fail(format!("entry {at}/sizes: {why}"));
                }
            }
            spans.sort_by_key(|s| s.0);
            for w in spans.windows(2) {
                if w[1].0 <= w[0].1 {
                    return fail(format!(
                        "entries {} and {}: process-count ranges overlap",
                        w[0].2, w[1].2
                    ));
                }
            }
        }
        Ok(())
    }

    /// `key: why` for the first key of `choice` that `op` does not know, if any.
    fn unknown(&self, op: &str, choice: &ChoiceRow, quote: Quote<'_>) -> Option<String> {
        let coll = op != "alltoall";
        if coll {
            // The collectives' algorithms take no parameters: a key there would be
            // ignored, so it is refused.
            if let Some(k) = choice.parameters().first() {
                return Some(format!("{k}: a choice of {op} names only an algorithm"));
            }
        }
        let family = if coll {
            coll_family(op)
        } else {
            Some(CollOp::Alltoall)
        };
        let mut algos: Vec<&str> = family
            .map(|f| Algo::serving(f).map(|a| a.name()).collect())
            .unwrap_or_default();
        if COMPRESSIBLE.contains(&op) {
            algos.push(COMPRESSED);
        }
        let orders: Vec<&str> = Order::ALL.iter().map(|o| o.name()).collect();
        let stores: Vec<&str> = Store::ALL.iter().map(|s| s.name()).collect();
        let named = [
            ("algorithm", Some(&choice.algorithm), algos),
            ("order", choice.order.as_ref(), orders),
            ("store", choice.store.as_ref(), stores),
        ];
        named.into_iter().find_map(|(key, name, mut known)| {
            let name = name?;
            if known.contains(&name.as_str()) {
                return None;
            }
            known.sort_unstable();
            Some(format!(
                "{key}: unknown {key} {} (known: {})",
                quote(name),
                known.join(", ")
            ))
        })
    }

    fn coll_overlaps(e: &Entry) -> Result<()> {
        let mut spans: Vec<(usize, usize)> = e
            .sizes
            .iter()
            .map(|s| (s.bytes.0, s.bytes.1.get()))
            .collect();
        // Non-empty, as the Alltoall table's (select.rs): [9, 3] names no size.
        if let Some(&(lo, hi)) = spans.iter().find(|(lo, hi)| lo > hi) {
            return Err(Error::InvalidArgument(format!("range {lo}..{hi} is empty")));
        }
        spans.sort_unstable();
        for w in spans.windows(2) {
            if w[1].0 <= w[0].1 {
                let hi = if w[0].1 == usize::MAX {
                    "inf".to_string()
                } else {
                    w[0].1.to_string()
                };
                return Err(Error::InvalidArgument(format!(
                    "ranges {}..{hi} and {}.. overlap",
                    w[0].0, w[1].0
                )));
            }
        }
        Ok(())
    }

    fn entry(&self, op: &str, nprocs: usize) -> Option<&Entry> {
        self.doc.operations.get(op)?.iter().find(|e| {
            let (lo, hi) = e.nprocs;
            lo <= nprocs && nprocs <= hi.get()
        })
    }

    /// Whether the file has an entry of `op` covering `nprocs` ranks.
    pub fn covers(&self, op: &str, nprocs: usize) -> bool {
        self.entry(op, nprocs).is_some()
    }

    /// The tables this file gives for `nprocs` ranks (None where it covers none).
    pub fn tables_for(&self, nprocs: usize) -> Result<FileTables> {
        let mut out = FileTables {
            alltoall: self.alltoall_for(nprocs)?,
            coll: Vec::new(),
        };
        for (name, family) in COLL_OPERATIONS {
            if let Some(t) = self.coll_for(name, nprocs)? {
                out.coll.push((family, t));
            }
        }
        Ok(out)
    }

    /// The Alltoall table for `nprocs` ranks, None where no entry covers them.
    pub fn alltoall_for(&self, nprocs: usize) -> Result<Option<Table>> {
        self.entry("alltoall", nprocs)
            .map(|e| self.alltoall_table(e))
            .transpose()
    }

    /// The table of collective `op` (a file's operation name other than "alltoall") for
    /// `nprocs` ranks, None where no entry covers them.
    pub fn coll_for(&self, op: &str, nprocs: usize) -> Result<Option<Table>> {
        let Some(family) = coll_family(op) else {
            return Err(bad(&self.origin, format!("no collective operation {op:?}")));
        };
        self.entry(op, nprocs)
            .map(|e| self.coll_table(op, family, e))
            .transpose()
    }

    /// The size ranges of `op`'s entry for `nprocs` ranks, in the file's order, each with
    /// whether it lists `compressed`; None where no entry covers them.
    pub fn compressed_for(&self, op: &str, nprocs: usize) -> Option<Vec<CompressedRange>> {
        let e = self.entry(op, nprocs)?;
        Some(
            e.sizes
                .iter()
                .map(|s| {
                    let listed = s.choices.iter().any(|c| c.algorithm == COMPRESSED);
                    (s.bytes.0, s.bytes.1.get(), listed)
                })
                .collect(),
        )
    }

    /// The fingerprint keys where the file's hardware differs from `m`, each as
    /// `key: theirs != ours` (empty: measured on this kind of machine).
    pub fn fingerprint_differences(&self, m: &Machine, quote: Quote<'_>) -> Vec<String> {
        let show = |v: &Value| match v {
            Value::String(s) => quote(s),
            Value::Array(a) => {
                let items: Vec<String> = a
                    .iter()
                    .map(|x| x.as_str().map_or_else(|| x.to_string(), quote))
                    .collect();
                format!("[{}]", items.join(", "))
            }
            Value::Null => "None".into(),
            other => other.to_string(),
        };
        let mut simd: Vec<&str> = m.simd.clone();
        simd.sort_unstable();
        let ours = |k: &str| -> Value {
            match k {
                "vendor" => m.vendor.clone().into(),
                "model_name" => m.model_name.clone().into(),
                "logical_cpus" => m.logical_cpus.into(),
                "sockets" => m.sockets.into(),
                "l2_bytes" => m.l2_bytes.into(),
                "l3_bytes" => m.l3_bytes.into(),
                _ => simd.iter().map(|s| Value::from(*s)).collect(),
            }
        };
        FINGERPRINT_KEYS
            .iter()
            .filter_map(|&k| {
                let mut theirs = self.doc.fingerprint.get(k).cloned().unwrap_or(Value::Null);
                if let Value::Array(a) = &mut theirs {
                    a.sort_by_key(|x| x.to_string());
                }
                let mine = ours(k);
                (theirs != mine).then(|| format!("{k}: {} != {}", show(&theirs), show(&mine)))
            })
            .collect()
    }

    fn alltoall_table(&self, e: &Entry) -> Result<Table> {
        Self::alltoall_ranges(e).map_err(|err| bad(&self.origin, format!("alltoall: {err}")))
    }

    /// An entry's Alltoall table (`compressed` left out; order and store default to
    /// `shifted` and `hybrid`): non-empty ranges that do not overlap.
    fn alltoall_ranges(e: &Entry) -> Result<Table> {
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
                candidates.push(cand?);
            }
            ranges.push(Range {
                min_bytes: s.bytes.0,
                max_bytes: s.bytes.1.get(),
                candidates,
            });
        }
        Table::new(ranges)
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
                    Algo::parse(family, &c.algorithm)
                        .map(Candidate::of)
                        .ok_or_else(|| {
                            bad(
                                &self.origin,
                                format!("{op}: unknown algorithm {}", quote(&c.algorithm)),
                            )
                        })
                })
                .collect::<Result<Vec<_>>>()?;
            rows.push((s.bytes.1.get(), candidates));
        }
        Ok(Table::from_upper_bounds(family, rows))
    }
}

/// The digest ranks compare when they bind tables: the communicator's own digest of its
/// selection tables (`Comm::tables_digest`, the one the PMPI library compares) folded with
/// the ranges where the bindings send compressed data (per operation, as
/// `TableFile::compressed_for` gives them; empty where no codec layer consults a table).
/// Equal on ranks that bound the same; SipHash with fixed keys, so the same in every
/// process of one build.
pub fn binding_digest(tables: u64, compressed: &[(String, Vec<CompressedRange>)]) -> u64 {
    let mut h = std::collections::hash_map::DefaultHasher::new();
    tables.hash(&mut h);
    compressed.hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::order::Order;
    use crate::registry::{Algo, Store};

    const FP: &str = r#""fingerprint": {"vendor": "x", "model_name": "y", "logical_cpus": 2,
      "sockets": 1, "l2_bytes": 0, "l3_bytes": 0, "simd": []}"#;

    const DOC: &str = r#"{
      "format": "shmcoll-tuning", "version": 1, "shmcoll_version": "0", FINGERPRINT,
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
        let p = file(&DOC.replace("FINGERPRINT", FP), "good");
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

    /// A valid document with `ops` as its operations.
    fn doc(ops: &str) -> String {
        format!(
            r#"{{"format": "shmcoll-tuning", "version": 1, "shmcoll_version": "0", {FP},
                "operations": {ops}}}"#
        )
    }

    #[test]
    fn broken_files_are_errors_that_name_the_file_and_the_entry() {
        let bcast = |choices: &str| {
            doc(&format!(
                r#"{{"bcast": [{{"nprocs": [1, "inf"], "sizes": [{{"bytes": [0, "inf"], "choices": {choices}}}]}}]}}"#
            ))
        };
        for (name, text, needle) in [
            ("syntax", "{".to_string(), "not JSON"),
            ("binary", "\u{1}".to_string(), "not JSON"),
            (
                "format",
                doc("{}").replace("shmcoll-tuning", "other"),
                "entry format: 'shmcoll-tuning' was expected",
            ),
            (
                "required",
                doc("{}").replace(r#""shmcoll_version": "0","#, ""),
                "entry (top level): 'shmcoll_version' is a required property",
            ),
            (
                "chunk",
                doc(r#"{"alltoall": [{"nprocs": [1, 2], "sizes": [{"bytes": [0, 9],
                    "choices": [{"algorithm": "staging", "chunk_bytes": 8}]}]}]}"#),
                "entry operations/alltoall/0/sizes/0/choices/0/chunk_bytes: 8 is less than",
            ),
            (
                "algo",
                bcast(r#"[{"algorithm": "warp"}]"#),
                "entry operations/bcast/0/sizes/0/choices/0/algorithm: unknown algorithm 'warp'",
            ),
            (
                "order",
                doc(r#"{"alltoall": [{"nprocs": [1, 2], "sizes": [{"bytes": [0, 9],
                    "choices": [{"algorithm": "staging", "order": "Linear"}]}]}]}"#),
                "choices/0/order: unknown order 'Linear' (known: linear, morton,",
            ),
            (
                "params",
                bcast(r#"[{"algorithm": "staging", "chunk_bytes": 4096}]"#),
                "choices/0/chunk_bytes: a choice of bcast names only an algorithm",
            ),
            (
                "only-compressed",
                bcast(r#"[{"algorithm": "compressed"}]"#),
                "needs an uncompressed candidate",
            ),
            (
                "compressed-not-compressible",
                doc(r#"{"gather": [{"nprocs": [1, "inf"], "sizes": [{"bytes": [0, "inf"],
                    "choices": [{"algorithm": "compressed"}, {"algorithm": "staging"}]}]}]}"#),
                "unknown algorithm 'compressed'",
            ),
            (
                "overlap",
                doc(r#"{"alltoall": [{"nprocs": [1, "inf"],
                    "sizes": [{"bytes": [0, 100], "choices": [{"algorithm": "inline"}]},
                              {"bytes": [50, "inf"], "choices": [{"algorithm": "push"}]}]}]}"#),
                "entry operations/alltoall/0/sizes: ranges 0..100 and 50..",
            ),
            (
                "empty",
                doc(r#"{"alltoall": [{"nprocs": [1, "inf"],
                    "sizes": [{"bytes": [9, 3], "choices": [{"algorithm": "inline"}]}]}]}"#),
                "entry operations/alltoall/0/sizes: range 9..3 is empty",
            ),
            (
                "empty, another collective",
                doc(r#"{"allreduce": [{"nprocs": [1, "inf"],
                    "sizes": [{"bytes": [9, 3], "choices": [{"algorithm": "inline"}]}]}]}"#),
                "range 9..3 is empty",
            ),
            (
                "nprocs",
                doc(r#"{"alltoall": [{"nprocs": [3, 2],
                    "sizes": [{"bytes": [0, 3], "choices": [{"algorithm": "inline"}]}]}]}"#),
                "entry operations/alltoall/0/nprocs: empty or invalid range [3, 2]",
            ),
            (
                "nprocs-overlap",
                doc(r#"{"scatter": [{"nprocs": [2, 4],
                    "sizes": [{"bytes": [0, 3], "choices": [{"algorithm": "inline"}]}]},
                    {"nprocs": [1, 2], "sizes": [{"bytes": [0, 3], "choices": [{"algorithm": "inline"}]}]}]}"#),
                "entries operations/scatter/1 and operations/scatter/0: process-count ranges overlap",
            ),
        ] {
            let p = file(&text, name);
            let e = TableFile::load(&p).and_then(|f| f.tables_for(2).map(|_| ()));
            let msg = e.expect_err(name).to_string();
            assert!(msg.starts_with(&format!("{}: ", p.display())), "{name}: {msg}");
            assert!(msg.contains(needle), "{name}: {msg}");
            std::fs::remove_file(p).unwrap();
        }
    }

    #[test]
    fn compressed_ranges_and_foreign_fingerprints() {
        let text = doc(r#"{"allreduce": [{"nprocs": [2, 2], "sizes": [
            {"bytes": [0, 4096], "choices": [{"algorithm": "compressed"}, {"algorithm": "staging"}]},
            {"bytes": [4097, "inf"], "choices": [{"algorithm": "staging"}]}]}]}"#);
        let f = TableFile::parse(&text, "text", &quote).unwrap();
        assert_eq!(
            f.compressed_for("allreduce", 2),
            Some(vec![(0, 4096, true), (4097, usize::MAX, false)])
        );
        assert_eq!(f.compressed_for("allreduce", 3), None);
        let coll = f.coll_for("allreduce", 2).unwrap().unwrap();
        let algos: Vec<Algo> = coll
            .find(10)
            .unwrap()
            .candidates
            .iter()
            .map(|c| c.algo)
            .collect();
        assert_eq!(algos, vec![Algo::Staging]);
        let m = shmcoll_kernels::hw::machine();
        let diffs = f.fingerprint_differences(m, &quote);
        assert!(
            diffs.iter().any(|d| d.starts_with("vendor: 'x' != ")),
            "{diffs:?}"
        );
    }

    #[test]
    fn the_binding_digest_sees_the_compressed_ranges() {
        let none = binding_digest(7, &[]);
        assert_eq!(none, binding_digest(7, &[]));
        assert_ne!(none, binding_digest(8, &[]));
        let on = [("bcast".to_string(), vec![(0, 10, true)])];
        let off = [("bcast".to_string(), vec![(0, 10, false)])];
        assert_ne!(binding_digest(7, &on), binding_digest(7, &off));
    }

    #[test]
    fn quoting_follows_python_repr_for_printable_text() {
        assert_eq!(quote("warp"), "'warp'");
        assert_eq!(quote("it's"), "\"it's\"");
        assert_eq!(quote("a\\b\n"), "'a\\\\b\\n'");
    }
}
