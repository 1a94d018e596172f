//! Segments of freed communicators, kept to serve the next communicator of the same
//! processes: creating a segment (shm_open, ftruncate, mmap, backing its staging rings)
//! and the handshake's three rounds cost milliseconds; taking a pooled segment again costs
//! no round at all.
//!
//! The model. A communicator freed without error leaves its segment here (`keep`, from
//! `Comm`'s drop) with what describes it in this process: its heap allocator (blocks of
//! the freed communicator that are still referenced stay reserved), its peers' pidfds, the
//! CMA verdict, and where its call protocol stands (`Continued`: the next sequence
//! number, steps, ring and progress counters). A new communicator starts with one exchange
//! among its ranks (MPI's Allgather, or the parent's Alltoall) of a fixed-size record
//! (`Record`): the rank's pid and node digest, the segment sizes its settings ask for,
//! whether those settings are valid, an opaque token of the embedder's (the Python
//! bindings agree on tuning tables with it), and the segments it offers with a digest of
//! each one's protocol state. `Offer::new` takes the offered entries out of the pool, so
//! that a creation in another thread cannot offer them too. Every rank then settles from
//! the same records by the same rule (`choose`): the first segment in rank 0's order that
//! every rank offers in the same protocol state, whose entry names these pids in this
//! order and whose sizes are the ones rank 0 asks for, serves again; otherwise the caller
//! creates a segment. The entries of one segment are alike on every rank (same pids, same
//! header), so every rank decides alike.
//!
//! The new communicator continues the protocol where the freed one stopped, as if it were
//! the same communicator under a new identity, so no reset and no round is needed: every
//! rank of the exchange has freed the old communicator, so no rank is still inside one of
//! its calls (a root that left a one-sided call early, one_sided.rs, has peers that
//! finished it before they could offer), and every rank's counters are where the others
//! expect them. What the freed communicator still owed (the check of a one-sided call's
//! heads, a notice of a rejection) ends with it, on every rank alike.
//!
//! A rank offers only segments whose peers are alive and healthy and where what it
//! announced of its process (its CPU, its shared-array arena if announced) still holds,
//! since the continuation runs no handshake. A segment one rank does not offer (it still
//! uses that communicator, its free failed, it died, it evicted it) is never chosen: ranks may free in any order, and a failed
//! free costs only that segment. Offers not chosen go back to the pool.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};

use shmcoll_shm::handshake::arena_announcement;
use shmcoll_shm::node::node_id;
use shmcoll_shm::{HeapAlloc, Layout, Peers, Segment, Sizes, FIRST_CALL_SEQ};

use crate::config::{Config, DEFAULT_POOL_SEGMENTS};
use crate::error::{Error, Result};

/// Segment ids one record can offer (and so the most segments a process keeps).
pub const OFFER_IDS: usize = crate::config::MAX_POOL_SEGMENTS;

/// First word of every record: a record of another layout or of garbage does not match.
const TAG: u64 = u64::from_le_bytes(*b"SHMCREC\x01");

/// Words of a record: tag, status, pid, node, inline, staging, heap, heap set, token,
/// count, then the offered ids and their protocol states.
pub const RECORD_WORDS: usize = FIXED_WORDS + 2 * OFFER_IDS;
const FIXED_WORDS: usize = 10;

/// Bytes of a record as exchanged.
pub const RECORD_BYTES: usize = RECORD_WORDS * 8;

/// Where a communicator's call protocol stands on this rank: what the next communicator
/// on the segment continues from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Continued {
    pub next_seq: u64,
    pub steps: u64,
    pub requests: u32,
    pub streamed: u64,
    pub sent: Vec<u64>,
    pub recvd: Vec<u64>,
}

impl Continued {
    /// A new segment's: nothing sent, the first call after the handshake next.
    pub fn start(nranks: usize) -> Continued {
        Continued {
            next_seq: FIRST_CALL_SEQ,
            steps: 0,
            requests: 0,
            streamed: 0,
            sent: vec![0; nranks],
            recvd: vec![0; nranks],
        }
    }

