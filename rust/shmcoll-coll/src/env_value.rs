//! Numeric settings read from the environment, each with a documented range.
//!
//! An environment value is input nobody checked: a typo, a value meant for another tool, or
//! something hostile. Every number is therefore parsed with checked conversions and held
//! to its range before it becomes a size or a duration (`Duration::from_secs_f64` panics
//! beyond ~584 years, sizes multiply with the number of ranks). Anything else (garbage, NaN,
//! infinity, a negative, a value beyond the range, text that is not UTF-8) is an
//! `Error::InvalidArgument` (Python's ArgumentError) naming the variable, the value and the
//! allowed range; an empty value means unset.

use std::ffi::OsString;

use shmcoll_kernels::hw;

use crate::error::{Error, Result};

/// A range of real numbers: `lo < x <= hi` when `lo_open`, else `lo <= x <= hi`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Reals {
    pub lo: f64,
    pub lo_open: bool,
    pub hi: f64,
    /// What the number counts ("seconds", "microseconds").
    pub unit: &'static str,
}

impl Reals {
    pub fn contains(&self, x: f64) -> bool {
        // NaN fails both comparisons.
        (if self.lo_open {
            x > self.lo
        } else {
            x >= self.lo
        }) && x <= self.hi
    }

    fn describe(&self) -> String {
        let op = if self.lo_open { "<" } else { "<=" };
        format!("{}: {} {op} value <= {}", self.unit, self.lo, self.hi)
    }
}

/// A range of whole numbers, `lo <= n <= hi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Whole {
    pub lo: u64,
    pub hi: u64,
    /// What the number counts ("yields", "bytes").
    pub unit: &'static str,
}

impl Whole {
    fn describe(&self) -> String {
        format!("{}: {} <= value <= {}", self.unit, self.lo, self.hi)
    }
}

/// At most this many characters of a bad value go into the error message.
const SHOWN_CHARS: usize = 64;

fn shown(raw: &str) -> String {
    let mut s: String = raw.chars().take(SHOWN_CHARS).collect();
    if raw.chars().nth(SHOWN_CHARS).is_some() {
        s.push('…');
    }
    format!("{s:?}")
}

fn bad(name: &str, raw: &str, why: &str, range: String) -> Error {
    Error::InvalidArgument(format!(
        "environment: {name}={} {why}; allowed: {range}",
        shown(raw)
    ))
}

/// `raw` as a real number within `range`.
pub fn parse_real(name: &str, raw: &str, range: Reals) -> Result<f64> {
    let x = raw
        .trim()
        .parse::<f64>()
        .map_err(|_| bad(name, raw, "is not a number", range.describe()))?;
    if !range.contains(x) {
        return Err(bad(name, raw, "is out of range", range.describe()));
    }
    Ok(x)
}

/// `raw` as a whole number (decimal digits only) within `range`.
pub fn parse_whole(name: &str, raw: &str, range: Whole) -> Result<u64> {
    let t = raw.trim();
    if t.is_empty() || !t.bytes().all(|b| b.is_ascii_digit()) {
        return Err(bad(name, raw, "is not a whole number", range.describe()));
    }
    // Only digits: the one failure left is overflow, which is out of range too.
    match t.parse::<u64>() {
        Ok(n) if (range.lo..=range.hi).contains(&n) => Ok(n),
        _ => Err(bad(name, raw, "is out of range", range.describe())),
    }
}

/// `raw` as a byte count (`4096`, `64K`, `1.5M`, `2G`, `1T`) within `range`.
pub fn parse_bytes(name: &str, raw: &str, range: Whole) -> Result<usize> {
    let n = hw::parse_bytes(raw.trim()).ok_or_else(|| {
        bad(
            name,
            raw,
            "is not a byte count (e.g. 4096, 64K, 16M)",
            range.describe(),
        )
    })?;
    match u64::try_from(n) {
        Ok(v) if (range.lo..=range.hi).contains(&v) => Ok(n),
        _ => Err(bad(name, raw, "is out of range", range.describe())),
    }
}

/// The value of `name`, `None` when unset or empty; text that is not UTF-8 is an error.
pub fn var(name: &str) -> Result<Option<String>> {
    var_from(name, std::env::var_os(name))
}

fn var_from(name: &str, value: Option<OsString>) -> Result<Option<String>> {
    match value {
        None => Ok(None),
        Some(v) => match v.into_string() {
            Ok(s) if s.trim().is_empty() => Ok(None),
            Ok(s) => Ok(Some(s)),
            Err(v) => Err(Error::InvalidArgument(format!(
                "environment: {name}={} is not UTF-8 text",
                shown(&v.to_string_lossy())
            ))),
        },
    }
}

/// `name` as a real number within `range`, if set.
pub fn env_real(name: &str, range: Reals) -> Result<Option<f64>> {
    var(name)?
        .map(|raw| parse_real(name, &raw, range))
        .transpose()
}

