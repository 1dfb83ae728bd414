"""The actors' forward pass through an image encoder: appo's numpy pass (appo/numpy_policy/conv.py, what actor workers
act with) against torch's on the same weights, one thread each, at the batch sizes actor workers run.

    python benchmarks/conv_inference.py [--batches 1 2 4 8 16] [--repeats 300] [--kinds nature simple impala]

Observations: Atari's (4, 84, 84) uint8 frame stacks for "nature" and "impala", Doom's (72, 128, 3) uint8 screens
for "simple". An actor worker's batch is its envs per split: the Atari preset's 4 envs in 2 splits act 2 at a time,
the Doom preset's 8 in 2 splits 4 at a time. Each figure is the median wall time of one forward pass over
--repeats passes, the two engines alternating in blocks of 20 so that both see the same load; ratio: numpy's time
over torch's (below 1: numpy is faster)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from appo.models.encoders import make_image_encoder  # noqa: E402
from appo.numpy_policy.conv import ImageEncoderPass  # noqa: E402

SHAPES = {"nature": (4, 84, 84), "impala": (4, 84, 84), "simple": (72, 128, 3)}
BLOCK = 20


def timed_blocks(passes: dict[str, object], x: np.ndarray, repeats: int) -> dict[str, float]:
    """Median seconds per call of each pass, the passes taking turns in blocks of BLOCK calls."""
    times: dict[str, list[float]] = {name: [] for name in passes}
    for f in passes.values():
        f(x)  # warm-up: first-call work (weight reordering, oneDNN primitives)
    for _ in range(max(1, repeats // BLOCK)):
        for name, f in passes.items():
            for _ in range(BLOCK):
                start = time.perf_counter()
                f(x)
                times[name].append(time.perf_counter() - start)
    return {name: float(np.median(t)) for name, t in times.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batches", nargs="+", type=int, default=[1, 2, 4, 8, 16])
    parser.add_argument("--kinds", nargs="+", default=["nature", "simple", "impala"], choices=sorted(SHAPES))
    parser.add_argument("--repeats", type=int, default=300)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rng = np.random.default_rng(0)
    print(f"{'encoder':8} {'batch':>5} {'numpy ms':>9} {'torch ms':>9} {'ratio':>6}  max |diff|")
    with threadpool_limits(1), torch.inference_mode():
        for kind in args.kinds:
            space = gym.spaces.Box(0, 255, SHAPES[kind], np.uint8)
            torch.manual_seed(0)
            encoder = make_image_encoder(kind, space).eval()
            state = {f"encoder.{k}": v.numpy() for k, v in encoder.state_dict().items()}
            numpy_pass = ImageEncoderPass(state, "encoder", encoder.spec())

            def torch_pass(x: np.ndarray, encoder=encoder) -> np.ndarray:
                return encoder(torch.from_numpy(x)).numpy()

            for batch in args.batches:
                x = rng.integers(0, 256, (batch, *SHAPES[kind]), dtype=np.uint8)
                diff = float(np.abs(numpy_pass(x) - torch_pass(x)).max())
                t = timed_blocks({"numpy": numpy_pass, "torch": torch_pass}, x, args.repeats)
                ratio = t["numpy"] / t["torch"]
                print(f"{kind:8} {batch:5d} {t['numpy'] * 1e3:9.3f} {t['torch'] * 1e3:9.3f} {ratio:6.2f}  {diff:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