    /// What every rank's must equal (the counters every rank advances alike).
    fn digest(&self) -> u64 {
        fnv1a(
            [self.next_seq, self.steps, u64::from(self.requests)]
                .iter()
                .flat_map(|w| w.to_le_bytes()),
        )
    }
}

/// What a freed communicator leaves for the next one of the same processes.
#[derive(Debug)]
pub struct Pooled {
    pub(crate) seg: Arc<Segment>,
    pub(crate) heap: Arc<Mutex<HeapAlloc>>,
    pub(crate) peers: Arc<Peers>,
    pub(crate) rank: usize,
    pub(crate) cma_ok: bool,
    pub(crate) state: Continued,
}

impl Pooled {
    /// This process's rank on the segment.
    pub fn rank(&self) -> usize {
        self.rank
    }

    fn id(&self) -> u64 {
        segment_id(self.seg.name())
    }

    fn pids(&self) -> Vec<u32> {
        (0..self.seg.layout().sizes.nranks)
            .map(|r| self.peers.pid(r))
            .collect()
    }

    /// Whether the segment can serve again: no peer died or gave up on it since (a peer
    /// that did will never offer it), and what this rank announced there of its process
    /// (`now`: the one CPU it is bound to, its shared-array arena) still holds: a stale CPU
    /// would mislead the peers' waits. An arena not announced yet there (created since) is
    /// announced when a buffer in it is first described (Comm::heap_offset), as on a new
    /// segment.
    fn fits(&self, now: &Announced) -> bool {
        let arena = (
            self.seg.arena_fd_of(self.rank).load(Ordering::Relaxed),
            self.seg.arena_len_of(self.rank).load(Ordering::Relaxed),
        );
        let cpu = self.seg.cpu_of(self.rank).load(Ordering::Relaxed);
        let arena_holds = arena.0 == 0 || arena == now.arena;
        cpu == now.cpu && arena_holds && self.peers.check(&self.seg, "pool").is_ok()
    }
}

/// What a rank announces of its process in its Info line, as it stands now.
#[derive(Debug, PartialEq, Eq)]
struct Announced {
    arena: (u32, u64),
    /// 1 + the one CPU the process may run on, 0 when several (as `Comm::join` writes it).
    cpu: u32,
}

impl Announced {
    fn now() -> Announced {
        Announced {
            arena: arena_announcement(),
            cpu: shmcoll_shm::placement::only_cpu().map_or(0, |c| c as u32 + 1),
        }
    }
}

/// FNV-1a: a digest that is the same in every process (std's hashers are not promised to
/// be).
fn fnv1a(bytes: impl IntoIterator<Item = u8>) -> u64 {
    bytes.into_iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    })
}

/// A segment's id in records: the digest of its name (128 random bits).
fn segment_id(name: &str) -> u64 {
    fnv1a(name.bytes())
}

/// The process's pooled segments, least recently kept first.
struct Pool {
    /// The process the entries belong to: a forked child inherits its parent's pool,
    /// whose segments are its parent's communicators'.
    owner: u32,
    entries: Vec<Pooled>,
}

static POOL: Mutex<Pool> = Mutex::new(Pool {
    owner: 0,
    entries: Vec::new(),
});

fn with_pool<T>(f: impl FnOnce(&mut Vec<Pooled>) -> T) -> T {
    let mut pool = POOL.lock().unwrap_or_else(|e| e.into_inner());
    let me = std::process::id();
    if pool.owner != me {
        pool.entries.clear();
        pool.owner = me;
    }
    f(&mut pool.entries)
}

/// Keep `p` for a later communicator; beyond `capacity` entries the least recently kept
/// go (unmapped here; their pages go once no process maps them).
pub(crate) fn keep(p: Pooled, capacity: usize) {
    let evicted: Vec<Pooled> = with_pool(|entries| {
        entries.push(p);
        let over = entries.len().saturating_sub(capacity);
        entries.drain(..over).collect()
    });
    drop(evicted);
}