/// `name` as a whole number within `range`, if set.
pub fn env_whole(name: &str, range: Whole) -> Result<Option<u64>> {
    var(name)?
        .map(|raw| parse_whole(name, &raw, range))
        .transpose()
}

/// `name` as a byte count within `range`, if set.
pub fn env_bytes(name: &str, range: Whole) -> Result<Option<usize>> {
    var(name)?
        .map(|raw| parse_bytes(name, &raw, range))
        .transpose()
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const R: Reals = Reals {
        lo: 0.0,
        lo_open: true,
        hi: 100.0,
        unit: "seconds",
    };
    const W: Whole = Whole {
        lo: 2,
        hi: 1000,
        unit: "yields",
    };
    const B: Whole = Whole {
        lo: 64,
        hi: 1 << 30,
        unit: "bytes",
    };

    /// Strings a careless or hostile environment holds.
    fn hostile() -> impl Strategy<Value = String> {
        prop_oneof![
            Just("1e300".to_string()),
            Just("-1".to_string()),
            Just("nan".to_string()),
            Just("NaN".to_string()),
            Just("inf".to_string()),
            Just("-inf".to_string()),
            Just("1e-400".to_string()),
            Just("0".to_string()),
            Just("99999999999999999999999999999999".to_string()),
            Just("18446744073709551616".to_string()),
            Just("16E".to_string()),
            Just("1.5.5".to_string()),
            Just("0x10".to_string()),
            Just("+5".to_string()),
            Just("５".to_string()),
            Just("1\u{0}".to_string()),
            Just("10 s".to_string()),
            "\\PC*",
            "[0-9eE.+-]{1,40}",
            "[0-9]{1,30}[kKmMgGtTbB]{0,3}",
        ]
    }

    /// The outcome of one parse: a value within range, or an ArgumentError that names the
    /// variable; never a panic.
    fn check<T: Copy>(
        r: Result<T>,
        ok: impl Fn(T) -> bool,
    ) -> std::result::Result<(), TestCaseError> {
        match r {
            Ok(v) if ok(v) => Ok(()),
            Ok(_) => Err(TestCaseError::fail("accepted a value out of range")),
            Err(Error::InvalidArgument(m)) if m.contains("SHMCOLL_X") && m.contains("allowed") => {
                Ok(())
            }
            Err(e) => Err(TestCaseError::fail(format!("unexpected error {e}"))),
        }
    }

    proptest! {
        #[test]
        fn every_string_is_a_value_in_range_or_an_argument_error(s in hostile()) {
            check(parse_real("SHMCOLL_X", &s, R), |x| R.contains(x))?;
            check(parse_whole("SHMCOLL_X", &s, W), |n| (W.lo..=W.hi).contains(&n))?;
            check(parse_bytes("SHMCOLL_X", &s, B), |n| (B.lo..=B.hi).contains(&(n as u64)))?;
        }

        #[test]
        fn numbers_in_range_are_taken_as_written(x in 1e-9f64..=100.0, n in 2u64..=1000) {
            prop_assert_eq!(parse_real("SHMCOLL_X", &format!("{x}"), R).unwrap(), x);
            prop_assert_eq!(parse_whole("SHMCOLL_X", &format!(" {n} "), W).unwrap(), n);
            prop_assert_eq!(parse_bytes("SHMCOLL_X", &format!("{n}K"), B).unwrap(), n as usize * 1024);
        }
    }

    #[test]
    fn the_message_names_the_variable_the_value_and_the_range() {
        let e = parse_real("SHMCOLL_X", "1e300", R).unwrap_err().to_string();
        assert!(e.contains("SHMCOLL_X=\"1e300\" is out of range"), "{e}");
        assert!(e.contains("seconds: 0 < value <= 100"), "{e}");
        let long = "9".repeat(10_000);
        let e = parse_whole("SHMCOLL_X", &long, W).unwrap_err().to_string();
        assert!(e.len() < 300, "a huge value is shown shortened: {e}");
    }

    #[test]
    fn the_range_ends_are_inclusive_except_an_open_low_end() {
        assert!(parse_real("SHMCOLL_X", "0", R).is_err());
        assert!(parse_real("SHMCOLL_X", "100", R).is_ok());
        assert!(
            parse_whole("SHMCOLL_X", "2", W).is_ok() && parse_whole("SHMCOLL_X", "1", W).is_err()
        );
        assert!(parse_bytes("SHMCOLL_X", "1G", B).is_ok());
        assert!(parse_bytes("SHMCOLL_X", "1025M", B).is_err());
    }

    #[test]
    fn empty_is_unset_and_non_utf8_is_an_error() {
        use std::os::unix::ffi::OsStringExt;
        assert!(var_from("SHMCOLL_X", None).unwrap().is_none());
        assert!(var_from("SHMCOLL_X", Some(" ".into())).unwrap().is_none());
        let e = var_from("SHMCOLL_X", Some(OsString::from_vec(vec![b'1', 0xff]))).unwrap_err();
        assert!(e.to_string().contains("not UTF-8"), "{e}");
    }
}
