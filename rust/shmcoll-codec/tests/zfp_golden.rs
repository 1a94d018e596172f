//! The zfp codec against the golden vectors written by zfpy 1.0.1
//! (`tests/golden/make_zfp_golden.py`): every stream byte for byte, every decode bit for
//! bit, and the stream sizes, for 1-D arrays and for 2-D, 3-D and 4-D ones (blocks of
//! 4^d values).

use std::path::PathBuf;

use shmcoll_codec::zfp::{self, FloatKind};

fn golden_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/golden/zfp")
}

struct Case {
    name: String,
    kind: FloatKind,
    /// C order; its product is the number of values.
    shape: Vec<usize>,
    n: usize,
    /// Whose encoder wrote the streams: "zfpy", "shmcoll" (our clamp) or "none".
    encode_ref: String,
    /// (rate, stream length)
    rates: Vec<(u32, usize)>,
}

fn cases() -> Vec<Case> {
    let index = std::fs::read_to_string(golden_dir().join("index.txt"))
        .expect("tests/golden/zfp/index.txt (run tests/golden/make_zfp_golden.py)");
    index
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let shape: Vec<usize> = f[2].split('x').map(|v| v.parse().unwrap()).collect();
            Case {
                n: shape.iter().product(),
                shape,
                name: f[0].into(),
                kind: match f[1] {
                    "f32" => FloatKind::F32,
                    "f64" => FloatKind::F64,
                    other => panic!("unknown dtype {other}"),
                },
                encode_ref: f[3].into(),
                rates: f[4..]
                    .iter()
                    .map(|r| {
                        let (rate, len) = r.split_once(':').unwrap();
                        (rate.parse().unwrap(), len.parse().unwrap())
                    })
                    .collect(),
            }
        })
        .collect()
}

fn le_words<const W: usize>(b: &[u8]) -> Vec<[u8; W]> {
    b.chunks_exact(W).map(|c| c.try_into().unwrap()).collect()
}

#[test]
fn golden_streams_and_decodes() {
    let cases = cases();
    assert!(cases.len() >= 40, "golden index too small: {}", cases.len());
    let (mut encodes, mut decodes) = (0, 0);
    let mut nd_cases = [0usize; 5];
    for c in &cases {
        let data = std::fs::read(golden_dir().join(format!("{}.bin", c.name))).unwrap();
        let width = match c.kind {
            FloatKind::F32 => 4,
            FloatKind::F64 => 8,
        };
        let mut at = c.n * width;
        let input = &data[..at];
        for &(rate, len) in &c.rates {
            let what = format!("{} rate {rate}", c.name);
            let stream = &data[at..at + len];
            let want = &data[at + len..at + len + c.n * width];
            at += len + c.n * width;
            assert_eq!(
                zfp::compressed_bytes_nd(&c.shape, c.kind, rate).unwrap(),
                len,
                "{what}: size"
            );
            let mut ours = vec![0u8; len];
            let got: Vec<u8> = match c.kind {
                FloatKind::F32 => {
                    let src: Vec<f32> = le_words::<4>(input)
                        .into_iter()
                        .map(f32::from_le_bytes)
                        .collect();
                    zfp::encode_nd_f32(&src, &c.shape, rate, &mut ours).unwrap();
                    let mut out = vec![0f32; c.n];
                    zfp::decode_nd_f32(stream, &c.shape, rate, &mut out).unwrap();
                    out.iter().flat_map(|x| x.to_le_bytes()).collect()
                }
                FloatKind::F64 => {
                    let src: Vec<f64> = le_words::<8>(input)
                        .into_iter()
                        .map(f64::from_le_bytes)
                        .collect();
                    zfp::encode_nd_f64(&src, &c.shape, rate, &mut ours).unwrap();
                    let mut out = vec![0f64; c.n];
                    zfp::decode_nd_f64(stream, &c.shape, rate, &mut out).unwrap();
                    out.iter().flat_map(|x| x.to_le_bytes()).collect()
                }
            };
            if c.encode_ref != "none" {
                assert_eq!(ours, stream, "{what}: stream differs from {}", c.encode_ref);
                encodes += 1;
            }
            assert_eq!(got, want, "{what}: decode differs from zfpy");
            decodes += 1;
        }
        assert_eq!(at, data.len(), "{}: trailing bytes", c.name);
        nd_cases[c.shape.len()] += 1;
    }
    assert!(
        nd_cases[2..].iter().all(|&k| k >= 20),
        "N-D cases per dimension count: {nd_cases:?}"
    );
    assert!(
        encodes >= 180 && decodes >= 200,
        "{encodes} encodes, {decodes} decodes"
    );
}