/// Segments this process keeps now (for tests).
pub fn pooled_count() -> usize {
    with_pool(|entries| entries.len())
}

/// Take out the entries for `nranks` ranks that fit, most recently kept first, at most
/// OFFER_IDS; drop the others.
fn take_for(nranks: usize) -> Vec<Pooled> {
    let taken: Vec<Pooled> = with_pool(|entries| {
        let mut taken = Vec::new();
        let mut i = entries.len();
        while i > 0 && taken.len() < OFFER_IDS {
            i -= 1;
            if entries[i].seg.layout().sizes.nranks == nranks {
                taken.push(entries.remove(i));
            }
        }
        taken
    });
    let now = Announced::now();
    taken.into_iter().filter(|p| p.fits(&now)).collect()
}

/// One rank's record, decoded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    /// Whether the rank's settings are valid.
    pub settings_ok: bool,
    pub pid: u32,
    pub node: u64,
    pub inline_bytes: u64,
    pub staging_bytes: u64,
    pub heap_bytes: u64,
    pub heap_explicit: bool,
    /// The embedder's token (0: none), compared by `tokens_agree`.
    pub token: u64,
    /// (segment id, digest of its protocol state) of every segment offered.
    pub offers: Vec<(u64, u64)>,
}

impl Record {
    pub fn encode(&self) -> [u64; RECORD_WORDS] {
        let mut w = [0u64; RECORD_WORDS];
        let offers = &self.offers[..self.offers.len().min(OFFER_IDS)];
        w[..FIXED_WORDS].copy_from_slice(&[
            TAG,
            u64::from(!self.settings_ok),
            u64::from(self.pid),
            self.node,
            self.inline_bytes,
            self.staging_bytes,
            self.heap_bytes,
            u64::from(self.heap_explicit),
            self.token,
            offers.len() as u64,
        ]);
        for (i, &(id, state)) in offers.iter().enumerate() {
            w[FIXED_WORDS + i] = id;
            w[FIXED_WORDS + OFFER_IDS + i] = state;
        }
        w
    }

    /// The record in `w`, or why it is not one (another layout, a field out of range).
    pub fn decode(w: &[u64]) -> std::result::Result<Record, String> {
        if w.len() != RECORD_WORDS || w[0] != TAG {
            return Err("it is not a creation record of this shmcoll version".into());
        }
        let flag = |v: u64, what: &str| match v {
            0 => Ok(false),
            1 => Ok(true),
            _ => Err(format!("its {what} flag is {v}")),
        };
        let count = usize::try_from(w[9])
            .ok()
            .filter(|&c| c <= OFFER_IDS)
            .ok_or_else(|| format!("it offers {} segments (at most {OFFER_IDS})", w[9]))?;
        Ok(Record {
            settings_ok: !flag(w[1], "status")?,
            pid: u32::try_from(w[2]).map_err(|_| format!("its pid {} is not a pid", w[2]))?,
            node: w[3],
            inline_bytes: w[4],
            staging_bytes: w[5],
            heap_bytes: w[6],
            heap_explicit: flag(w[7], "heap")?,
            token: w[8],
            offers: (0..count)
                .map(|i| (w[FIXED_WORDS + i], w[FIXED_WORDS + OFFER_IDS + i]))
                .collect(),
        })
    }

    fn offers(&self, id: u64) -> Option<u64> {
        self.offers.iter().find(|o| o.0 == id).map(|o| o.1)
    }

    /// The sizes of a segment rank 0 would create for `nranks` ranks (None: they do not
    /// fit; such a creation fails anyway).
    fn sizes(&self, nranks: usize) -> Option<Sizes> {
        let field = |v: u64| usize::try_from(v).ok();
        Layout::new(Sizes {
            nranks,
            inline_bytes: field(self.inline_bytes)?,
            staging_bytes: field(self.staging_bytes)?,
            heap_bytes: field(self.heap_bytes)?,
        })
        .map(|l| l.sizes)
    }
}

