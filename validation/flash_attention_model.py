#!/usr/bin/python3
"""A numpy model of the fused attention's algorithm (cuda/cuda_flash_attention.cu) against the
unfused attention's semantics (the CPU backend's), to size the tolerance of the GPU tests.

The unfused path: scores in fp32, softmax over the valid keys, p = round(exp(s - m) / l), ctx = p v,
and in backward dS = round(p (dP - rowsum(dP * p))). The fused path: keys in tiles of 64, an online
softmax (running max m and sum l of the unrounded exponentials), P = round(exp(s - m_running)),
O rescaled per tile, ctx = O / l; backward recomputes p = round(exp(s - m) / l) from the final
statistics and takes dot(dO, O) from ctx as the layer keeps it (rounded) instead of rowsum(dP * p).
`round` is bf16 or fp16 (round to nearest even); products are taken in float32 on rounded operands.

Prints the relative L2 differences of ctx and dqkv at the GPU tests' shapes (CudaFusedAttention)
and exits 1 if one passes half the tests' tolerance (1e-2), so the tests keep a margin of two.
"""
import sys

import numpy as np

TOLERANCE = 1e-2


def bf16(x):
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    return (((u + 0x7FFF + ((u >> 16) & 1)) >> 16) << 16).astype(np.uint32).view(np.float32)


def f16(x):
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def masks(rng, B, L):
    """The tests' samples: every key valid, the last third padded, scattered, 7 valid, none."""
    m = np.ones((B, L), bool)
    if B > 1:
        m[1, L - L // 3:] = False
    if B > 2:
        m[2] = rng.uniform(size=L) > 0.25
        m[2, 0] = True
    if B > 3:
        m[3, 7:] = False
    if B > 4:
        m[4] = False
    return m


def relative(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(b))


def compare(rnd, B, L, H, hd, rng):
    scale = np.float32(1 / np.sqrt(hd))
    qkv = rnd(rng.normal(0, 1.5, (B, L, 3, H, hd)).astype(np.float32))
    q, k, v = qkv[:, :, 0], qkv[:, :, 1], qkv[:, :, 2]
    dO = rnd(rng.normal(0, 1, (B, L, H, hd)).astype(np.float32))
    valid = masks(rng, B, L)[:, None, None, :]
    S = np.einsum("bihd,bjhd->bhij", q, k) * scale
    dP = np.einsum("bihd,bjhd->bhij", dO, v)

    # Unfused.
    m = np.where(valid, S, -np.inf).max(-1, keepdims=True)
    e = np.where(valid, np.exp(S - np.where(np.isfinite(m), m, 0)), 0)
    total = e.sum(-1, keepdims=True)
    inv = np.where(total > 0, 1 / np.where(total > 0, total, 1), 0)
    P = rnd(e * inv)
    ctx = np.einsum("bhij,bjhd->bihd", P, v)
    dS = rnd(P * (dP - (dP * P).sum(-1, keepdims=True)))
    dqkv = np.stack([scale * np.einsum("bhij,bjhd->bihd", dS, k), scale * np.einsum("bhij,bihd->bjhd", dS, q),
                     np.einsum("bhij,bihd->bjhd", P, dO)], 2)

    # Fused: key tiles of 64, online softmax.
    m_run = np.full((B, H, L, 1), -np.inf, np.float32)
    l_run = np.zeros((B, H, L, 1), np.float32)
    O = np.zeros((B, H, L, hd), np.float32)
    for k0 in range(0, L, 64):
        St, vt = S[..., k0:k0 + 64], valid[..., k0:k0 + 64]
        m_new = np.maximum(m_run, np.where(vt, St, -np.inf).max(-1, keepdims=True))
        with np.errstate(invalid="ignore"):
            alpha = np.where(m_new == -np.inf, 1, np.exp(m_run - m_new))
        et = np.where(vt & (m_new != -np.inf), np.exp(St - np.where(np.isfinite(m_new), m_new, 0)), 0)
        l_run = l_run * alpha + et.sum(-1, keepdims=True)
        m_run = m_new
        O = O * alpha + np.einsum("bhij,bjhd->bhid", rnd(et), v[:, k0:k0 + 64])
    inv_f = np.where(l_run > 0, 1 / np.where(l_run > 0, l_run, 1), 0)
    ctx_f = (O * inv_f).transpose(0, 2, 1, 3)
    dot = (dO * rnd(ctx_f)).sum(-1).transpose(0, 2, 1)[..., None]
    P_f = rnd(np.where(valid & (inv_f > 0), np.exp(S - np.where(np.isfinite(m_run), m_run, 0)) * inv_f, 0))
    dS_f = rnd(P_f * (dP - dot))
    dqkv_f = np.stack([scale * np.einsum("bhij,bjhd->bihd", dS_f, k), scale * np.einsum("bhij,bihd->bjhd", dS_f, q),
                       np.einsum("bhij,bihd->bjhd", P_f, dO)], 2)
    return relative(ctx_f, ctx), relative(dqkv_f, dqkv)


def main():
    rng = np.random.default_rng(20240611)
    worst = 0.0
    for name, rnd in (("bf16", bf16), ("fp16", f16)):
        for B, L, H, hd in ((5, 95, 4, 32), (5, 197, 6, 64), (2, 300, 2, 128), (3, 70, 2, 16), (1, 1049, 2, 128)):
            ctx, dqkv = compare(rnd, B, L, H, hd, rng)
            worst = max(worst, ctx, dqkv)
            print(f"{name} B {B} L {L} H {H} hd {hd}: ctx {ctx:.2e}, dqkv {dqkv:.2e} relative to the unfused")
    print(f"worst {worst:.2e}; the GPU tests allow {TOLERANCE:.0e}")
    if worst > TOLERANCE / 2:
        sys.exit(f"flash_attention_model: {worst:.2e} leaves the tests less than a margin of two")


if __name__ == "__main__":
    main()
