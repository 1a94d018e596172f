//! Machine facts: CPU model, core counts, cache sizes, SIMD features, page size.
//!
//! Read once from `/sys/devices/system/cpu`, `/proc/cpuinfo` and `/proc/self/*`, then cached.
//! Every source is optional: a missing or unreadable file yields a fallback (0 for unknown
//! cache sizes, 1 for counts, 4096 for the page size), never a panic, so this also works in
//! containers with a restricted `/sys` and on non-Linux systems.

use std::collections::BTreeSet;
use std::fs;
use std::sync::OnceLock;

/// Facts about the machine this process runs on. See [`machine`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Machine {
    /// CPU vendor (`vendor_id` on x86, `CPU implementer` on Arm), or `"unknown"`.
    pub vendor: String,
    /// CPU model name, or `"unknown"`.
    pub model_name: String,
    /// Online CPUs usable by this process (its scheduler affinity mask).
    pub logical_cpus: usize,
    /// Distinct (package, core) pairs among the online CPUs of the machine.
    pub physical_cores: usize,
    /// Distinct packages among the online CPUs of the machine.
    pub sockets: usize,
    /// L1 data cache of one core, bytes (0 if unknown).
    pub l1d_bytes: usize,
    /// L2 cache seen by one core, bytes (0 if unknown).
    pub l2_bytes: usize,
    /// Last-level (L3) cache, bytes (0 if unknown). As reported: in a VM this is the host's.
    pub l3_bytes: usize,
    /// Number of CPUs sharing that L3 (its sysfs `shared_cpu_list`), at least 1.
    pub l3_shared_by: usize,
    /// SIMD and copy-related features, e.g. `["sse2", "avx2", "avx512f", "erms", "fsrm"]`.
    pub simd: Vec<&'static str>,
    /// Base page size, bytes.
    pub page_size: usize,
}

impl Machine {
    /// L3 bytes per CPU sharing it (0 if the L3 size is unknown).
    pub fn l3_share(&self) -> usize {
        self.l3_bytes / self.l3_shared_by.max(1)
    }
}

/// The facts of this machine, read on first use.
pub fn machine() -> &'static Machine {
    static MACHINE: OnceLock<Machine> = OnceLock::new();
    MACHINE.get_or_init(read_machine)
}

/// Byte count from which `Store::Hybrid` switches a single copy to streaming stores, for
/// a copy that has its CPU to itself.
///
/// `SHMCOLL_NT_THRESHOLD` (bytes, with optional K/M/G suffix, see [`parse_bytes`]) overrides
/// the default; it is read once. The default comes from the cache model, see
/// [`default_nt_threshold`]. A communicator whose ranks share CPUs uses
/// [`nt_threshold_per_rank`] instead.
pub fn nt_threshold() -> usize {
    static T: OnceLock<usize> = OnceLock::new();
    *T.get_or_init(|| nt_threshold_from(machine(), nt_threshold_env().as_deref()))
}

/// The NT threshold of one of `ranks` processes that copy at once on this machine: the
/// default shared out among the ranks of a CPU, or the override exactly as given.
pub fn nt_threshold_per_rank(ranks: usize) -> usize {
    nt_threshold_per_rank_from(machine(), nt_threshold_env().as_deref(), ranks)
}

fn nt_threshold_env() -> Option<String> {
    std::env::var("SHMCOLL_NT_THRESHOLD").ok()
}

/// [`nt_threshold`] as a pure function of the machine and the override string (testable).
/// An override that does not parse is ignored.
pub fn nt_threshold_from(m: &Machine, env: Option<&str>) -> usize {
    env.and_then(parse_bytes)
        .unwrap_or_else(|| default_nt_threshold(m))
}

/// [`nt_threshold_per_rank`] as a pure function. The cache budget is a CPU's, so ranks that
/// take turns on one CPU split it (figures in docs/results-collectives.md, "Streaming
/// stores from a CPU's share of the L3"). Never below 256 KiB, where streaming stores lose
/// everywhere.
pub fn nt_threshold_per_rank_from(m: &Machine, env: Option<&str>, ranks: usize) -> usize {
    if let Some(t) = env.and_then(parse_bytes) {
        return t;
    }
    let per_cpu = ranks.max(1).div_ceil(m.logical_cpus.max(1));
    (default_nt_threshold(m) / per_cpu).max(256 << 10)
}

