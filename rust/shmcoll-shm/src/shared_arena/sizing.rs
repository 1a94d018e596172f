//! How large the shared-array arena may be in this process. The arena reserves address space
//! (MAP_NORESERVE: no memory until touched), which a process limited by `ulimit -v`
//! (RLIMIT_AS) also needs for everything else, and its memfd is a file, whose size
//! RLIMIT_FSIZE bounds (ftruncate past it raises SIGXFSZ, which kills by default). So the
//! arena takes at most a quarter of the address space the limit allows and no more than the
//! file limit, is halved while mmap refuses, and is not created at all below `MIN_ARENA`:
//! then the C allocator serves every array, as if shmcoll were not there.

use std::fmt;

/// Below this, an arena would hold too few arrays to be worth the address space.
pub const MIN_ARENA: usize = 64 << 20;
const PAGE: usize = 4096;

/// The process's limits that bound the arena.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Limits {
    /// RLIMIT_AS (bytes), None when unlimited.
    pub address_space: Option<u64>,
    /// RLIMIT_FSIZE (bytes), None when unlimited.
    pub file_size: Option<u64>,
    /// vm.overcommit_memory = 2: pages are committed when they are first touched.
    pub strict_overcommit: bool,
}

impl Limits {
    pub fn of_process() -> Limits {
        use rustix::process::{getrlimit, Resource};
        Limits {
            address_space: getrlimit(Resource::As).current,
            file_size: getrlimit(Resource::Fsize).current,
            strict_overcommit: std::fs::read_to_string("/proc/sys/vm/overcommit_memory")
                .is_ok_and(|s| s.trim() == "2"),
        }
    }
}

/// The arena's size, and the reason it is smaller than requested, if it is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sizing {
    pub requested: usize,
    pub len: usize,
    pub reduced_by: Option<Reason>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reason {
    AddressSpace,
    FileSize,
    MmapRefused,
}

impl fmt::Display for Sizing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let why = match self.reduced_by {
            None => return write!(f, "{} bytes", self.len),
            Some(Reason::AddressSpace) => "a quarter of the address-space limit (ulimit -v)",
            Some(Reason::FileSize) => "the file-size limit (ulimit -f)",
            Some(Reason::MmapRefused) => "what mmap accepted",
        };
        write!(f, "{} bytes instead of {}: {why}", self.len, self.requested)
    }
}

fn pages_down(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX) / PAGE * PAGE
}

/// The size to try first for a request of `requested` bytes (a multiple of pages), or why
/// no arena fits.
pub fn plan(requested: usize, limits: &Limits) -> Result<Sizing, String> {
    let mut s = Sizing {
        requested,
        len: requested,
        reduced_by: None,
    };
    if let Some(a) = limits.address_space {
        let share = pages_down(a / 4);
        if share < s.len {
            s = Sizing {
                len: share,
                reduced_by: Some(Reason::AddressSpace),
                ..s
            };
        }
    }
    if let Some(f) = limits.file_size {
        let cap = pages_down(f);
        if cap < s.len {
            s = Sizing {
                len: cap,
                reduced_by: Some(Reason::FileSize),
                ..s
            };
        }
    }
    if s.len < MIN_ARENA.min(requested) {
        return Err(format!(
            "the process's limits leave {} bytes for it (ulimit -v / -f), less than {}",
            s.len,
            MIN_ARENA.min(requested)
        ));
    }
    Ok(s)
}

/// The next size to try after mmap (or ftruncate) refused `s` with `e`, if any is left.
pub fn halve(s: Sizing, e: &std::io::Error) -> Option<Sizing> {
    let refused = matches!(e.raw_os_error(), Some(libc::ENOMEM) | Some(libc::EFBIG));
    let len = s.len / 2 / PAGE * PAGE;
    (refused && len >= MIN_ARENA.min(s.requested)).then_some(Sizing {
        len,
        reduced_by: Some(Reason::MmapRefused),
        ..s
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONE: Limits = Limits {
        address_space: None,
        file_size: None,
        strict_overcommit: false,
    };

    #[test]
    fn unlimited_processes_get_what_they_ask() {
        let s = plan(64 << 30, &NONE).unwrap();
        assert_eq!((s.len, s.reduced_by), (64 << 30, None));
    }

    #[test]
    fn limits_shrink_the_arena_or_leave_no_arena() {
        let v = Limits {
            address_space: Some(8 << 30),
            ..NONE
        };
        let s = plan(64 << 30, &v).unwrap();
        assert_eq!((s.len, s.reduced_by), (2 << 30, Some(Reason::AddressSpace)));
        assert!(s.to_string().contains("ulimit -v"), "{s}");
        let f = Limits {
            file_size: Some((1 << 30) + 123),
            ..v
        };
        let s = plan(64 << 30, &f).unwrap();
        assert_eq!((s.len, s.reduced_by), (1 << 30, Some(Reason::FileSize)));
        let tight = Limits {
            address_space: Some(100 << 20),
            ..NONE
        };
        assert!(plan(64 << 30, &tight).is_err());
        // A small request is not refused for being below MIN_ARENA.
        assert_eq!(plan(1 << 20, &NONE).unwrap().len, 1 << 20);
    }

    #[test]
    fn refusals_halve_down_to_the_minimum() {
        let enomem = std::io::Error::from_raw_os_error(libc::ENOMEM);
        let mut s = plan(1 << 30, &NONE).unwrap();
        let mut tries = 0;
        while let Some(next) = halve(s, &enomem) {
            assert!(next.len < s.len && next.len >= MIN_ARENA);
            s = next;
            tries += 1;
        }
        assert_eq!((s.len, tries), (MIN_ARENA, 4));
        let other = std::io::Error::from_raw_os_error(libc::EACCES);
        assert!(halve(plan(1 << 30, &NONE).unwrap(), &other).is_none());
    }
}
