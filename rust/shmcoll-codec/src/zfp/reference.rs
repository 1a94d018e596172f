//! Test-only, deliberately naive transliteration of zfp's fixed-rate block coder: one bit
//! at a time, the loops of `encode_few_ints` / `decode_few_ints` as written, so that the
//! table-driven coder in `planes` can be checked against it on arbitrary inputs.

use super::scalar::Real;

/// A growable bit stream, bit `i` at bit `i % 64` of word `i / 64`.
#[derive(Default, Debug)]
pub(super) struct Bits {
    pub(super) words: Vec<u64>,
    pub(super) len: usize,
}

impl Bits {
    fn write_bit(&mut self, b: bool) {
        if self.len.is_multiple_of(64) {
            self.words.push(0);
        }
        if b {
            self.words[self.len / 64] |= 1 << (self.len % 64);
        }
        self.len += 1;
    }

    fn write_bits(&mut self, v: u64, n: u32) {
        for i in 0..n {
            self.write_bit(v.checked_shr(i).unwrap_or(0) & 1 == 1);
        }
    }

    pub(super) fn to_bytes(&self) -> Vec<u8> {
        self.words.iter().flat_map(|w| w.to_le_bytes()).collect()
    }
}

pub(super) struct Reader<'a> {
    pub(super) bytes: &'a [u8],
    pub(super) pos: usize,
}

impl Reader<'_> {
    fn read_bit(&mut self) -> bool {
        let b = self.bytes.get(self.pos / 8).copied().unwrap_or(0);
        self.pos += 1;
        (b >> ((self.pos - 1) % 8)) & 1 == 1
    }

    fn read_bits(&mut self, n: u32) -> u64 {
        (0..n).fold(0, |v, i| v | ((self.read_bit() as u64) << i))
    }
}

/// zfp's `encode_few_ints` for 4 coefficients under `maxbits`, then the pad to `maxbits`.
pub(super) fn encode_ints(s: &mut Bits, u: &[u64; 4], prec: u32, maxbits: u32) {
    let mut bits = maxbits;
    let mut n = 0u32;
    let mut k = prec;
    while bits > 0 && k > 0 {
        k -= 1;
        let mut x = 0u64;
        for (i, c) in u.iter().enumerate() {
            x += ((c >> k) & 1) << i;
        }
        let m = n.min(bits);
        bits -= m;
        s.write_bits(x & ((1 << m) - 1), m);
        x >>= m;
        while n < 4 && bits > 0 {
            bits -= 1;
            let any = x != 0;
            s.write_bit(any);
            if !any {
                break;
            }
            while n < 3 && bits > 0 {
                bits -= 1;
                let b = x & 1 == 1;
                s.write_bit(b);
                if b {
                    break;
                }
                x >>= 1;
                n += 1;
            }
            x >>= 1;
            n += 1;
        }
    }
    for _ in 0..bits {
        s.write_bit(false);
    }
}

/// zfp's `decode_few_ints`; the reader ends after what was read (not padded).
pub(super) fn decode_ints(r: &mut Reader<'_>, prec: u32, kmin: u32, maxbits: u32) -> [u64; 4] {
    let mut u = [0u64; 4];
    let mut bits = maxbits;
    let mut n = 0u32;
    let mut k = prec;
    while bits > 0 && k > kmin {
        k -= 1;
        let m = n.min(bits);
        bits -= m;
        let mut x = r.read_bits(m);
        while n < 4 && bits > 0 {
            bits -= 1;
            if !r.read_bit() {
                break;
            }
            while n < 3 && bits > 0 {
                bits -= 1;
                if r.read_bit() {
                    break;
                }
                n += 1;
            }
            x += 1 << n;
            n += 1;
        }
        let mut i = 0;
        while x != 0 {
            u[i] += (x & 1) << k;
            x >>= 1;
            i += 1;
        }
    }
    u
}