/// Whether a pooled segment of `have` sizes serves a communicator whose rank 0 asks for
/// `want`: the same inline and staging areas, and the same heap when it was set; the
/// default heap follows the free space of /dev/shm, which drifts, so any pooled heap of at
/// least half the asked size serves (the heap is sparse until used).
pub fn sizes_match(have: &Sizes, want: &Sizes, heap_explicit: bool) -> bool {
    have.nranks == want.nranks
        && have.inline_bytes == want.inline_bytes
        && have.staging_bytes == want.staging_bytes
        && (have.heap_bytes == want.heap_bytes
            || (!heap_explicit && have.heap_bytes >= want.heap_bytes / 2))
}

/// What a rank offers for the segment it would take again: its id, the pids its entry
/// names (in rank order) and its sizes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    pub id: u64,
    pub pids: Vec<u32>,
    pub sizes: Sizes,
}

/// The rule every rank applies to the same records: the index in `mine` of the segment
/// that serves again, or None. The first id in rank 0's order that every record offers in
/// the same protocol state, whose entry here names the records' pids in order and has
/// rank 0's sizes.
pub fn choose(records: &[Record], mine: &[Candidate]) -> Option<usize> {
    let leader = records.first()?;
    let want = leader.sizes(records.len())?;
    let pids: Vec<u32> = records.iter().map(|r| r.pid).collect();
    leader
        .offers
        .iter()
        .filter(|&&(id, state)| records.iter().all(|r| r.offers(id) == Some(state)))
        .find_map(|&(id, _)| {
            mine.iter().position(|c| {
                c.id == id && c.pids == pids && sizes_match(&c.sizes, &want, leader.heap_explicit)
            })
        })
}

/// Whether every rank sent the same nonzero token and asks for the same inline and staging
/// areas as rank 0 (then a binding the token names fits the segment on every rank).
pub fn tokens_agree(records: &[Record]) -> bool {
    let Some(leader) = records.first() else {
        return false;
    };
    let want = leader.sizes(records.len());
    leader.token != 0
        && want.is_some()
        && records.iter().all(|r| {
            let s = r.sizes(records.len());
            r.token == leader.token
                && s.map(|s| (s.inline_bytes, s.staging_bytes))
                    == want.map(|w| (w.inline_bytes, w.staging_bytes))
        })
}

/// This rank's part of a communicator's creation: its settings, the segments it offers,
/// its record. Dropping it gives back what was not chosen.
#[derive(Debug)]
pub struct Offer {
    nranks: usize,
    cfg: Option<Result<Config>>,
    offered: Vec<Pooled>,
    record: Record,
    capacity: usize,
}

/// What the ranks settled on.
#[derive(Debug)]
pub struct Settled {
    /// Every rank has this node's digest (shmcoll_shm::node): they can share a segment.
    pub one_node: bool,
    /// The pooled segment that serves again (then `Comm::resume` it), or None (create one).
    pub reuse: Option<Pooled>,
    /// Every rank sent the same token (`tokens_agree`).
    pub tokens_agree: bool,
    /// This rank's settings.
    pub cfg: Config,
}

impl Offer {
    /// The offer of this process for a new communicator of `nranks` ranks, with the
    /// settings of the environment. Never fails: a setting that is not valid travels in
    /// the record, and `settle` raises it on every rank.
    pub fn new(nranks: usize) -> Offer {
        Offer::with_config(nranks, Config::from_env(nranks.max(1)))
    }

