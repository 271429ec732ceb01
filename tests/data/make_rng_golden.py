#!/usr/bin/python3
"""Writes tests/data/rng_golden.txt: the streams of tapegrad's Rng (core/rng.hpp), computed here by an
independent implementation of the same published algorithms (splitmix64 seeding, xoshiro256**, the
polar normal method, the fixed-series logarithm). Python floats are IEEE doubles with no fused
multiply-add, so every value must match the C++ bit for bit. Run by hand:

    python3 tests/data/make_rng_golden.py
"""
import math
import os

M = (1 << 64) - 1


def splitmix64(x):
    x = (x + 0x9E3779B97F4A7C15) & M
    z = x
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return x, z ^ (z >> 31)


def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M


class Rng:
    def __init__(self, seed, stream=0):
        _, mixed = splitmix64(stream)
        mix = mixed ^ seed
        self.s = []
        for _ in range(4):
            mix, w = splitmix64(mix)
            self.s.append(w)

    def next_u64(self):
        s = self.s
        result = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]
        s[3] ^= s[1]
        s[1] ^= s[2]
        s[0] ^= s[3]
        s[2] ^= t
        s[3] = rotl(s[3], 45)
        return result

    def uniform(self):
        return (self.next_u64() >> 11) * 2.0 ** -53

    def below(self, n):
        threshold = ((1 << 64) - n) % n
        while True:
            r = self.next_u64()
            if r >= threshold:
                return r % n

    def normal(self):
        while True:
            u = 2.0 * self.uniform() - 1.0
            v = 2.0 * self.uniform() - 1.0
            s = u * u + v * v
            if not (s >= 1.0 or s == 0.0):
                return u * math.sqrt(-2.0 * portable_log(s) / s)

    def shuffle(self, xs):
        for i in range(len(xs), 1, -1):
            j = self.below(i)
            xs[i - 1], xs[j] = xs[j], xs[i - 1]


def portable_log(x):
    m, e = math.frexp(x)
    if m < 0.70710678118654752440:
        m *= 2.0
        e -= 1
    s = (m - 1.0) / (m + 1.0)
    z = s * s
    p = 1.0 / 23.0
    for k in range(10, -1, -1):
        p = p * z + 1.0 / float(2 * k + 1)
    ln2_hi = 6.93147180369123816490e-01
    ln2_lo = 1.90821492927058770002e-10
    de = float(e)
    return de * ln2_hi + (2.0 * s * p + de * ln2_lo)


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rng_golden.txt")
    lines = ["# written by tests/data/make_rng_golden.py; do not edit"]
    r = Rng(42)
    lines.append("u64 42 0 " + " ".join(str(r.next_u64()) for _ in range(8)))
    r = Rng(42, 1)
    lines.append("u64 42 1 " + " ".join(str(r.next_u64()) for _ in range(8)))
    r = Rng(7)
    lines.append("uniform 7 0 " + " ".join(float.hex(r.uniform()) for _ in range(8)))
    r = Rng(7)
    lines.append("normal 7 0 " + " ".join(float.hex(r.normal()) for _ in range(16)))
    r = Rng(3)
    lines.append("below10 3 0 " + " ".join(str(r.below(10)) for _ in range(16)))
    r = Rng(3)
    xs = list(range(10))
    r.shuffle(xs)
    lines.append("shuffle10 3 0 " + " ".join(map(str, xs)))
    xs = [1e-300, 1e-10, 0.001, 0.25, 0.5, 0.7, 0.75, 0.9999999, 1.0, 1.5, 2.0, 10.0, 12345.678]
    lines.append("log " + " ".join(f"{float.hex(x)}:{float.hex(portable_log(x))}" for x in xs))
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
