"""Atari through whole runs of train_appo.py and enjoy.py (real ale-py games, real processes): a short Pong run on
its preset picks the conv encoder for uint8 frames, checkpoints and resumes, and enjoy.py plays a whole game into an
mp4 of the game's own colour frames; under episodic life the episodes a run reports are whole Breakout games (five
lives), with the native vector env and with one gymnasium env each."""

from __future__ import annotations

import re

import imageio.v2 as imageio
import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import run_script

pytest.importorskip("ale_py")

EPISODE_RE = re.compile(r"^episode (\d+): return (-?[\d.]+) length (\d+)$", re.MULTILINE)


def events(summaries, tag: str) -> list:
    acc = EventAccumulator(str(summaries), size_guidance={"scalars": 0})
    acc.Reload()
    return acc.Scalars(tag)


def scalars(summaries, tag: str) -> list[float]:
    return [e.value for e in events(summaries, tag)]


@pytest.mark.slow
def test_pong_trains_on_its_preset_checkpoints_and_enjoy_records_the_game(train_dir) -> None:
    args = ["--env=atari_pong", "--train_for_env_steps=2048", "--device=cpu", "--report_interval=1"]
    result = run_script("train_appo.py", [*args, f"--train_dir={train_dir}", "--experiment=pong"], timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    exp = train_dir / "pong"
    checkpoints = list_checkpoints(exp / "checkpoint_p0")
    assert checkpoints, result.stdout[-3000:]
    state = torch.load(checkpoints[-1], map_location="cpu", weights_only=False)["model"]
    # --encoder=auto on (4, 84, 84) uint8 frames: the Nature CNN's first conv (32 filters of 8x8 over 4 frames).
    assert any(tuple(v.shape) == (32, 4, 8, 8) for v in state.values()), sorted(state)[:10]
    last = events(exp / "summaries" / "0", "train/version")[-1]
    assert last.step >= 2048 and last.value >= 2  # two iterations of 1,024 steps trained

    result = run_script(
        "enjoy.py", [f"--train_dir={train_dir}", "--experiment=pong", "--save_video", "--max_num_episodes=1"], 240
    )
    assert result.returncode == 0, result.stdout[-3000:]
    (_, score, length), *_ = EPISODE_RE.findall(result.stdout)
    assert -21 <= float(score) <= 21 and int(length) >= 500  # a whole game of Pong, to 21 points
    (video,) = (exp / "videos").glob("*.mp4")
    reader = imageio.get_reader(video, format="FFMPEG")
    try:
        shapes = {frame.shape for frame in reader}
    finally:
        reader.close()
    (height, width, channels), *_ = shapes
    # The game's 210x160 colour screen (the encoder pads the height to a multiple of 16), not the 84x84 input.
    assert len(shapes) == 1 and width == 160 and height in (210, 224) and channels == 3

    # Resumed for one more iteration: the resumed run's own env seeds (wider than a C int) reset the games.
    args = [*args[:1], "--train_for_env_steps=3072", *args[2:]]
    result = run_script("train_appo.py", [*args, f"--train_dir={train_dir}", "--experiment=pong"], timeout=240)
    assert result.returncode == 0, result.stdout[-3000:]
    assert events(exp / "summaries" / "0", "train/version")[-1].step >= 3072, result.stdout[-3000:]


@pytest.mark.parametrize("vector", ["auto", "per_env"])
@pytest.mark.slow
def test_episodic_life_reports_whole_games(vector: str, train_dir) -> None:
    args = ["--env=atari_breakout", "--sampler_only=True", "--train_for_env_steps=6000", "--device=cpu"]
    args += ["--report_interval=1", f"--env_vector={vector}", f"--train_dir={train_dir}", "--experiment=b"]
    result = run_script("train_appo.py", args, timeout=180)
    assert result.returncode == 0, result.stdout[-3000:]
    summaries = train_dir / "b" / "summaries" / "0"
    lengths = scalars(summaries, "episode/length_mean")
    assert scalars(summaries, "episode/count")[-1] >= 4, result.stdout[-3000:]
    # A life of random Breakout lasts 20-60 agent steps; a game of five lives, reported whole, well over 100.
    assert lengths[-1] > 100, lengths