    /// As `new`, with settings the embedder derived (the PMPI library's own heap default).
    pub fn with_config(nranks: usize, cfg: Result<Config>) -> Offer {
        let (offered, capacity) = match &cfg {
            Ok(c) if c.pool_segments > 0 => (take_for(nranks), c.pool_segments),
            Ok(c) => (Vec::new(), c.pool_segments),
            Err(_) => (Vec::new(), DEFAULT_POOL_SEGMENTS),
        };
        let record = Record {
            token: 0,
            settings_ok: cfg.is_ok(),
            pid: std::process::id(),
            node: node_id(),
            inline_bytes: cfg.as_ref().map_or(0, |c| c.inline_bytes as u64),
            staging_bytes: cfg.as_ref().map_or(0, |c| c.staging_bytes as u64),
            heap_bytes: cfg.as_ref().map_or(0, |c| c.heap_bytes as u64),
            heap_explicit: cfg.as_ref().is_ok_and(|c| c.heap_explicit),
            offers: offered.iter().map(|p| (p.id(), p.state.digest())).collect(),
        };
        Offer {
            nranks,
            cfg: Some(cfg),
            offered,
            record,
            capacity,
        }
    }

    /// The inline and staging bytes a segment made for these settings has (None: the
    /// settings are not valid, or give no layout).
    pub fn areas(&self) -> Option<(usize, usize)> {
        self.record
            .sizes(self.nranks)
            .map(|s| (s.inline_bytes, s.staging_bytes))
    }

    /// Set the token the record carries (`Settled::tokens_agree` compares them).
    pub fn set_token(&mut self, token: u64) {
        self.record.token = token;
    }