/// Default NT threshold of a copy with a CPU to itself, from a small cache model (at least
/// 1 MiB):
///
/// * the L3 share looks real (at most 32x the L2): the share. Every core copies at once in
///   a collective, and the cached copy wins while each writes less than its share;
/// * the L3 share looks absurd (over 32x the L2): the L2. VMs report the host's whole L3
///   and share it with other tenants, so only the private L2 can be relied on.
///
/// Unknown sizes (0) fall back to 8 MiB. Streaming pays off once the destination would not
/// stay in cache anyway: a temporal copy then costs a read-for-ownership of every
/// destination line plus the eviction of useful data.
pub fn default_nt_threshold(m: &Machine) -> usize {
    const FLOOR: usize = 1 << 20;
    const UNKNOWN: usize = 8 << 20;
    let l3 = m.l3_share();
    let l2 = m.l2_bytes;
    let t = match (l3, l2) {
        (0, 0) => UNKNOWN,
        (0, x) => x,
        (x, 0) => x / 2,
        (s, l2) if s > 32 * l2 => l2,
        (s, l2) => s.max(l2),
    };
    t.max(FLOOR)
}

/// Parses a byte count: `"4096"`, `"64K"`, `"16M"`, `"1G"`, `"1.5M"`; suffixes are binary
/// (K = 1024), case-insensitive, optionally followed by `B` or `iB` (`"64KiB"`, `"2mb"`).
/// Fractions are rounded down to whole bytes. Returns `None` for anything else or overflow.
pub fn parse_bytes(s: &str) -> Option<usize> {
    let s = s.trim();
    let digits_end = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (num, unit) = s.split_at(digits_end);
    let unit = unit.trim().to_ascii_lowercase();
    let shift = match unit.as_str() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        "t" | "tb" | "tib" => 40,
        _ => return None,
    };
    if num.is_empty() || num.starts_with('.') || num.ends_with('.') {
        return None;
    }
    if let Ok(n) = num.parse::<u64>() {
        let n = usize::try_from(n).ok()?;
        return n.checked_mul(1usize.checked_shl(shift)?);
    }
    // Fractional: f64 is exact enough for anything below 2^53 bytes.
    let x = num.parse::<f64>().ok()? * (1u64 << shift) as f64;
    (x.is_finite() && x >= 0.0 && x < usize::MAX as f64).then_some(x as usize)
}

#[cfg(target_arch = "x86_64")]
fn leaf7() -> Option<(u32, u32)> {
    (core::arch::x86_64::__get_cpuid_max(0).0 >= 7).then(|| {
        let r = core::arch::x86_64::__cpuid_count(7, 0);
        (r.ebx, r.edx)
    })
}

/// Enhanced `rep movsb` (CPUID.7.0:EBX[9]): `rep movsb` is a fast copy for large sizes.
#[cfg(target_arch = "x86_64")]
pub(crate) fn x86_erms() -> bool {
    leaf7().is_some_and(|(ebx, _)| ebx & (1 << 9) != 0)
}

/// Fast short `rep movsb` (CPUID.7.0:EDX[4]): low startup cost for short `rep movsb`.
#[cfg(target_arch = "x86_64")]
pub(crate) fn x86_fsrm() -> bool {
    leaf7().is_some_and(|(_, edx)| edx & (1 << 4) != 0)
}

// ---------------------------------------------------------------------------------------
// Reading the facts

