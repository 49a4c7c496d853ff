"""Record torch's decoding of every code point of the low-precision formats.

Writes a JSON fixture with, as f32 bit patterns:
  - float8_e4m3fn: all 256 codes,
  - float8_e8m0fnu: all 256 codes,
  - float4_e2m1fn_x2: all 256 bytes, (low nibble, high nibble) decoded with
    torch's own unpacking and e2m1 definition,
plus encode cases (f32 -> code) for e4m3 and e2m1 through torch's casts, to
check our rounding (ties, saturation, subnormals).

Run where torch is installed (the GPU machine):
    python3 scripts/make_codepoints.py crates/trunk/tests/fixtures/codepoints.json
"""
import json
import struct
import sys

import types

import torch

# torch keeps its reference e2m1 conversions in its internal test helpers;
# their module imports `expecttest`, a test-only package that may be absent.
# The two functions used here need only torch.
try:
    import expecttest  # noqa: F401
except ImportError:
    stub = types.ModuleType("expecttest")
    stub.TestCase = object
    sys.modules["expecttest"] = stub
from torch.testing._internal.common_quantized import _f32_to_floatx_unpacked, _floatx_unpacked_to_f32  # noqa: E402


def bits(x: float) -> int:
    return struct.unpack("<I", struct.pack("<f", x))[0]


def main(out_path: str) -> None:
    codes = torch.arange(256, dtype=torch.uint8)
    e4m3 = codes.view(torch.float8_e4m3fn).float().tolist()
    e8m0 = codes.view(torch.float8_e8m0fnu).float().tolist()
    packed = codes.view(torch.float4_e2m1fn_x2)
    raw = packed.view(torch.uint8)
    lo = _floatx_unpacked_to_f32(raw & 0x0F, 2, 1).tolist()
    hi = _floatx_unpacked_to_f32(raw >> 4, 2, 1).tolist()

    gen = torch.Generator().manual_seed(0)
    probes = [0.0, -0.0, 1e-9, -1e-9, 448.0, 449.0, 464.0, 500.0, -1000.0]
    # every midpoint between adjacent e4m3 magnitudes, and values around them
    mags = sorted({abs(v) for v in e4m3 if v == v})
    for a, b in zip(mags, mags[1:]):
        m = (a + b) / 2
        probes += [m, -m, m * (1 + 1e-6), m * (1 - 1e-6)]
    probes += (torch.randn(2000, generator=gen) * 50).tolist()
    probes += (torch.randn(500, generator=gen) * 0.01).tolist()
    p = torch.tensor(probes, dtype=torch.float32)
    # torch's e4m3 cast does not saturate by itself; the engine clamps first,
    # so record the cast of the clamped value.
    enc8 = p.clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(torch.uint8).tolist()

    probes4 = [0.0, -0.0, 0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0, 6.0, 7.0, 100.0, -0.25, -0.75, -5.0, -7.0]
    probes4 += (torch.randn(2000, generator=gen) * 3).tolist()
    p4 = torch.tensor(probes4, dtype=torch.float32)
    enc4 = _f32_to_floatx_unpacked(p4.clamp(-6.0, 6.0), 2, 1).tolist()

    doc = {
        "torch_version": torch.__version__,
        "e4m3_decode": [bits(v) for v in e4m3],
        "e8m0_decode": [bits(v) for v in e8m0],
        "e2m1_x2_decode": [[bits(a), bits(b)] for a, b in zip(lo, hi)],
        "e4m3_encode": [[bits(x), c] for x, c in zip(p.tolist(), enc8)],
        "e2m1_encode": [[bits(x), c] for x, c in zip(p4.tolist(), enc4)],
    }
    with open(out_path, "w") as f:
        json.dump(doc, f)
    print(f"wrote {out_path}: torch {torch.__version__}")


if __name__ == "__main__":
    main(sys.argv[1])