    /// The record to send to every rank of the new communicator, as bytes.
    pub fn record_bytes(&self) -> Vec<u8> {
        self.record
            .encode()
            .iter()
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// Settle from every rank's record (`records`: RECORD_BYTES per rank, in the new
    /// communicator's rank order; this rank is `me`). The same records give the same
    /// outcome on every rank, errors included: this rank raises its own invalid setting,
    /// the others say which rank had one.
    pub fn settle(mut self, records: &[u8], me: usize) -> Result<Settled> {
        let n = records.len() / RECORD_BYTES;
        if n == 0 || !records.len().is_multiple_of(RECORD_BYTES) || me >= n {
            return Err(Error::InvalidArgument(format!(
                "{} bytes of creation records for rank {me} (expected {RECORD_BYTES} per rank)",
                records.len()
            )));
        }
        let decoded: Vec<Record> = records
            .chunks_exact(RECORD_BYTES)
            .enumerate()
            .map(|(j, chunk)| {
                let words: Vec<u64> = chunk
                    .chunks_exact(8)
                    .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")))
                    .collect();
                Record::decode(&words).map_err(|why| {
                    Error::Mismatch(format!(
                        "rank {j}'s part of the communicator's creation is garbled: {why} (mixed shmcoll versions in one job?)"
                    ))
                })
            })
            .collect::<Result<_>>()?;
        if decoded[me] != self.record {
            return Err(Error::InvalidArgument(format!(
                "the creation records place this process at another rank than {me}"
            )));
        }
        let cfg = self.cfg.take().expect("settled once")?;
        if let Some(j) = decoded.iter().position(|r| !r.settings_ok) {
            return Err(Error::InvalidArgument(format!(
                "rank {j} could not create the communicator: its shmcoll settings are not valid (its own error names the variable)"
            )));
        }
        let one_node = decoded.iter().all(|r| r.node == decoded[0].node);
        let mine: Vec<Candidate> = self
            .offered
            .iter()
            .map(|p| Candidate {
                id: p.id(),
                pids: p.pids(),
                sizes: p.seg.layout().sizes,
            })
            .collect();
        let reuse = one_node
            .then(|| choose(&decoded, &mine))
            .flatten()
            .map(|i| self.offered.swap_remove(i));
        Ok(Settled {
            one_node,
            reuse,
            tokens_agree: tokens_agree(&decoded),
            cfg,
        })
    }
}

impl Drop for Offer {
    fn drop(&mut self) {
        for p in self.offered.drain(..) {
            keep(p, self.capacity);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sizes(nranks: usize, heap: usize) -> Sizes {
        Layout::new(Sizes {
            nranks,
            inline_bytes: 64 << 10,
            staging_bytes: 4 << 20,
            heap_bytes: heap,
        })
        .unwrap()
        .sizes
    }

    fn record(pid: u32, ids: &[u64]) -> Record {
        Record {
            settings_ok: true,
            pid,
            node: 7,
            inline_bytes: 64 << 10,
            staging_bytes: 4 << 20,
            heap_bytes: 1 << 30,
            heap_explicit: false,
            token: 0,
            offers: ids.iter().map(|&id| (id, 1)).collect(),
        }
    }

    fn cand(id: u64, pids: &[u32], heap: usize) -> Candidate {
        Candidate {
            id,
            pids: pids.to_vec(),
            sizes: sizes(pids.len(), heap),
        }
    }

    #[test]
    fn records_round_trip_and_garbage_is_refused() {
        let r = record(42, &[1, 2, 3]);
        assert_eq!(Record::decode(&r.encode()), Ok(r.clone()));
        let mut w = r.encode();
        w[0] ^= 1;
        assert!(Record::decode(&w).is_err());
        let mut w = r.encode();
        w[9] = OFFER_IDS as u64 + 1;
        assert!(Record::decode(&w).unwrap_err().contains("offers"));
        let mut w = r.encode();
        w[1] = 2;
        assert!(Record::decode(&w).unwrap_err().contains("status"));
        let mut w = r.encode();
        w[2] = u64::MAX;
        assert!(Record::decode(&w).unwrap_err().contains("pid"));
        assert!(Record::decode(&w[..5]).is_err());
    }

    #[test]
    fn the_first_segment_every_rank_offers_serves_in_rank_0s_order() {
        let recs = [record(10, &[5, 6, 9]), record(11, &[9, 6])];
        let mine = [cand(9, &[10, 11], 1 << 30), cand(6, &[10, 11], 1 << 30)];
        assert_eq!(choose(&recs, &mine), Some(1));
    }

    #[test]
    fn a_segment_offered_in_another_protocol_state_never_serves() {
        let mut behind = record(11, &[5]);
        behind.offers[0].1 = 2;
        let recs = [record(10, &[5]), behind];
        assert_eq!(choose(&recs, &[cand(5, &[10, 11], 1 << 30)]), None);
    }

    #[test]
    fn tokens_agree_when_every_rank_sends_the_same_one_and_asks_the_same_areas() {
        let with = |pid, token| Record {
            token,
            ..record(pid, &[])
        };
        assert!(tokens_agree(&[with(10, 3), with(11, 3)]));
        assert!(!tokens_agree(&[with(10, 3), with(11, 4)]));
        assert!(!tokens_agree(&[with(10, 0), with(11, 0)]));
        let mut other = with(11, 3);
        other.staging_bytes = 8 << 20;
        assert!(!tokens_agree(&[with(10, 3), other]));
        // Rounded alike: the same areas.
        let mut rounded = with(11, 3);
        rounded.inline_bytes -= 1;
        assert!(tokens_agree(&[with(10, 3), rounded]));
        assert!(!tokens_agree(&[]));
    }

    #[test]
    fn a_segment_one_rank_does_not_offer_never_serves() {
        let recs = [record(10, &[5]), record(11, &[])];
        assert_eq!(choose(&recs, &[cand(5, &[10, 11], 1 << 30)]), None);
    }

    #[test]
    fn other_ranks_or_another_order_do_not_match() {
        let recs = [record(10, &[5]), record(11, &[5])];
        assert_eq!(choose(&recs, &[cand(5, &[11, 10], 1 << 30)]), None);
        assert_eq!(choose(&recs, &[cand(5, &[10, 12], 1 << 30)]), None);
        let three = [record(10, &[5]), record(11, &[5]), record(12, &[5])];
        assert_eq!(choose(&three, &[cand(5, &[10, 11], 1 << 30)]), None);
    }

    #[test]
    fn sizes_must_be_rank_0s() {
        let mut leader = record(10, &[5]);
        leader.inline_bytes = 128 << 10;
        let recs = [leader, record(11, &[5])];
        assert_eq!(choose(&recs, &[cand(5, &[10, 11], 1 << 30)]), None);
        // The default heap drifts with /dev/shm's free space: half of it or more serves.
        let recs = [record(10, &[5]), record(11, &[5])];
        assert_eq!(choose(&recs, &[cand(5, &[10, 11], 600 << 20)]), Some(0));
        assert_eq!(choose(&recs, &[cand(5, &[10, 11], 400 << 20)]), None);
        // A heap set in the environment is exactly that heap.
        let mut leader = record(10, &[5]);
        leader.heap_explicit = true;
        let recs = [leader, record(11, &[5])];
        assert_eq!(choose(&recs, &[cand(5, &[10, 11], 600 << 20)]), None);
        assert_eq!(choose(&recs, &[cand(5, &[10, 11], 1 << 30)]), Some(0));
    }

    #[test]
    fn sizes_that_fit_no_layout_choose_nothing() {
        let mut leader = record(10, &[5]);
        leader.staging_bytes = u64::MAX;
        assert_eq!(choose(&[leader], &[cand(5, &[10], 1 << 30)]), None);
    }

    #[test]
    fn ids_are_the_same_in_every_process_and_differ_by_name() {
        assert_eq!(segment_id("/shmcoll-1-2-ab"), segment_id("/shmcoll-1-2-ab"));
        assert_ne!(segment_id("/shmcoll-1-2-ab"), segment_id("/shmcoll-1-2-ac"));
        assert_eq!(segment_id(""), 0xcbf2_9ce4_8422_2325);
    }

    fn bytes(records: &[Record]) -> Vec<u8> {
        records
            .iter()
            .flat_map(|r| r.encode())
            .flat_map(|w| w.to_le_bytes())
            .collect()
    }

    /// Settle a fresh offer among the records `peers` makes of its own (the offer's
    /// record may hold ids another test pooled meanwhile, so each settle makes its own).
    fn settle_with(me: usize, peers: impl Fn(&Record) -> Vec<Record>) -> Result<Settled> {
        let offer = Offer::new(2);
        let all = peers(&offer.record);
        offer.settle(&bytes(&all), me)
    }

    fn other(own: &Record) -> Record {
        Record {
            pid: own.pid + 1,
            offers: Vec::new(),
            ..own.clone()
        }
    }

    #[test]
    fn settling_checks_every_record_and_the_own_place() {
        let e = settle_with(0, |own| vec![other(own), own.clone()]).unwrap_err();
        assert!(e.to_string().contains("another rank"), "{e}");
        let e = Offer::new(2).settle(&[0u8; 8], 0).unwrap_err();
        assert!(matches!(e, Error::InvalidArgument(_)), "{e}");
        let offer = Offer::new(2);
        let mut garbled = bytes(&[offer.record.clone(), other(&offer.record)]);
        garbled[RECORD_BYTES] ^= 0xff;
        let e = offer.settle(&garbled, 0).unwrap_err();
        assert!(
            matches!(e, Error::Mismatch(_)) && e.to_string().contains("rank 1"),
            "{e}"
        );
        // A peer whose settings are not valid fails every rank.
        let e = settle_with(0, |own| {
            let sick = Record {
                settings_ok: false,
                ..other(own)
            };
            vec![own.clone(), sick]
        })
        .unwrap_err();
        assert!(e.to_string().contains("rank 1 could not create"), "{e}");
        // Records from another node: not one node, nothing reused.
        let s = settle_with(1, |own| {
            let far = Record {
                node: own.node ^ 1,
                ..other(own)
            };
            vec![far, own.clone()]
        })
        .unwrap();
        assert!(!s.one_node && s.reuse.is_none());
        // Healthy records on one node settle; no pooled segment names these pids.
        let s = settle_with(0, |own| vec![own.clone(), other(own)]).unwrap();
        assert!(s.one_node && s.reuse.is_none());
    }
}
