"""Speed measurements: achieved GFLOP/s of a forward pass against this machine's measured matmul peak."""

from __future__ import annotations

import time

import torch
from torch.utils.flop_counter import FlopCounterMode


def matmul_peak_gflops(n: int = 1024, repeats: int = 30) -> float:
    """Best observed float32 GFLOP/s of an n x n matmul: the practical ceiling for dense layers here."""
    return matmul_peak_at_shapes([(n, n, n)], repeats)[f"{n}x{n}x{n}"]


def forward_flops(module: torch.nn.Module, batch: dict) -> int:
    """FLOPs of one forward pass on `batch`, counted by torch (matmuls, attention), not estimated."""
    batch = {k: v for k, v in batch.items() if k != "labels"}
    with torch.inference_mode(), FlopCounterMode(display=False) as counter:
        module(**batch)
    return counter.get_total_flops()


def matmul_peak_at_shapes(shapes: list[tuple[int, int, int]], repeats: int = 20) -> dict[str, float]:
    """Best observed float32 GFLOP/s of (m x k) @ (k x n) for each (m, k, n), at the current thread count: the
    ceiling for a model's own dense layers, whose row counts (tokens in a batch) are far from a square 1024."""
    out = {}
    for m, k, n in shapes:
        a, b = torch.randn(m, k), torch.randn(k, n)
        for _ in range(3):
            a @ b
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        out[f"{m}x{k}x{n}"] = 2 * m * k * n / best / 1e9
    return out
