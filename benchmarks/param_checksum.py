"""What the weight store's checksum costs (appo/protocol/param_sync.py): the crc32 a publish writes and a pull
checks, against the copy itself, for models of several sizes. Prints medians of many repeats, in microseconds, and
the checksum's share of a publish and of a pull.

    python benchmarks/param_checksum.py
"""

from __future__ import annotations

import statistics
import time

import torch
from torch import nn

from appo.protocol.param_sync import ParamStore
from appo.protocol.shared_views import state_checksum

SIZES = {"64-64 MLP (MuJoCo preset)": (17, [64, 64]), "256-256 MLP": (376, [256, 256]), "1024x3 MLP": (512, [1024] * 3)}


def mlp(inputs: int, hidden: list[int]) -> nn.Module:
    layers, width = [], inputs
    for h in hidden:
        layers += [nn.Linear(width, h), nn.Tanh()]
        width = h
    return nn.Sequential(*layers, nn.Linear(width, 8))


def median_us(fn, repeats: int = 300) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    torch.set_num_threads(1)
    for name, (inputs, hidden) in SIZES.items():
        model, reader = mlp(inputs, hidden), mlp(inputs, hidden)
        store = ParamStore(model)
        nbytes = sum(t.numel() * t.element_size() for t in store.state.values())
        crc = median_us(lambda store=store: state_checksum(t.numpy() for t in store.state.values()))
        publish = median_us(lambda store=store, model=model: store.publish(model, 1))
        pull = median_us(lambda store=store, reader=reader: store.pull(reader))
        print(
            f"{name:28s} {nbytes / 1024:8.1f} KiB  crc32 {crc:8.1f} us  publish {publish:8.1f} us "
            f"({crc / publish:4.0%} crc)  pull {pull:8.1f} us ({crc / pull:4.0%} crc)"
        )


if __name__ == "__main__":
    main()
