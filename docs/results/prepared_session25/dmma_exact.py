# dmma_exact.py: for dmma_order.cu's dump, whether each DMMA output is the
# exact a.b + c rounded once to nearest even (a probe, not engine code).
import struct, sys
from fractions import Fraction
cases = 20000
raw = open(sys.argv[1], "rb").read()
n = len(raw) // 8
v = struct.unpack("<%dd" % n, raw)
a, b = v[: cases * 32], v[cases * 32 : cases * 64]
c, d = v[cases * 64 : cases * 128], v[cases * 128 :]
names = ["full 53-bit", "fp8 x f32", "cancel", "subnormal a", "zero c"]
miss = [0] * 5; tot = [0] * 5
limit = int(sys.argv[2]) if len(sys.argv) > 2 else 2000
for i in range(limit):
    g = i % 5
    for m in range(8):
        for nn in range(8):
            s = Fraction(c[i * 64 + m * 8 + nn])
            for k in range(4):
                s += Fraction(a[i * 32 + m * 4 + k]) * Fraction(b[i * 32 + k * 8 + nn])
            tot[g] += 1
            if float(s) != d[i * 64 + m * 8 + nn] or (float(s) == 0 and str(float(s)) != str(d[i * 64 + m * 8 + nn])):
                miss[g] += 1
for g in range(5):
    print("exact-once regime %-12s outputs %d differs %d" % (names[g], tot[g], miss[g]))
