//! Copy orders: in which order a rank visits its peers' blocks.
//!
//! The order decides which memory channels and caches the ranks hit at the same time. With
//! `linear` every rank reads rank 0 first (a hot spot); `shifted` (r+k mod p) and
//! `reverse-shifted` spread the ranks over distinct peers at every step; `xor` pairs ranks
//! (r XOR k), so that two ranks exchange with each other in the same step; `morton` cuts
//! blocks into tiles and visits the (peer, tile) grid along a Z curve, so that consecutive
//! copies alternate between peers while each stays within a few tiles (cache-friendly for
//! large blocks on ranks sharing a cache).

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(u16)]
pub enum Order {
    Linear = 0,
    Shifted = 1,
    ReverseShifted = 2,
    Xor = 3,
    Morton = 4,
}

impl Order {
    pub const ALL: [Order; 5] = [
        Order::Linear,
        Order::Shifted,
        Order::ReverseShifted,
        Order::Xor,
        Order::Morton,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Order::Linear => "linear",
            Order::Shifted => "shifted",
            Order::ReverseShifted => "reverse-shifted",
            Order::Xor => "xor",
            Order::Morton => "morton",
        }
    }

    pub fn parse(s: &str) -> Option<Order> {
        let s = s.trim().to_ascii_lowercase().replace('_', "-");
        match s.as_str() {
            "xor-pairwise" | "pairwise" => Some(Order::Xor),
            "tiled" | "z" => Some(Order::Morton),
            "reverse" | "reverse-shift" => Some(Order::ReverseShifted),
            "shift" => Some(Order::Shifted),
            _ => Order::ALL.into_iter().find(|o| o.name() == s),
        }
    }

    /// Visit every rank `0..p` once (self included), in this order, as seen from `me`.
    #[inline]
    pub fn for_each_peer(self, me: usize, p: usize, mut f: impl FnMut(usize)) {
        match self {
            Order::Linear => (0..p).for_each(f),
            Order::Shifted | Order::Morton => (0..p).for_each(|k| f((me + k) % p)),
            Order::ReverseShifted => (0..p).for_each(|k| f((me + p - k) % p)),
            Order::Xor => {
                // XOR with `me` permutes [0, 2^m); keep the images below p.
                for k in 0..p.next_power_of_two() {
                    let j = me ^ k;
                    if j < p {
                        f(j);
                    }
                }
            }
        }
    }

    pub fn peers(self, me: usize, p: usize) -> Vec<usize> {
        let mut v = Vec::with_capacity(p);
        self.for_each_peer(me, p, |j| v.push(j));
        v
    }

    /// Pieces `(peer, offset, len)` covering each peer's block (`block_len(peer)` bytes):
    /// whole blocks in peer order, or for `morton` tiles of `tile` bytes along a Z curve.
    pub fn pieces(
        self,
        me: usize,
        p: usize,
        tile: usize,
        block_len: impl Fn(usize) -> usize,
    ) -> Vec<(usize, usize, usize)> {
        let peers = self.peers(me, p);
        if self != Order::Morton {
            return peers.into_iter().map(|j| (j, 0, block_len(j))).collect();
        }
        let tile = tile.max(64);
        let tiles: Vec<usize> = peers.iter().map(|&j| block_len(j).div_ceil(tile)).collect();
        let max_tiles = tiles.iter().copied().max().unwrap_or(0);
        let mut out = Vec::with_capacity(tiles.iter().sum());
        let side = p.max(max_tiles).next_power_of_two();
        for code in 0..(side * side) {
            let (k, t) = deinterleave(code);
            if k < p && t < tiles[k] {
                let j = peers[k];
                let off = t * tile;
                out.push((j, off, tile.min(block_len(j) - off)));
            }
        }
        out
    }
}

/// Split a Morton code into its even bits (x) and odd bits (y).
fn deinterleave(code: usize) -> (usize, usize) {
    let (mut x, mut y) = (0usize, 0usize);
    let mut bit = 0;
    let mut c = code;
    while c != 0 {
        x |= (c & 1) << bit;
        y |= ((c >> 1) & 1) << bit;
        c >>= 2;
        bit += 1;
    }
    (x, y)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn every_order_is_a_permutation(p in 1usize..40, me_frac in 0.0f64..1.0) {
            let me = ((p as f64) * me_frac) as usize % p;
            for o in Order::ALL {
                let mut v = o.peers(me, p);
                v.sort();
                prop_assert_eq!(v, (0..p).collect::<Vec<_>>());
            }
        }

        #[test]
        fn pieces_cover_each_block_exactly(p in 1usize..9, me_frac in 0.0f64..1.0,
                                           lens in proptest::collection::vec(0usize..5000, 9), tile in 1usize..700) {
            let me = ((p as f64) * me_frac) as usize % p;
            for o in Order::ALL {
                let mut covered = vec![0usize; p];
                let mut last_end = vec![0usize; p];
                for (j, off, len) in o.pieces(me, p, tile, |j| lens[j]) {
                    prop_assert_eq!(off, last_end[j], "pieces of a block are in order");
                    last_end[j] = off + len;
                    covered[j] += len;
                }
                for j in 0..p { prop_assert_eq!(covered[j], lens[j]); }
            }
        }
    }

    #[test]
    fn shifted_spreads_ranks() {
        // At every step k, the p ranks visit p distinct peers.
        let p = 5;
        for k in 0..p {
            let mut seen: Vec<usize> = (0..p).map(|me| Order::Shifted.peers(me, p)[k]).collect();
            seen.sort();
            assert_eq!(seen, (0..p).collect::<Vec<_>>());
        }
        assert_eq!(Order::Xor.peers(2, 4), vec![2, 3, 0, 1]);
        assert_eq!(Order::ReverseShifted.peers(1, 4), vec![1, 0, 3, 2]);
        assert_eq!(Order::parse("xor-pairwise"), Some(Order::Xor));
    }
}
