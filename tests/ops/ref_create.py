"""CPU references of the creation ops and cast, in NumPy, written from
docs/ops.md: an independent re-implementation of Philox4x32-10 and of the
rand/randn conversions, arange, and the cast rules."""
import numpy as np

MASK = 0xFFFFFFFF

# Known-answer vectors of Philox4x32-10 published with Random123
# (kat_vectors): (counter, key) -> output.
PHILOX_KAT = [
    ((0, 0, 0, 0), (0, 0), (0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8)),
    ((MASK, MASK, MASK, MASK), (MASK, MASK), (0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd)),
    ((0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344), (0xa4093822, 0x299f31d0),
     (0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1)),
]


def philox4x32_10(ctr, key):
    """ctr: 4 arrays of uint32 counters; key: (k0, k1). Returns 4 uint64 arrays."""
    c = [np.asarray(x, dtype=np.uint64) for x in ctr]
    k0, k1 = key
    m0, m1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
    s32, mask = np.uint64(32), np.uint64(MASK)
    for r in range(10):
        if r:
            k0, k1 = (k0 + 0x9E3779B9) & MASK, (k1 + 0xBB67AE85) & MASK
        p0, p1 = m0 * c[0], m1 * c[2]
        c = [(p1 >> s32) ^ c[1] ^ np.uint64(k0), p1 & mask, (p0 >> s32) ^ c[3] ^ np.uint64(k1), p0 & mask]
    return c


def words(n, seed):
    """The first n Philox words for `seed`: word i is word i % 4 of block i // 4."""
    seed &= 2**64 - 1
    blocks = (n + 3) // 4
    j = np.arange(blocks, dtype=np.uint64)
    z = np.zeros(blocks, dtype=np.uint64)
    w = philox4x32_10([j, z, z, z], (seed & MASK, seed >> 32))
    return np.stack(w, axis=1).reshape(-1)[:n]


RAND_BITS = {"f32": 24, "f16": 11, "bf16": 8}


def rand(n, seed, dtype="f32"):
    b = RAND_BITS[dtype]
    return (words(n, seed) >> np.uint64(32 - b)).astype(np.float64) * 2.0**-b


def randn(n, seed):
    w = words((n + 3) // 4 * 4, seed).reshape(-1, 2)
    u1 = ((w[:, 0] >> np.uint64(8)).astype(np.float64) + 1) * 2.0**-24
    u2 = (w[:, 1] >> np.uint64(8)).astype(np.float64) * 2.0**-24
    r = np.sqrt(-2 * np.log(u1))
    t = 2 * np.pi * u2 - np.pi
    return np.stack([r * np.cos(t), r * np.sin(t)], axis=1).reshape(-1)[:n]


def arange(start, stop, step):
    n = max(0, int(np.ceil((stop - start) / step)))
    return start + np.arange(n, dtype=np.float64) * step


def cast(x, dst):
    """x (float64 values of the source dtype) converted to `dst`: floats keep
    the value (the harness rounds f16/bf16 to nearest even, via f32); integers
    truncate toward zero and saturate, NaN -> 0."""
    if dst in ("f32", "f16", "bf16"):
        return x.astype(np.float32).astype(np.float64)
    lo, hi = (0, 255) if dst == "u8" else (-2**31, 2**31 - 1)
    with np.errstate(invalid="ignore"):
        return np.clip(np.nan_to_num(np.trunc(x), nan=0.0), lo, hi)