fn read_machine() -> Machine {
    let cpuinfo = fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let field = |key: &str| {
        cpuinfo.lines().find_map(|l| {
            let (k, v) = l.split_once(':')?;
            (k.trim() == key).then(|| v.trim().to_string())
        })
    };
    let vendor = field("vendor_id")
        .or_else(|| field("CPU implementer"))
        .unwrap_or_else(|| "unknown".into());
    let model_name = field("model name")
        .or_else(|| field("Model"))
        .unwrap_or_else(|| "unknown".into());

    let allowed = read_status_cpus_allowed();
    let logical_cpus = allowed
        .as_ref()
        .map(|s| s.len())
        .filter(|&n| n > 0)
        .or_else(|| std::thread::available_parallelism().ok().map(|n| n.get()))
        .unwrap_or(1);

    let online = read_file("/sys/devices/system/cpu/online")
        .and_then(|s| parse_cpu_list(&s))
        .unwrap_or_default();
    let (physical_cores, sockets) = topology(&online, &cpuinfo, logical_cpus);

    // Caches as seen from a CPU we may run on (they can differ on hybrid CPUs).
    let cpu = allowed
        .as_ref()
        .and_then(|s| s.first().copied())
        .unwrap_or(0);
    let mut c = read_caches(cpu);
    if c.l3 == 0 {
        // x86 /proc/cpuinfo "cache size: 491520 KB" is the last-level cache.
        c.l3 = field("cache size")
            .and_then(|v| parse_bytes(&v))
            .unwrap_or(0);
    }

    Machine {
        vendor,
        model_name,
        logical_cpus,
        physical_cores,
        sockets,
        l1d_bytes: c.l1d,
        l2_bytes: c.l2,
        l3_bytes: c.l3,
        l3_shared_by: c.l3_shared_by.max(1),
        simd: simd_features(),
        page_size: page_size().unwrap_or(4096),
    }
}

fn read_file(path: &str) -> Option<String> {
    fs::read_to_string(path).ok().map(|s| s.trim().to_string())
}

/// Parses a kernel CPU list such as `"0-3,8,10-11"`.
pub(crate) fn parse_cpu_list(s: &str) -> Option<BTreeSet<usize>> {
    let mut set = BTreeSet::new();
    for part in s.trim().split(',').filter(|p| !p.is_empty()) {
        match part.split_once('-') {
            Some((a, b)) => {
                let (a, b): (usize, usize) = (a.trim().parse().ok()?, b.trim().parse().ok()?);
                if b < a || b - a > 1 << 20 {
                    return None;
                }
                set.extend(a..=b);
            }
            None => {
                set.insert(part.trim().parse().ok()?);
            }
        }
    }
    Some(set)
}

/// The affinity mask of this process, in ascending order (`Cpus_allowed_list`).
fn read_status_cpus_allowed() -> Option<Vec<usize>> {
    let status = fs::read_to_string("/proc/self/status").ok()?;
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    Some(parse_cpu_list(list)?.into_iter().collect())
}

/// (physical cores, sockets) from sysfs topology, else from /proc/cpuinfo, else guesses.
fn topology(online: &BTreeSet<usize>, cpuinfo: &str, logical: usize) -> (usize, usize) {
    let mut cores = BTreeSet::new();
    let mut packages = BTreeSet::new();
    for &cpu in online {
        let base = format!("/sys/devices/system/cpu/cpu{cpu}/topology");
        let pkg =
            read_file(&format!("{base}/physical_package_id")).and_then(|s| s.parse::<i64>().ok());
        let core = read_file(&format!("{base}/core_id")).and_then(|s| s.parse::<i64>().ok());
        if let (Some(p), Some(c)) = (pkg, core) {
            packages.insert(p);
            cores.insert((p, c));
        }
    }
    if cores.is_empty() {
        // /proc/cpuinfo: one block per logical CPU with "physical id" and "core id".
        for block in cpuinfo.split("\n\n") {
            let get = |key: &str| {
                block.lines().find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    (k.trim() == key).then(|| v.trim().parse::<i64>().ok())?
                })
            };
            if let (Some(p), Some(c)) = (get("physical id"), get("core id")) {
                packages.insert(p);
                cores.insert((p, c));
            }
        }
    }
    if cores.is_empty() {
        (logical.max(1), 1)
    } else {
        (cores.len(), packages.len().max(1))
    }
}

#[derive(Default)]
struct Caches {
    l1d: usize,
    l2: usize,
    l3: usize,
    l3_shared_by: usize,
}

