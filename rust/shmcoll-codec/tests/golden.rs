//! The Rust codecs reproduce the golden streams in tests/golden/{bq,cast,mpc} (written by
//! tests/golden/make_codec_golden.py, which checks them against independent NumPy
//! computations of each spec), and decode them as the spec says.

use std::path::PathBuf;

use shmcoll_codec::{bq::Bq, cast, mpc};

fn root(codec: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/golden")
        .join(codec)
}

/// (name, fields, input bytes, stream bytes) of one case.
type Case = (String, Vec<String>, Vec<u8>, Vec<u8>);

/// Every case of a codec.
fn cases(codec: &str) -> Vec<Case> {
    let dir = root(codec);
    let manifest = std::fs::read_to_string(dir.join("manifest.txt")).expect("manifest");
    let out: Vec<_> = manifest
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .map(|l| {
            let mut f = l.split_whitespace().map(String::from);
            let name = f.next().expect("a name");
            let input = std::fs::read(dir.join(format!("{name}.input"))).expect("input");
            let stream = std::fs::read(dir.join(format!("{name}.stream"))).expect("stream");
            (name, f.collect(), input, stream)
        })
        .collect();
    assert!(out.len() >= 5, "too few {codec} cases");
    out
}

fn f32s(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

fn f64s(b: &[u8]) -> Vec<f64> {
    b.chunks_exact(8)
        .map(|c| f64::from_le_bytes(c.try_into().unwrap()))
        .collect()
}

#[test]
fn bq_golden() {
    for (name, f, input, stream) in cases("bq") {
        let (bits, block, n): (u32, usize, usize) = (
            f[0].parse().unwrap(),
            f[1].parse().unwrap(),
            f[2].parse().unwrap(),
        );
        let q = Bq::new(bits, block).unwrap();
        let x = f32s(&input);
        assert_eq!(x.len(), n);
        let mut s = vec![0u8; q.compressed_size(n)];
        q.encode(&x, &mut s).unwrap();
        assert_eq!(s, stream, "{name}");
        let mut y = vec![0f32; n];
        q.decode(&stream, &mut y).unwrap();
        let nb = n.div_ceil(block);
        for (i, &v) in y.iter().enumerate() {
            let scale = f32::from_le_bytes(stream[4 * (i / block)..][..4].try_into().unwrap());
            let code = if bits == 8 {
                f32::from(stream[4 * nb + i] as i8)
            } else {
                let b = stream[4 * nb + i / 2];
                f32::from(
                    ((if i.is_multiple_of(2) {
                        b << 4
                    } else {
                        b & 0xf0
                    }) as i8)
                        >> 4,
                )
            };
            assert_eq!(v.to_bits(), (code * scale).to_bits(), "{name} element {i}");
        }
    }
}

#[test]
fn cast_golden() {
    for (name, f, input, stream) in cases("cast") {
        let fmt = cast::Format::parse(&f[0]).unwrap();
        let mut s = vec![0u8; input.len() / if f[1] == "float32" { 2 } else { 4 }];
        if f[1] == "float32" {
            cast::encode_f32(fmt, &f32s(&input), &mut s).unwrap();
        } else {
            cast::encode_f64(fmt, &f64s(&input), &mut s).unwrap();
        }
        assert_eq!(s, stream, "{name}");
    }
}

#[test]
fn mpc_golden() {
    for (name, f, input, stream) in cases("mpc") {
        let (word, dim): (usize, usize) = (f[0].parse().unwrap(), f[1].parse().unwrap());
        let c = mpc::Mpc::new(word, dim).unwrap();
        let mut s = vec![0u8; mpc::max_compressed_size(input.len() / word, word)];
        let k = c.encode(&input, &mut s).unwrap();
        assert_eq!(&s[..k], &stream[..], "{name}");
        let mut back = vec![0u8; input.len()];
        mpc::decode(&stream, &mut back).unwrap();
        assert_eq!(back, input, "{name}");
    }
}
