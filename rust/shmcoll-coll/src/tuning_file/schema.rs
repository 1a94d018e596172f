//! The tuning file's JSON Schema (python/shmcoll/tuning/schema.json, shipped for editors
//! and other tools) enforced on a parsed document, so that the one reader
//! (crate::tuning_file) refuses what the schema refuses and names the same entry: a defect
//! is reported at the instance path a JSON Schema validator gives it (a missing or
//! unexpected key at the object holding it, a bad value at the value), and of several the
//! one with the smallest path, as Python's jsonschema sorted them. The schema is small and
//! fixed (version 1), so its rules are written out here rather than interpreted;
//! tests/test_tuning.py checks every rule against a JSON Schema validator.

use serde_json::{Map, Value};

/// One step of an instance path: an object key or an array index.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum Step {
    Key(String),
    Index(usize),
}

/// An instance path, rendered `a/0/b` (empty: the top level).
pub(super) type Pointer = Vec<Step>;

pub(super) fn render(path: &[Step]) -> String {
    if path.is_empty() {
        return "(top level)".into();
    }
    path.iter()
        .map(|s| match s {
            Step::Key(k) => k.clone(),
            Step::Index(i) => i.to_string(),
        })
        .collect::<Vec<_>>()
        .join("/")
}

/// A value quoted for a message (Python's repr where Python asks).
pub type Quote<'a> = &'a dyn Fn(&str) -> String;

/// A schema defect: where, and what.
#[derive(Debug)]
pub(super) struct Defect {
    pub at: Pointer,
    pub what: String,
}

const TOP_REQUIRED: [&str; 5] = [
    "format",
    "version",
    "shmcoll_version",
    "fingerprint",
    "operations",
];
const TOP_KEYS: [&str; 11] = [
    "format",
    "version",
    "shmcoll_version",
    "created",
    "source",
    "effort",
    "comment",
    "fingerprint",
    "operations",
    "measurements",
    "decisions",
];
const FINGERPRINT_REQUIRED: [&str; 7] = [
    "vendor",
    "model_name",
    "logical_cpus",
    "sockets",
    "l2_bytes",
    "l3_bytes",
    "simd",
];
/// The operation names a file may hold.
pub const OPERATIONS: [&str; 8] = [
    "alltoall",
    "allreduce",
    "allgather",
    "bcast",
    "reduce_scatter",
    "reduce",
    "gather",
    "scatter",
];

struct Walk<'q> {
    quote: Quote<'q>,
    found: Vec<Defect>,
}

/// Every defect of `doc` against the schema, the first (smallest path) first.
pub(super) fn defects(doc: &Value, quote: Quote<'_>) -> Vec<Defect> {
    let mut w = Walk {
        quote,
        found: Vec::new(),
    };
    w.top(doc);
    // Stable: defects at one path keep the order the schema lists its rules in.
    w.found.sort_by(|a, b| a.at.cmp(&b.at));
    w.found
}

