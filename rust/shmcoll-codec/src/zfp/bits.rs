//! The zfp bit stream: bits numbered from the least significant bit of 64-bit words that
//! are stored little-endian, so stream bit `i` is bit `i % 8` of byte `i / 8`. A value
//! written in `k` bits appends its bits 0..k, least significant first.

/// Mask of the `n` low bits (`n` <= 64).
#[inline(always)]
pub(super) fn mask(n: u32) -> u64 {
    if n >= 64 {
        u64::MAX
    } else {
        (1u64 << n) - 1
    }
}

/// Sequential writer of whole 64-bit words into a byte slice sized by the caller.
pub(super) struct BitWriter<'a> {
    out: &'a mut [u8],
    /// Index of the next word to store.
    word: usize,
    /// Bits not yet stored, the first in bit 0.
    acc: u64,
    /// How many bits of `acc` are pending (always < 64 between calls).
    fill: u32,
}

impl<'a> BitWriter<'a> {
    /// A writer at the start of `out`, whose length must be a multiple of 8 covering every
    /// word that will be written.
    pub(super) fn new(out: &'a mut [u8]) -> Self {
        BitWriter {
            out,
            word: 0,
            acc: 0,
            fill: 0,
        }
    }

    #[inline(always)]
    fn store(&mut self, w: u64) {
        let at = self.word * 8;
        self.out[at..at + 8].copy_from_slice(&w.to_le_bytes());
        self.word += 1;
    }

    /// Append the `n` (<= 64) low bits of `v`; the bits of `v` above `n` must be zero.
    #[inline(always)]
    pub(super) fn put(&mut self, v: u64, n: u32) {
        debug_assert!(n <= 64 && (n == 64 || v >> n == 0));
        if n == 0 {
            return;
        }
        self.acc |= v << self.fill;
        let f = self.fill + n;
        if f >= 64 {
            let full = self.acc;
            self.store(full);
            let rem = f - 64;
            // The bits of v that did not fit: its top `rem` bits.
            self.acc = if rem == 0 { 0 } else { v >> (n - rem) };
            self.fill = rem;
        } else {
            self.fill = f;
        }
    }

    /// Append `n` zero bits (zfp's `stream_pad`).
    #[inline(always)]
    pub(super) fn zeros(&mut self, n: u32) {
        let f = self.fill + n;
        if f < 64 {
            self.fill = f;
            return;
        }
        // Complete the pending word, then whole zero words, then keep the remainder.
        let full = self.acc;
        self.store(full);
        let mut rest = f - 64;
        while rest >= 64 {
            self.store(0);
            rest -= 64;
        }
        self.acc = 0;
        self.fill = rest;
    }

    /// Store the partial last word, zero-filled (zfp's `stream_flush`); returns the bytes
    /// written.
    pub(super) fn finish(mut self) -> usize {
        if self.fill > 0 {
            let last = self.acc;
            self.store(last);
        }
        self.word * 8
    }
}

/// Random-access reader of a stream; bits past the end of the slice read as zero.
pub(super) struct BitReader<'a> {
    data: &'a [u8],
    /// Position of the next bit.
    pub(super) pos: usize,
}

impl<'a> BitReader<'a> {
    pub(super) fn new(data: &'a [u8], pos: usize) -> Self {
        BitReader { data, pos }
    }

    /// The next 57 (or more) bits, the next one in bit 0; nothing is consumed.
    #[inline(always)]
    pub(super) fn peek(&self) -> u64 {
        let byte = self.pos >> 3;
        let w = match self.data.get(byte..byte + 8) {
            Some(b) => u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]),
            None => {
                let mut b = [0u8; 8];
                if byte < self.data.len() {
                    let tail = &self.data[byte..];
                    b[..tail.len()].copy_from_slice(tail);
                }
                u64::from_le_bytes(b)
            }
        };
        w >> (self.pos & 7)
    }

    #[inline(always)]
    pub(super) fn skip(&mut self, n: u32) {
        self.pos += n as usize;
    }

    /// Read `n` (<= 57) bits.
    #[inline(always)]
    pub(super) fn read(&mut self, n: u32) -> u64 {
        debug_assert!(n <= 57);
        let v = self.peek() & mask(n);
        self.pos += n as usize;
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writer_then_reader_round_trip() {
        // Widths crossing word boundaries in every phase, values with their top bit set.
        let widths: Vec<u32> = (0..300).map(|i| (i * 7 + 3) % 58).collect();
        let total: u32 = widths.iter().sum::<u32>() + 6 * 40 + 64;
        let words = (total as usize).div_ceil(64);
        let mut buf = vec![0xffu8; words * 8];
        let mut w = BitWriter::new(&mut buf);
        for (i, &n) in widths.iter().enumerate() {
            let v = (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)) & mask(n);
            w.put(v, n);
            if i % 50 == 0 {
                w.zeros(40);
            }
        }
        w.put(u64::MAX, 64);
        let bytes = w.finish();
        assert_eq!(bytes, buf.len());
        let mut r = BitReader::new(&buf, 0);
        for (i, &n) in widths.iter().enumerate() {
            let v = (0x9e37_79b9_7f4a_7c15u64.wrapping_mul(i as u64 + 1)) & mask(n);
            assert_eq!(r.read(n), v, "field {i}");
            if i % 50 == 0 {
                assert_eq!(r.read(40), 0);
            }
        }
        assert_eq!(r.read(32) | (r.read(32) << 32), u64::MAX);
        // The flush pads with zeros, and past the end reads zero.
        while r.pos < buf.len() * 8 {
            assert_eq!(r.read(1), 0);
        }
        assert_eq!(r.read(57), 0);
    }

    #[test]
    fn bit_order_is_lsb_first_little_endian() {
        let mut buf = [0u8; 16];
        let mut w = BitWriter::new(&mut buf);
        w.put(1, 1);
        w.zeros(8);
        w.put(0b101, 3);
        assert_eq!(w.finish(), 8);
        assert_eq!(buf[0], 1);
        assert_eq!(buf[1], 0b1010);
    }
}
