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
        // The pieces that exist, sorted by their Morton code (peer index k in the even
        // bits, tile t in the odd ones): the order of walking the codes of a square of
        // side max(p, tiles) rounded up to a power of two, without visiting the
        // (side^2 - pieces) codes that name no piece (quadratic in the tiles: a 1 MiB
        // block in 64-byte tiles is 16,384 tiles, 2^28 codes).
        let mut keyed: Vec<(u128, usize, usize)> = Vec::with_capacity(tiles.iter().sum());
        for (k, &n) in tiles.iter().enumerate() {
            keyed.extend((0..n).map(|t| (interleave(k, t), k, t)));
        }
        keyed.sort_unstable_by_key(|&(code, _, _)| code);
        keyed
            .into_iter()
            .map(|(_, k, t)| {
                let j = peers[k];
                let off = t * tile;
                (j, off, tile.min(block_len(j) - off))
            })
            .collect()
    }
}

/// The Morton code of (x, y): x's bits in the even positions, y's in the odd ones.
fn interleave(x: usize, y: usize) -> u128 {
    // Bit i of a 32-bit value to bit 2i, by five shift-and-mask steps.
    fn spread32(v: u32) -> u64 {
        let mut x = u64::from(v);
        x = (x | x << 16) & 0x0000_ffff_0000_ffff;
        x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
        x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
        x = (x | x << 2) & 0x3333_3333_3333_3333;
        (x | x << 1) & 0x5555_5555_5555_5555
    }
    let spread = |v: usize| {
        let v = v as u64;
        u128::from(spread32(v as u32)) | u128::from(spread32((v >> 32) as u32)) << 64
    };
    spread(x) | (spread(y) << 1)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Z order as walking every code of the square (the former implementation,
    /// quadratic in the tiles): the oracle of the sorted one.
    fn morton_by_walking(
        me: usize,
        p: usize,
        tile: usize,
        lens: &[usize],
    ) -> Vec<(usize, usize, usize)> {
        let peers = Order::Morton.peers(me, p);
        let tile = tile.max(64);
        let tiles: Vec<usize> = peers.iter().map(|&j| lens[j].div_ceil(tile)).collect();
        let side = p
            .max(tiles.iter().copied().max().unwrap_or(0))
            .next_power_of_two();
        let mut out = Vec::new();
        for code in 0..side * side {
            let (mut k, mut t) = (0, 0);
            for bit in 0..usize::BITS / 2 {
                k |= ((code >> (2 * bit)) & 1) << bit;
                t |= ((code >> (2 * bit + 1)) & 1) << bit;
            }
            if k < p && t < tiles[k] {
                let j = peers[k];
                out.push((j, t * tile, tile.min(lens[j] - t * tile)));
            }
        }
        out
    }

    proptest! {
        #[test]
        fn morton_pieces_follow_the_z_curve(
            lens in proptest::collection::vec(0usize..5000, 1..9),
            me_frac in 0.0f64..1.0,
            tile in 0usize..700,
        ) {
            let p = lens.len();
            let me = ((p as f64) * me_frac) as usize % p;
            let got = Order::Morton.pieces(me, p, tile, |j| lens[j]);
            prop_assert_eq!(got, morton_by_walking(me, p, tile, &lens));
        }
    }

    #[test]
    fn morton_pieces_of_many_small_tiles_are_not_quadratic() {
        // 2 peers x 16 MiB in 64-byte tiles: 524,288 pieces (2^38 codes to walk before).
        let t0 = std::time::Instant::now();
        let got = Order::Morton.pieces(0, 2, 64, |_| 16 << 20);
        assert_eq!(got.len(), 2 * (16 << 20) / 64);
        assert!(
            t0.elapsed() < std::time::Duration::from_secs(5),
            "{:?}",
            t0.elapsed()
        );
    }

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
