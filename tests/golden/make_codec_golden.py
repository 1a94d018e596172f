"""Regenerate the golden vectors of the bq, cast and mpc codecs (tests/golden/{bq,cast,mpc}).

Each stream is produced by the Rust reference (shmcoll._core) and, before it is written,
checked against an independent NumPy computation of the spec in this file: np.round (half
to even) for bq, numpy's float16 conversion and a frexp/round construction for bfloat16,
and a NumPy rendering of mpc's delta / zigzag / transposition / zero elimination. A
disagreement stops the script. Run from the repository root:

    python tests/golden/make_codec_golden.py

Files per codec: ``manifest.txt`` (one case a line: name, then parameters), and per case
``<name>.input`` (the raw little-endian input) and ``<name>.stream`` (the expected stream).
"""

from __future__ import annotations

import pathlib
import struct

import numpy as np

from shmcoll import _core

ROOT = pathlib.Path(__file__).parent


# --- bq -------------------------------------------------------------------------------------


def bq_numpy(x: np.ndarray, bits: int, block: int) -> bytes:
    qmax = np.float32(127 if bits == 8 else 7)
    scales, codes = [], []
    for b in range(0, x.size, block):
        blk = x[b : b + block]
        if not np.all(np.isfinite(blk)):
            scales.append(np.float32(np.nan))
            codes.append(np.zeros(blk.size, np.int8))
            continue
        scale = np.float32(np.max(np.abs(blk), initial=np.float32(0)) / qmax)
        scales.append(scale)
        if scale == 0:
            codes.append(np.zeros(blk.size, np.int8))
        else:
            codes.append(np.clip(np.round(blk / scale), -qmax, qmax).astype(np.int8))
    s = np.array(scales, np.float32).view(np.uint32)
    s[np.isnan(np.array(scales, np.float32))] = 0x7FC00000
    q = np.concatenate(codes) if codes else np.zeros(0, np.int8)
    if bits == 8:
        body = q.view(np.uint8)
    else:
        u = (q.view(np.uint8) & 15).astype(np.uint8)
        if u.size % 2:
            u = np.append(u, np.uint8(0))
        body = u[0::2] | (u[1::2] << 4)
    return s.astype("<u4").tobytes() + body.tobytes()


def bq_cases() -> list[tuple[str, np.ndarray, int, int]]:
    rng = np.random.default_rng(7)
    normal = rng.standard_normal(1000).astype(np.float32)
    special = np.zeros(64 * 8, np.float32)
    special[64:128] = rng.standard_normal(64) * 1e-3
    special[130] = np.nan
    special[200] = -np.inf
    special[256:320] = np.float32(2.0**-140) * rng.integers(-5, 5, 64)
    special[320:384] = np.tile(np.float32([7.0, 0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5]), 8)
    special[384:448] = np.float32(3e38) * rng.uniform(-1, 1, 64).astype(np.float32)
    return [
        ("int8_b256_n1000", normal, 8, 256),
        ("int8_b32_n1000", normal, 8, 32),
        ("int4_b64_n777", normal[:777], 4, 64),
        ("int4_b128_n1000", normal, 4, 128),
        ("int4_b32_n1", normal[:1], 4, 32),
        ("int8_b64_special", special, 8, 64),
        ("int4_b64_special", special, 4, 64),
    ]


# --- cast -----------------------------------------------------------------------------------


def bf16_numpy(x: np.ndarray) -> np.ndarray:
    """Round to bfloat16, nearest even, directly from the (float32 or float64) value."""
    v = x.astype(np.float64)
    m, e = np.frexp(v)  # v = m * 2^e, 0.5 <= |m| < 1
    normal = np.ldexp(np.round(np.ldexp(m, 8)), e - 8)  # 8 significant bits
    sub = np.round(np.ldexp(v, 133)) * 2.0**-133  # multiples of 2^-133 below 2^-126
    r = np.where(np.abs(v) < 2.0**-126, sub, normal)
    r = np.where(np.abs(r) > np.float64(np.float32(3.3895313892515355e38)), np.copysign(np.inf, v), r)
    with np.errstate(over="ignore"):
        return (r.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)


def cast_numpy(x: np.ndarray, fmt: str) -> bytes:
    h = x.astype(np.float16).view(np.uint16) if fmt == "float16" else bf16_numpy(x)
    return h.astype("<u2").tobytes()


def cast_cases() -> list[tuple[str, np.ndarray, str]]:
    rng = np.random.default_rng(11)
    bits32 = rng.integers(0, 2**32, 2000, dtype=np.uint64).astype(np.uint32).view(np.float32)
    bits32 = bits32[~np.isnan(bits32)]
    near = np.concatenate(
        [
            np.float32([0, -0.0, 1, 65504, 65519.996, 65520, 1e-8, 2.9802322e-8, 6e-8, np.inf, -np.inf]),
            np.float32(1 + np.arange(-64, 64) * 2.0**-9),
            np.float32(rng.standard_normal(300) * 10.0 ** rng.integers(-12, 6, 300)),
        ]
    )
    f64 = np.concatenate(
        [
            rng.standard_normal(300) * 10.0 ** rng.integers(-45, 40, 300),
            1 + np.arange(-40, 40) * 2.0**-8 + 2.0**-40,
            np.array([1e300, -1e-300, 65520.0, 65519.99999, 3.3961775292304e38]),
        ]
    )
    cases: list[tuple[str, np.ndarray, str]] = []
    for fmt in ("bfloat16", "float16"):
        cases += [
            (f"{fmt}_f32_bits", bits32.astype(np.float32), fmt),
            (f"{fmt}_f32_near", near.astype(np.float32), fmt),
            (f"{fmt}_f64", f64, fmt),
        ]
    return cases