fn read_caches(cpu: usize) -> Caches {
    let mut c = Caches::default();
    let dir = format!("/sys/devices/system/cpu/cpu{cpu}/cache");
    let Ok(entries) = fs::read_dir(&dir) else {
        return c;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        if !name.to_string_lossy().starts_with("index") {
            continue;
        }
        let p = e.path();
        let get = |f: &str| {
            fs::read_to_string(p.join(f))
                .ok()
                .map(|s| s.trim().to_string())
        };
        let level = get("level").and_then(|s| s.parse::<u32>().ok());
        let kind = get("type").unwrap_or_default();
        let size = get("size").and_then(|s| parse_bytes(&s)).unwrap_or(0);
        match (level, kind.as_str()) {
            (Some(1), "Data" | "Unified") => c.l1d = size,
            (Some(2), "Data" | "Unified") => c.l2 = size,
            (Some(3), "Unified" | "Data") => {
                c.l3 = size;
                c.l3_shared_by = get("shared_cpu_list")
                    .and_then(|s| parse_cpu_list(&s))
                    .map_or(1, |s| s.len().max(1));
            }
            _ => {}
        }
    }
    c
}

/// `AT_PAGESZ` from the auxiliary vector (native-endian pairs of machine words).
fn page_size() -> Option<usize> {
    const AT_PAGESZ: usize = 6;
    const W: usize = std::mem::size_of::<usize>();
    let auxv = fs::read("/proc/self/auxv").ok()?;
    let word = |b: &[u8]| usize::from_ne_bytes(b.try_into().unwrap_or([0; W]));
    auxv.chunks_exact(2 * W)
        .find(|kv| word(&kv[..W]) == AT_PAGESZ)
        .map(|kv| word(&kv[W..]))
        .filter(|&p| p.is_power_of_two())
}

