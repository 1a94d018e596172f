//! Which processes can share a segment: those that see the same kernel (boot id, host
//! name) and the same /dev/shm (its device and inode). A digest of those facts, read once
//! per process, lets the ranks of a new communicator learn whether they share a node from
//! the one exchange that creates it (shmcoll-coll's pool.rs), without a collective of
//! their own.

use std::hash::{Hash, Hasher};
use std::sync::OnceLock;

/// This process's node digest: equal for processes that can map each other's segments.
/// std's SipHash with fixed keys, so the same in every process of one build; processes of
/// different builds get different digests, which callers take as "maybe not one node" and
/// check the slow way.
pub fn node_id() -> u64 {
    static ID: OnceLock<u64> = OnceLock::new();
    *ID.get_or_init(|| {
        let mut h = std::collections::hash_map::DefaultHasher::new();
        for fact in [
            "/proc/sys/kernel/random/boot_id",
            "/proc/sys/kernel/hostname",
        ] {
            std::fs::read_to_string(fact)
                .unwrap_or_default()
                .trim()
                .hash(&mut h);
        }
        match rustix::fs::stat("/dev/shm") {
            Ok(st) => (st.st_dev, st.st_ino).hash(&mut h),
            Err(_) => 0u64.hash(&mut h),
        }
        h.finish()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_digest_is_stable_and_shared_with_children() {
        let id = node_id();
        assert_eq!(node_id(), id);
        // A thread reads the same facts (the cache is process-wide).
        assert_eq!(std::thread::spawn(node_id).join().unwrap(), id);
    }
}