# --- mpc ------------------------------------------------------------------------------------


def mpc_numpy(raw: bytes, word: int, dim: int) -> bytes:
    ut, it = (np.uint32, np.int32) if word == 4 else (np.uint64, np.int64)
    nbits = 8 * word
    x = np.frombuffer(raw, f"<u{word}").astype(ut)
    chunk = 1024
    lengths, payloads = [], []
    for c in range(0, x.size, chunk):
        xs = x[c : c + chunk]
        m = xs.size
        prev = np.concatenate([np.zeros(min(dim, m), ut), xs[: max(m - dim, 0)]])
        d = xs - prev
        z = (d << ut(1)) ^ (d.view(it) >> it(nbits - 1)).view(ut)
        t = z.copy()
        full = m // nbits * nbits
        if full:
            g = z[:full].reshape(-1, nbits)
            bitsm = (g[:, :, None] >> np.arange(nbits, dtype=ut)) & ut(1)  # [group, i, j]
            t[:full] = (
                (bitsm.transpose(0, 2, 1) << np.arange(nbits, dtype=ut)).sum(axis=2, dtype=ut).reshape(-1)
            )
        nz = t != 0
        bm = np.packbits(nz, bitorder="little").tobytes()
        bm += b"\0" * (-len(bm) % word)
        packed = bm + t[nz].astype(f"<u{word}").tobytes()
        body = packed if len(packed) < m * word else xs.astype(f"<u{word}").tobytes()
        lengths.append(len(body))
        payloads.append(body)
    head = b"MPC\x01" + bytes([word, dim, 0, 0]) + struct.pack("<II", chunk, 0) + struct.pack("<Q", x.size)
    table = struct.pack(f"<{len(lengths)}I", *lengths)
    pre = head + table
    pre += b"\0" * (-len(pre) % 8)
    return pre + b"".join(payloads)


def mpc_cases() -> list[tuple[str, bytes, int, int]]:
    rng = np.random.default_rng(13)
    smooth = np.cumsum(rng.standard_normal(3000)).astype(np.float32)
    f64 = np.sin(np.arange(2500) * 0.01)
    xyz = np.repeat(np.arange(700, dtype=np.int32)[:, None] * [1, 5, -3], 1, axis=1).astype(np.int32)
    nans = np.full(100, np.nan, np.float32)
    nans.view(np.uint32)[::3] = 0x7F800001  # signaling NaNs round-trip too
    return [
        ("f32_smooth_d1", smooth.tobytes(), 4, 1),
        ("f64_sine_d1", f64.tobytes(), 8, 1),
        ("i32_xyz_d3", xyz.tobytes(), 4, 3),
        ("u32_random_d1", rng.integers(0, 2**32, 1100, dtype=np.uint64).astype(np.uint32).tobytes(), 4, 1),
        ("f32_nans_d2", nans.tobytes(), 4, 2),
        ("f32_empty", b"", 4, 1),
        ("f64_one", np.float64([np.pi]).tobytes(), 8, 1),
        ("f32_zeros_n1000", bytes(4000), 4, 1),
    ]


def write(codec: str, name: str, inp: bytes, stream: bytes, fields: str, manifest: list[str]) -> None:
    (ROOT / codec / f"{name}.input").write_bytes(inp)
    (ROOT / codec / f"{name}.stream").write_bytes(stream)
    manifest.append(f"{name} {fields}")


def main() -> None:
    np.seterr(over="ignore")  # the NumPy references overflow to inf on purpose
    man: list[str] = []
    for name, x, bits, block in bq_cases():
        ref = _core.bq_encode(x, bits, block)
        assert ref == bq_numpy(x, bits, block), f"bq {name}: Rust and NumPy disagree"
        write("bq", name, x.astype("<f4").tobytes(), ref, f"{bits} {block} {x.size}", man)
    (ROOT / "bq" / "manifest.txt").write_text("# name bits block n\n" + "\n".join(man) + "\n")
    man = []
    for name, x, fmt in cast_cases():
        ref = _core.cast_encode(x, fmt)
        assert ref == cast_numpy(x, fmt), f"cast {name}: Rust and NumPy disagree"
        src = "float32" if x.dtype == np.float32 else "float64"
        write("cast", name, x.astype(x.dtype.newbyteorder("<")).tobytes(), ref, f"{fmt} {src} {x.size}", man)
    (ROOT / "cast" / "manifest.txt").write_text("# name format source n\n" + "\n".join(man) + "\n")
    man = []
    for name, raw, word, dim in mpc_cases():
        ref = _core.mpc_encode(raw, word, dim)
        assert ref == mpc_numpy(raw, word, dim), f"mpc {name}: Rust and NumPy disagree"
        write("mpc", name, raw, ref, f"{word} {dim} {len(raw) // word}", man)
    (ROOT / "mpc" / "manifest.txt").write_text("# name word dim n\n" + "\n".join(man) + "\n")


if __name__ == "__main__":
    main()