fn simd_features() -> Vec<&'static str> {
    #[allow(unused_mut)]
    let mut v = Vec::new();
    #[cfg(target_arch = "x86_64")]
    {
        let feats = [
            ("sse2", is_x86_feature_detected!("sse2")),
            ("sse4.2", is_x86_feature_detected!("sse4.2")),
            ("avx", is_x86_feature_detected!("avx")),
            ("avx2", is_x86_feature_detected!("avx2")),
            ("avx512f", is_x86_feature_detected!("avx512f")),
            ("avx512bw", is_x86_feature_detected!("avx512bw")),
            ("avx512vl", is_x86_feature_detected!("avx512vl")),
            ("erms", x86_erms()),
            ("fsrm", x86_fsrm()),
        ];
        v.extend(feats.iter().filter(|f| f.1).map(|f| f.0));
    }
    #[cfg(target_arch = "aarch64")]
    {
        let feats = [
            ("neon", std::arch::is_aarch64_feature_detected!("neon")),
            ("sve", std::arch::is_aarch64_feature_detected!("sve")),
            ("sve2", std::arch::is_aarch64_feature_detected!("sve2")),
        ];
        v.extend(feats.iter().filter(|f| f.1).map(|f| f.0));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bytes() {
        assert_eq!(parse_bytes("4096"), Some(4096));
        assert_eq!(parse_bytes(" 64K "), Some(65536));
        assert_eq!(parse_bytes("64k"), Some(65536));
        assert_eq!(parse_bytes("64KiB"), Some(65536));
        assert_eq!(parse_bytes("16M"), Some(16 << 20));
        assert_eq!(parse_bytes("2mb"), Some(2 << 20));
        assert_eq!(parse_bytes("1G"), Some(1 << 30));
        assert_eq!(parse_bytes("1.5M"), Some(3 << 19));
        assert_eq!(parse_bytes("0.5k"), Some(512));
        assert_eq!(parse_bytes("48 K"), Some(48 << 10));
        assert_eq!(parse_bytes("0"), Some(0));
        assert_eq!(parse_bytes("12B"), Some(12));
        for bad in [
            "",
            "K",
            "-1",
            "1.2.3",
            ".5K",
            "5.",
            "12X",
            "1e3",
            "abc",
            "99999999999999999999999",
            "16777216T",
        ] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn cpu_list() {
        let s = parse_cpu_list("0-3,8,10-11\n").unwrap();
        assert_eq!(
            s.into_iter().collect::<Vec<_>>(),
            vec![0, 1, 2, 3, 8, 10, 11]
        );
        assert_eq!(parse_cpu_list("").unwrap().len(), 0);
        assert!(parse_cpu_list("3-1").is_none());
        assert!(parse_cpu_list("x").is_none());
    }

    fn fake(l2: usize, l3: usize, shared: usize, cpus: usize) -> Machine {
        Machine {
            vendor: "v".into(),
            model_name: "m".into(),
            logical_cpus: cpus,
            physical_cores: cpus,
            sockets: 1,
            l1d_bytes: 48 << 10,
            l2_bytes: l2,
            l3_bytes: l3,
            l3_shared_by: shared,
            simd: vec![],
            page_size: 4096,
        }
    }

    #[test]
    fn threshold_model() {
        // The Xeon VM: 2 MiB L2, "480 MiB" L3 shared by 2: the share is absurd -> the L2.
        let vm = fake(2 << 20, 480 << 20, 2, 2);
        assert_eq!(vm.l3_share(), 240 << 20);
        assert_eq!(default_nt_threshold(&vm), 2 << 20);
        // The Zen 4 VMs: 2 or 1 MiB L2, the CCD's 32 MiB L3 for 2 -> the 16 MiB share.
        let zen4 = fake(1 << 20, 32 << 20, 2, 2);
        assert_eq!(default_nt_threshold(&zen4), 16 << 20);
        assert_eq!(
            default_nt_threshold(&fake(2 << 20, 32 << 20, 2, 2)),
            16 << 20
        );
        // A real 32-core socket: 1 MiB L2, 32 MiB L3 shared by 64 -> share 512 KiB -> L2.
        assert_eq!(
            default_nt_threshold(&fake(1 << 20, 32 << 20, 64, 64)),
            1 << 20
        );
        // 8 cores sharing 32 MiB, 512 KiB L2 -> the 4 MiB share (8x the L2).
        assert_eq!(
            default_nt_threshold(&fake(512 << 10, 32 << 20, 8, 8)),
            4 << 20
        );
        // Unknown sizes.
        assert_eq!(default_nt_threshold(&fake(0, 0, 1, 4)), 8 << 20);
        assert_eq!(default_nt_threshold(&fake(0, 64 << 20, 4, 4)), 8 << 20);
        assert_eq!(default_nt_threshold(&fake(1 << 20, 0, 1, 4)), 1 << 20);
        // Override.
        assert_eq!(nt_threshold_from(&vm, Some("64K")), 65536);
        assert_eq!(nt_threshold_from(&vm, Some("junk")), 2 << 20);
        assert_eq!(nt_threshold_from(&vm, None), 2 << 20);
    }

    #[test]
    fn ranks_sharing_a_cpu_share_its_cache_budget() {
        let zen4 = fake(1 << 20, 32 << 20, 2, 2);
        // Up to a rank per CPU each has the whole budget.
        for ranks in [0, 1, 2] {
            assert_eq!(nt_threshold_per_rank_from(&zen4, None, ranks), 16 << 20);
        }
        // 3 or 4 ranks on 2 CPUs: two take turns on a CPU.
        assert_eq!(nt_threshold_per_rank_from(&zen4, None, 3), 8 << 20);
        assert_eq!(nt_threshold_per_rank_from(&zen4, None, 4), 8 << 20);
        assert_eq!(nt_threshold_per_rank_from(&zen4, None, 16), 2 << 20);
        // Never below the floor, however many ranks.
        assert_eq!(nt_threshold_per_rank_from(&zen4, None, 4096), 256 << 10);
        // An override is taken exactly as given, and a bad one is ignored.
        assert_eq!(nt_threshold_per_rank_from(&zen4, Some("3M"), 4), 3 << 20);
        assert_eq!(nt_threshold_per_rank_from(&zen4, Some("x"), 4), 8 << 20);
    }

    #[test]
    fn this_machine() {
        let m = machine();
        assert!(m.logical_cpus >= 1);
        assert!(m.physical_cores >= 1 && m.sockets >= 1 && m.l3_shared_by >= 1);
        assert!(m.page_size.is_power_of_two() && m.page_size >= 4096);
        assert!(nt_threshold() >= 1 << 20 || std::env::var_os("SHMCOLL_NT_THRESHOLD").is_some());
        if cfg!(target_os = "linux")
            && std::path::Path::new("/sys/devices/system/cpu/cpu0/cache").exists()
        {
            assert!(m.l1d_bytes > 0 && m.l2_bytes > 0, "{m:?}");
            assert!(m.l2_bytes > m.l1d_bytes);
        }
        if cfg!(target_arch = "x86_64") {
            assert!(m.simd.contains(&"sse2"));
            assert_ne!(m.vendor, "unknown");
        }
        let _ = m.l3_share();
    }
}
