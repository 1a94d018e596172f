"""Write the zfp golden vectors in tests/golden/zfp/ from zfpy 1.0.1 (the reference of the
stream): for each case an input array and, per rate, zfpy's header-less stream and zfpy's
decode of that stream. Checked by rust/shmcoll-codec/tests/zfp_golden.rs and
tests/test_codec_zfp.py.

    python tests/golden/make_zfp_golden.py        # rewrites tests/golden/zfp/

Files: ``index.txt`` has one line per case,
``name dtype shape encode_ref rate:stream_bytes ...`` (shape: ``n`` for a 1-D array, ``AxBxC``
for an N-D one, C order); ``name.bin`` holds the input (its n values, little-endian, C
order), then for each listed rate the stream and the n decoded values. encode_ref
says whose encoder wrote the streams: ``zfpy``; ``shmcoll`` where zfp's encoder is undefined
(block maxima below 2^-98 / 2^-962: shmcoll's documented clamp; decodes are still zfpy's); or
``none`` (zfpy's own stream for such input: only the decode is checked, which is defined for
any stream).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import zfpy

OUT = Path(__file__).parent / "zfp"
RATES = {np.float32: (3, 4, 8, 16, 32), np.float64: (4, 8, 16, 32, 64)}
#: N-D arrays (2, 3, 4 axes) take any rate from 1 bit per value.
RATES_ND = {np.float32: (1, 2, 5, 16, 32), np.float64: (1, 3, 16, 41, 64)}
#: N-D shapes: partial blocks along every axis, single rows and columns, whole blocks.
SHAPES_ND = ((5, 7), (1, 9), (8, 4), (3, 5, 6), (4, 4, 4), (2, 3, 5, 7), (4, 1, 4, 6))


def pattern(name: str, dt: type, n: int, rng: np.random.Generator) -> np.ndarray:
    fi = np.finfo(dt)
    if name == "mixed":
        a = rng.standard_normal(n) * 10.0 ** rng.uniform(-4, 4, n)
        a[rng.random(n) < 0.1] = 0.0
        return a.astype(dt)
    if name == "smooth":
        return (np.sin(np.arange(n) * 0.05) * 1e3 + 7.0).astype(dt)
    if name == "zeros":
        a = np.zeros(n, dt)
        a[1::3] = -0.0
        return a
    if name == "subnormal":
        # Subnormals next to a normal value in each block: the exponent is defined.
        tiny = fi.smallest_subnormal
        a = (rng.integers(-1000, 1000, n) * tiny).astype(dt)
        a[::4] = (rng.standard_normal(len(a[::4])) * 1e-25).astype(dt)
        return a
    if name == "tiny":
        # Subnormals and values below 2^-98 (2^-962) only: zfp's encoder is undefined.
        tiny = fi.smallest_subnormal
        a = (rng.integers(-(2**20), 2**20, n) * tiny).astype(dt)
        a[::5] = dt(2.0**-110 if dt is np.float32 else 2.0**-1000)
        return a
    if name == "huge":
        a = rng.uniform(0.5, 1.0, n) * np.where(rng.random(n) < 0.5, -1.0, 1.0)
        a = (a * fi.max).astype(dt)
        a[::7] = fi.max
        a[3::7] = -fi.max
        return a
    raise ValueError(name)


def main() -> None:
    from shmcoll import _core  # only for the cases zfpy cannot encode

    OUT.mkdir(exist_ok=True)
    for old in OUT.glob("*"):
        old.unlink()
    rng = np.random.default_rng(20261201)
    lines = []
    for dt, tag in ((np.float32, "f32"), (np.float64, "f64")):
        for pat in ("mixed", "smooth", "zeros", "subnormal", "huge", "tiny"):
            sizes = (1, 5, 64, 1023) if pat == "mixed" else (1, 5, 64)
            for n in sizes:
                a = pattern(pat, dt, n, rng)
                refs = ("shmcoll", "none") if pat == "tiny" else ("zfpy",)
                for ref in refs:
                    name = f"{tag}_{pat}_{n}" + ("" if ref == "zfpy" else f"_{ref}")
                    parts = [a.astype(a.dtype.newbyteorder("<")).tobytes()]
                    cols = [name, tag, str(n), ref]
                    for rate in RATES[dt]:
                        if ref == "shmcoll":
                            stream = _core.zfp_encode(a, rate)
                        else:
                            stream = zfpy.compress_numpy(a, rate=rate, write_header=False)
                        back = zfpy._decompress(stream, zfpy.dtype_to_ztype(a.dtype), [n], rate=rate)
                        parts += [stream, back.astype(back.dtype.newbyteorder("<")).tobytes()]
                        cols.append(f"{rate}:{len(stream)}")
                    (OUT / f"{name}.bin").write_bytes(b"".join(parts))
                    lines.append(" ".join(cols))
    for dt, tag in ((np.float32, "f32"), (np.float64, "f64")):
        for pat in ("mixed", "smooth", "zeros", "subnormal", "huge"):
            for shape in SHAPES_ND:
                n = int(np.prod(shape))
                a = pattern(pat, dt, n, rng).reshape(shape)
                if pat == "smooth":
                    # Smooth along every axis, not only along the flattened order.
                    grids = np.meshgrid(*[np.arange(s) for s in shape], indexing="ij")
                    a = (sum(np.sin(g * (0.3 + 0.1 * i)) for i, g in enumerate(grids)) * 1e3 + 7.0).astype(dt)
                dims = "x".join(map(str, shape))
                name = f"{tag}_{pat}_{dims}"
                parts = [a.astype(a.dtype.newbyteorder("<")).tobytes()]
                cols = [name, tag, dims, "zfpy"]
                for rate in RATES_ND[dt]:
                    stream = zfpy.compress_numpy(a, rate=rate, write_header=False)
                    back = zfpy._decompress(stream, zfpy.dtype_to_ztype(a.dtype), list(shape), rate=rate)
                    assert back.shape == shape
                    parts += [stream, back.astype(back.dtype.newbyteorder("<")).tobytes()]
                    cols.append(f"{rate}:{len(stream)}")
                (OUT / f"{name}.bin").write_bytes(b"".join(parts))
                lines.append(" ".join(cols))
    (OUT / "index.txt").write_text("\n".join(lines) + "\n")
    total = sum(p.stat().st_size for p in OUT.iterdir())
    print(f"{len(lines)} cases, {total} bytes in {OUT}")


if __name__ == "__main__":
    main()