/// zfp's `encode_many_ints` (its coder of 4-D blocks, which writes what
/// `encode_few_ints` writes) for any number of coefficients, then the pad to `maxbits`.
pub(super) fn encode_many_ints(s: &mut Bits, data: &[u64], prec: u32, maxbits: u32) {
    let size = data.len() as u32;
    let mut bits = maxbits;
    let mut n = 0u32;
    let mut k = prec;
    while bits > 0 && k > 0 {
        k -= 1;
        let m = n.min(bits);
        bits -= m;
        for d in &data[..m as usize] {
            s.write_bit((d >> k) & 1 == 1);
        }
        let mut c: u32 = data[m as usize..]
            .iter()
            .map(|d| ((d >> k) & 1) as u32)
            .sum();
        while bits > 0 && n < size {
            bits -= 1;
            s.write_bit(c > 0);
            if c == 0 {
                break;
            }
            c -= 1;
            while bits > 0 && n < size - 1 {
                bits -= 1;
                let b = (data[n as usize] >> k) & 1 == 1;
                s.write_bit(b);
                if b {
                    break;
                }
                n += 1;
            }
            n += 1;
        }
    }
    for _ in 0..bits {
        s.write_bit(false);
    }
}

/// zfp's `decode_many_ints` for any number of coefficients.
pub(super) fn decode_many_ints(
    r: &mut Reader<'_>,
    data: &mut [u64],
    prec: u32,
    kmin: u32,
    maxbits: u32,
) {
    let size = data.len() as u32;
    data.fill(0);
    let mut bits = maxbits;
    let mut n = 0u32;
    let mut k = prec;
    while bits > 0 && k > kmin {
        k -= 1;
        let m = n.min(bits);
        bits -= m;
        for d in data[..m as usize].iter_mut() {
            if r.read_bit() {
                *d += 1 << k;
            }
        }
        while bits > 0 && n < size {
            bits -= 1;
            if !r.read_bit() {
                break;
            }
            while bits > 0 && n < size - 1 {
                bits -= 1;
                if r.read_bit() {
                    break;
                }
                n += 1;
            }
            data[n as usize] += 1 << k;
            n += 1;
        }
    }
}

/// A whole fixed-rate stream, block by block (padding of partial blocks included).
pub(super) fn encode<F: Real>(src: &[F], rate: u32) -> Vec<u8> {
    let maxbits = 4 * rate;
    let mut s = Bits::default();
    for chunk in src.chunks(4) {
        let mut b = [F::default(); 4];
        b[..chunk.len()].copy_from_slice(chunk);
        match chunk.len() {
            1 => b = [b[0]; 4],
            2 => b = [b[0], b[1], b[1], b[0]],
            3 => b[3] = b[0],
            _ => {}
        }
        match F::forward(&b) {
            None => s.write_bits(0, maxbits),
            Some((e, u)) => {
                s.write_bit(true);
                s.write_bits(e as u64, F::EBITS);
                encode_ints(&mut s, &u, F::PREC, maxbits - 1 - F::EBITS);
            }
        }
    }
    s.to_bytes()
}

pub(super) fn decode<F: Real>(stream: &[u8], rate: u32, n: usize) -> Vec<F> {
    let maxbits = 4 * rate as usize;
    let mut out = Vec::with_capacity(n);
    for b in 0..n.div_ceil(4) {
        let mut r = Reader {
            bytes: stream,
            pos: b * maxbits,
        };
        let vals = if r.read_bit() {
            let e = r.read_bits(F::EBITS) as u32;
            let u = decode_ints(
                &mut r,
                F::PREC,
                F::kmin(e, 1),
                maxbits as u32 - 1 - F::EBITS,
            );
            F::inverse(e, &u)
        } else {
            [F::default(); 4]
        };
        let take = (n - 4 * b).min(4);
        out.extend_from_slice(&vals[..take]);
    }
    out
}