impl Walk<'_> {
    fn show(&self, v: &Value) -> String {
        match v {
            Value::String(s) => (self.quote)(s),
            other => other.to_string(),
        }
    }

    fn defect(&mut self, at: &[Step], what: String) {
        self.found.push(Defect {
            at: at.to_vec(),
            what,
        });
    }

    fn wrong_type(&mut self, at: &[Step], v: &Value, want: &str) {
        let what = format!("{} is not of type {}", self.show(v), (self.quote)(want));
        self.defect(at, what);
    }

    fn object<'v>(&mut self, at: &[Step], v: &'v Value) -> Option<&'v Map<String, Value>> {
        let o = v.as_object();
        if o.is_none() {
            self.wrong_type(at, v, "object");
        }
        o
    }

    fn array<'v>(&mut self, at: &[Step], v: &'v Value, min_items: usize) -> Option<&'v Vec<Value>> {
        let Some(a) = v.as_array() else {
            self.wrong_type(at, v, "array");
            return None;
        };
        if a.len() < min_items {
            let what = format!("{} should be non-empty", self.show(v));
            self.defect(at, what);
        }
        Some(a)
    }

    fn required(&mut self, at: &[Step], o: &Map<String, Value>, keys: &[&str]) {
        for k in keys.iter().filter(|k| !o.contains_key(**k)) {
            let what = format!("{} is a required property", (self.quote)(k));
            self.defect(at, what);
        }
    }

    fn only(&mut self, at: &[Step], o: &Map<String, Value>, allowed: &[&str]) {
        let extra: Vec<String> = o
            .keys()
            .filter(|k| !allowed.contains(&k.as_str()))
            .map(|k| (self.quote)(k))
            .collect();
        if !extra.is_empty() {
            let verb = if extra.len() == 1 { "was" } else { "were" };
            let what = format!(
                "Additional properties are not allowed ({} {verb} unexpected)",
                extra.join(", ")
            );
            self.defect(at, what);
        }
    }

    fn string(&mut self, at: &[Step], v: &Value) {
        if !v.is_string() {
            self.wrong_type(at, v, "string");
        }
    }

    /// An integer of at least `min` (JSON numbers without a fraction or exponent).
    fn integer(&mut self, at: &[Step], v: &Value, min: u64) {
        match v {
            Value::Number(n) if n.is_u64() => {
                if n.as_u64().is_some_and(|x| x < min) {
                    self.defect(at, format!("{n} is less than the minimum of {min}"));
                }
            }
            Value::Number(n) if n.is_i64() => {
                self.defect(at, format!("{n} is less than the minimum of {min}"));
            }
            other => self.wrong_type(at, other, "integer"),
        }
    }

    fn one_of(&mut self, at: &[Step], v: &Value, allowed: &[&str]) {
        if !allowed.iter().any(|a| v.as_str() == Some(*a)) {
            let names: Vec<String> = allowed.iter().map(|a| (self.quote)(a)).collect();
            let what = format!("{} is not one of [{}]", self.show(v), names.join(", "));
            self.defect(at, what);
        }
    }

    fn top(&mut self, doc: &Value) {
        let Some(o) = self.object(&[], doc) else {
            return;
        };
        self.required(&[], o, &TOP_REQUIRED);
        self.only(&[], o, &TOP_KEYS);
        for (k, v) in o {
            let at = [Step::Key(k.clone())];
            match k.as_str() {
                "format" if v.as_str() != Some(super::FORMAT) => {
                    let what = format!("{} was expected", (self.quote)(super::FORMAT));
                    self.defect(&at, what);
                }
                "version" if v.as_u64() != Some(super::VERSION) => {
                    self.defect(&at, format!("{} was expected", super::VERSION));
                }
                "shmcoll_version" | "created" | "comment" => self.string(&at, v),
                "source" => self.one_of(&at, v, &["model", "measured"]),
                "effort" => self.one_of(&at, v, &["quick", "measure", "exhaustive"]),
                "fingerprint" => self.fingerprint(&at, v),
                "operations" => self.operations(&at, v),
                "measurements" => {
                    self.array(&at, v, 0);
                }
                "decisions" => {
                    if let Some(a) = self.array(&at, v, 0) {
                        for (i, d) in a.iter().enumerate() {
                            self.object(&[at[0].clone(), Step::Index(i)], d);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn fingerprint(&mut self, at: &[Step], v: &Value) {
        let Some(o) = self.object(at, v) else {
            return;
        };
        self.required(at, o, &FINGERPRINT_REQUIRED);
        for (k, v) in o {
            let here = [at, &[Step::Key(k.clone())]].concat();
            match k.as_str() {
                "vendor" | "model_name" => self.string(&here, v),
                "logical_cpus" | "physical_cores" | "sockets" => self.integer(&here, v, 1),
                "l2_bytes" | "l3_bytes" => self.integer(&here, v, 0),
                "simd" => {
                    if let Some(a) = self.array(&here, v, 0) {
                        for (i, s) in a.iter().enumerate() {
                            self.string(&[here.as_slice(), &[Step::Index(i)]].concat(), s);
                        }
                    }
                }
                _ => {}
            }
        }
    }

    fn operations(&mut self, at: &[Step], v: &Value) {
        let Some(o) = self.object(at, v) else {
            return;
        };
        for (op, entries) in o {
            if !OPERATIONS.contains(&op.as_str()) {
                let names: Vec<String> = OPERATIONS.iter().map(|a| (self.quote)(a)).collect();
                let what = format!("{} is not one of [{}]", (self.quote)(op), names.join(", "));
                self.defect(at, what);
                continue;
            }
            let here = [at, &[Step::Key(op.clone())]].concat();
            if let Some(a) = self.array(&here, entries, 0) {
                for (i, e) in a.iter().enumerate() {
                    self.procs_entry(&[here.as_slice(), &[Step::Index(i)]].concat(), e);
                }
            }
        }
    }

    fn procs_entry(&mut self, at: &[Step], v: &Value) {
        let Some(o) = self.object(at, v) else {
            return;
        };
        self.required(at, o, &["nprocs", "sizes"]);
        self.only(at, o, &["nprocs", "sizes"]);
        if let Some(r) = o.get("nprocs") {
            self.range(&[at, &[Step::Key("nprocs".into())]].concat(), r);
        }
        if let Some(s) = o.get("sizes") {
            let here = [at, &[Step::Key("sizes".into())]].concat();
            if let Some(a) = self.array(&here, s, 1) {
                for (k, size) in a.iter().enumerate() {
                    self.size_entry(&[here.as_slice(), &[Step::Index(k)]].concat(), size);
                }
            }
        }
    }

    /// `[lo, hi]`: an integer of at least 0, then one or `"inf"`.
    fn range(&mut self, at: &[Step], v: &Value) {
        let Some(a) = v.as_array() else {
            self.wrong_type(at, v, "array");
            return;
        };
        if a.len() != 2 {
            let what = if a.len() < 2 {
                format!("{} is too short", self.show(v))
            } else {
                format!("{} is too long", self.show(v))
            };
            self.defect(at, what);
        }
        if let Some(lo) = a.first() {
            self.integer(&[at, &[Step::Index(0)]].concat(), lo, 0);
        }
        if let Some(hi) = a.get(1) {
            let bound_ok = hi.as_u64().is_some() || hi.as_str() == Some("inf");
            if !bound_ok {
                let what = format!(
                    "{} is not valid under any of the given schemas",
                    self.show(hi)
                );
                self.defect(&[at, &[Step::Index(1)]].concat(), what);
            }
        }
    }

    fn size_entry(&mut self, at: &[Step], v: &Value) {
        let Some(o) = self.object(at, v) else {
            return;
        };
        self.required(at, o, &["bytes", "choices"]);
        self.only(at, o, &["bytes", "choices"]);
        if let Some(r) = o.get("bytes") {
            self.range(&[at, &[Step::Key("bytes".into())]].concat(), r);
        }
        if let Some(c) = o.get("choices") {
            let here = [at, &[Step::Key("choices".into())]].concat();
            if let Some(a) = self.array(&here, c, 1) {
                for (i, choice) in a.iter().enumerate() {
                    self.choice(&[here.as_slice(), &[Step::Index(i)]].concat(), choice);
                }
            }
        }
    }

    fn choice(&mut self, at: &[Step], v: &Value) {
        let Some(o) = self.object(at, v) else {
            return;
        };
        self.required(at, o, &["algorithm"]);
        self.only(
            at,
            o,
            &["algorithm", "order", "store", "nt_threshold", "chunk_bytes"],
        );
        for (k, v) in o {
            let here = [at, &[Step::Key(k.clone())]].concat();
            match k.as_str() {
                "algorithm" | "order" | "store" => self.string(&here, v),
                "nt_threshold" => self.integer(&here, v, 0),
                "chunk_bytes" => self.integer(&here, v, 64),
                _ => {}
            }
        }
    }
}
