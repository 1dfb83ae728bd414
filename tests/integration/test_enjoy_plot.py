"""enjoy.py and `python -m appo.plot` on a real CartPole run (trained once for the module): episode lines
and the mean line, an mp4 read back frame by frame, one-line errors with exit 2, and a PNG read back."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import imageio.v2 as imageio
import matplotlib.image as mpimg
import pytest

from tests.conftest import ROOT, run_script

EPISODE_RE = re.compile(r"^episode (\d+): return (-?[\d.]+) length (\d+)$", re.MULTILINE)
MEAN_RE = re.compile(r"^mean return (-?[\d.]+) ± ([\d.]+) over (\d+) episodes$", re.MULTILINE)


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """train_dir holding run `e`: CartPole trained for 20k env steps, with checkpoints and summaries."""
    train_dir = tmp_path_factory.mktemp("enjoy") / "train_dir"
    args = ["--env=CartPole-v1", f"--train_dir={train_dir}", "--experiment=e", "--train_for_env_steps=20000"]
    args += ["--rollout=16", "--batch_size=256", "--num_envs_per_worker=4", "--num_workers=1"]
    run_script("train_appo.py", args, check=True)
    return train_dir


def enjoy(train_dir: Path, *args: str, experiment: str = "e") -> subprocess.CompletedProcess:
    return run_script("enjoy.py", [f"--train_dir={train_dir}", f"--experiment={experiment}", *args])


def nonempty_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_enjoy_prints_episodes_and_mean(trained):
    result = enjoy(trained, "--no_render", "--max_num_episodes=2")
    assert result.returncode == 0, result.stdout[-3000:]
    episodes = EPISODE_RE.findall(result.stdout)
    assert [int(i) for i, _, _ in episodes] == [0, 1], result.stdout
    assert all(1 <= int(length) <= 500 for _, _, length in episodes)
    mean = MEAN_RE.search(result.stdout)
    assert mean is not None and mean.group(3) == "2", result.stdout
    returns = [float(r) for _, r, _ in episodes]
    assert float(mean.group(1)) == pytest.approx(sum(returns) / 2, abs=0.06)  # both printed to one decimal
    assert not (trained / "e" / "videos").exists()


def test_enjoy_warns_of_training_flags_it_ignores_and_honours_its_own(trained):
    result = enjoy(
        trained, "--no_render", "--max_num_episodes=1", "--num_workers=8", "--encoder_mlp_layers", "7", "--seed=3"
    )
    assert result.returncode == 0, result.stdout[-3000:]  # the run's cfg.json model, not a 7-unit one, was loaded
    warnings = [line for line in result.stdout.splitlines() if line.startswith("warning: enjoy.py ignores")]
    assert len(warnings) == 1, result.stdout
    assert "--encoder_mlp_layers, --num_workers" in warnings[0] and "--seed" not in warnings[0], warnings
    assert len(EPISODE_RE.findall(result.stdout)) == 1
    quiet = enjoy(trained, "--no_render", "--max_num_episodes=1", "--max_episode_steps=20")
    assert quiet.returncode == 0 and "warning: enjoy.py" not in quiet.stdout, quiet.stdout[-3000:]
    assert all(int(length) <= 20 for *_, length in EPISODE_RE.findall(quiet.stdout)), quiet.stdout
    help_text = run_script("enjoy.py", ["--help"]).stdout
    assert "enjoy.py takes only --train_dir, --experiment" in " ".join(help_text.split()), help_text[:2000]


def test_enjoy_saves_video_with_reset_frame_plus_one_per_step(trained):
    result = enjoy(trained, "--save_video", "--max_num_episodes=1")
    assert result.returncode == 0, result.stdout[-3000:]
    (_, _, length), *_ = EPISODE_RE.findall(result.stdout)
    videos = list((trained / "e" / "videos").glob("*.mp4"))
    assert len(videos) == 1 and f"video: {videos[0]}" in result.stdout
    reader = imageio.get_reader(videos[0], format="FFMPEG")
    try:
        shapes = [frame.shape for frame in reader]
    finally:
        reader.close()
    # The video holds the frame after reset plus one frame after every step.
    assert len(shapes) == int(length) + 1
    assert set(shapes) == {(400, 600, 3)}  # CartPole's rgb_array frames are 600 wide, 400 high


def test_enjoy_missing_experiment_is_one_line_exit_2(trained):
    result = enjoy(trained, "--no_render", experiment="nope")
    assert result.returncode == 2
    lines = nonempty_lines(result.stdout)
    assert len(lines) == 1 and lines[0].startswith("error: --experiment=nope: no run at"), lines


def test_enjoy_run_without_checkpoints_exits_2(trained, tmp_path):
    cfg = json.loads((trained / "e" / "cfg.json").read_text())
    (tmp_path / "bare").mkdir()
    (tmp_path / "bare" / "cfg.json").write_text(json.dumps({**cfg, "experiment": "bare"}))
    result = enjoy(tmp_path, "--no_render", experiment="bare")
    assert result.returncode == 2
    lines = nonempty_lines(result.stdout)
    assert len(lines) == 1 and lines[0].startswith("error:") and "checkpoint" in lines[0], lines


def test_plot_writes_a_png(trained):
    run_dir = trained / "e"
    result = subprocess.run(
        [sys.executable, "-m", "appo.plot", str(run_dir)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    png = run_dir / "plots" / "returns.png"
    assert png.stat().st_size > 0
    image = mpimg.imread(png)
    assert image.ndim == 3 and image.shape[0] > 0 and image.shape[1] > 0


def test_plot_missing_folder_is_one_line_exit_2(tmp_path):
    result = subprocess.run(
        [sys.executable, "-m", "appo.plot", str(tmp_path / "nope")], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert nonempty_lines(result.stdout + result.stderr) == [f"error: {tmp_path / 'nope'}: no such run folder"]


def test_enjoy_without_experiment_watches_the_latest_run(trained):
    result = run_script("enjoy.py", [f"--train_dir={trained}", "--no_render", "--max_num_episodes=1"])
    assert result.returncode == 0, result.stdout[-3000:]
    note = re.compile(r"no --experiment: using the latest run in \S+: e \(written \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\)$")
    assert any(note.search(line) for line in result.stdout.splitlines()), result.stdout[-3000:]
    assert len(EPISODE_RE.findall(result.stdout)) == 1 and MEAN_RE.search(result.stdout), result.stdout[-3000:]


def test_runs_table_lists_the_trained_run(trained):
    result = subprocess.run(
        [sys.executable, "-m", "appo.runs", f"--train_dir={trained}"], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    header, row = nonempty_lines(result.stdout)
    name, env, algo, steps, last_return, checkpoint = row.split()[:6]
    assert (name, env, algo) == ("e", "CartPole-v1", "appo"), row
    assert int(steps.replace(",", "")) >= 20000, row
    assert 8.0 <= float(last_return) <= 500.0, row  # CartPole's returns: from its shortest episode to the limit
    assert checkpoint.startswith("checkpoint_p0/checkpoint_") and (trained / "e" / checkpoint).is_file(), row


def test_an_env_whose_render_gives_no_frame_is_one_line_and_leaves_no_video(tmp_path):
    env = "--env=tests.support.faulty_envs:NoFrameEnv"
    args = [env, f"--train_dir={tmp_path}", "--experiment=blank", "--train_for_env_steps=2000", "--num_workers=1"]
    run_script("train_appo.py", [*args, "--num_envs_per_worker=2", "--rollout=16", "--batch_size=128"], check=True)
    result = enjoy(tmp_path, "--save_video", "--max_num_episodes=1", experiment="blank")
    lines = nonempty_lines(result.stdout)  # run_script: stdout and stderr together
    assert result.returncode == 2 and lines[-1].startswith("error: --save_video: "), result.stdout[-2000:]
    assert "render() returned NoneType" in lines[-1] and "Traceback" not in result.stdout
    assert not list((tmp_path / "blank").glob("videos/*.mp4"))
