//! Whether this kernel backs shared memory (a memfd) with transparent huge pages, and
//! whether a mapping has to ask for them (madvise), read from sysfs once per process.
//!
//! NumPy puts its arrays of 4 MiB or more on transparent huge pages; a memfd gets them only
//! where the administrator allowed it for shared memory (`shmem_enabled`, which most
//! distributions leave at `never`). The shared-array arena (crate::shared_arena) serves
//! large arrays only where they get huge pages too, since on 4 KiB pages element-wise work
//! over arrays larger than the caches runs slower (docs/results-collectives.md, "Ordinary
//! NumPy arrays by default").
//!
//! The settings (the kernel's Documentation/admin-guide/mm/transhuge.rst): the global
//! `/sys/kernel/mm/transparent_hugepage/shmem_enabled` (`always`, `within_size`, `advise`,
//! `never`, and `deny`/`force` for testing), and for the PMD size (2 MiB on x86-64)
//! `hugepages-2048kB/shmem_enabled`, where `inherit` defers to the global one.

use std::sync::OnceLock;

/// How a shared mapping gets huge pages on this kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ShmemHuge {
    /// Never (the common default).
    Never,
    /// Where the mapping asked for them (madvise(MADV_HUGEPAGE)).
    OnAdvice,
    /// Everywhere they fit, without asking.
    Always,
}

/// The state read from sysfs, with the setting it came from (for `shmcoll info`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SharedHugePages {
    pub mode: ShmemHuge,
    /// "shmem_enabled=never" and the like, or why nothing could be read.
    pub setting: String,
}

const DIR: &str = "/sys/kernel/mm/transparent_hugepage";

/// This kernel's answer (read once).
pub fn shared_memory() -> &'static SharedHugePages {
    static STATE: OnceLock<SharedHugePages> = OnceLock::new();
    STATE.get_or_init(|| {
        let global = std::fs::read_to_string(format!("{DIR}/shmem_enabled")).ok();
        let pmd = std::fs::read_to_string(format!("{DIR}/hugepages-2048kB/shmem_enabled")).ok();
        decide(global.as_deref(), pmd.as_deref())
    })
}

/// The selected word of a sysfs choice list ("always [never] deny" gives "never").
fn selected(list: &str) -> Option<&str> {
    let start = list.find('[')? + 1;
    let len = list[start..].find(']')?;
    Some(&list[start..start + len])
}

/// The mode from the global setting and the PMD size's own (None where the file is
/// missing: kernels before per-size settings, or no THP at all).
pub fn decide(global: Option<&str>, pmd: Option<&str>) -> SharedHugePages {
    let global = global.and_then(selected);
    let pmd = pmd.and_then(selected).filter(|&s| s != "inherit");
    let (name, value) = match (pmd, global) {
        (Some(p), _) => ("hugepages-2048kB/shmem_enabled", p),
        (None, Some(g)) => ("shmem_enabled", g),
        (None, None) => {
            return SharedHugePages {
                mode: ShmemHuge::Never,
                setting: "no transparent huge pages for shared memory in this kernel".into(),
            }
        }
    };
    let mode = match value {
        "always" | "within_size" | "force" => ShmemHuge::Always,
        "advise" => ShmemHuge::OnAdvice,
        _ => ShmemHuge::Never,
    };
    SharedHugePages {
        mode,
        setting: format!("{name}={value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_selected_word_decides() {
        let g = |s| {
            decide(
                Some(s),
                Some("always inherit within_size advise [inherit] never"),
            )
        };
        assert_eq!(
            g("always within_size advise [never] deny force").mode,
            ShmemHuge::Never
        );
        assert_eq!(
            g("always within_size [advise] never deny force").mode,
            ShmemHuge::OnAdvice
        );
        assert_eq!(
            g("[always] within_size advise never deny force").mode,
            ShmemHuge::Always
        );
        assert_eq!(
            g("always [within_size] advise never deny force").mode,
            ShmemHuge::Always
        );
        assert_eq!(
            g("always within_size advise never [deny] force").mode,
            ShmemHuge::Never
        );
        assert_eq!(
            g("always within_size [advise] never deny force").setting,
            "shmem_enabled=advise"
        );
    }

    #[test]
    fn the_pmd_size_overrides_unless_it_inherits() {
        let s = decide(
            Some("always within_size advise [never] deny force"),
            Some("always inherit within_size [advise] never"),
        );
        assert_eq!(s.mode, ShmemHuge::OnAdvice);
        assert_eq!(s.setting, "hugepages-2048kB/shmem_enabled=advise");
        let s = decide(
            Some("[always] within_size advise never deny force"),
            Some("always inherit within_size advise [never]"),
        );
        assert_eq!(s.mode, ShmemHuge::Never);
    }

    #[test]
    fn missing_files_mean_never() {
        assert_eq!(decide(None, None).mode, ShmemHuge::Never);
        assert_eq!(decide(Some("garbage"), None).mode, ShmemHuge::Never);
        assert_eq!(
            decide(Some("always within_size [advise] never deny force"), None).mode,
            ShmemHuge::OnAdvice
        );
    }
}
