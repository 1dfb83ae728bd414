"""SAC end to end as real processes: two actor workers' transitions reach the replay intact (no torn or mixed
rows; time limits bootstrapped from the episode's real last observation), the replay is saved with the
checkpoints and a resumed run continues from it, enjoy.py plays a SAC run, and bad input is one line, exit 2."""

from __future__ import annotations

import re

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from appo.learning.checkpoint import list_checkpoints
from tests.conftest import run_script
from tests.support.transition_env import BOUND, TIME_LIMIT

SMALL = [
    "--algo=sac",
    "--env=tests.support.transition_env:TransitionCheckEnv",
    "--num_workers=2",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--batch_size=64",
    "--actor_mlp_layers",
    "16",
    "--critic_mlp_layers",
    "16",
    "--learning_starts=300",
    "--report_interval=1",
    "--save_replay",
]


def check_rows(rows: dict[str, torch.Tensor]) -> None:
    """Every transition is one step of one episode of one env, with the env's own dynamics."""
    obs, nxt, a = rows["obs"], rows["next_obs"], rows["actions"][:, 0]
    torch.testing.assert_close(nxt[:, :2], obs[:, :2], rtol=0, atol=0)  # same process, same episode
    torch.testing.assert_close(nxt[:, 2], obs[:, 2] + 1, rtol=0, atol=0)  # the next step
    torch.testing.assert_close(nxt[:, 3], obs[:, 3] + a, rtol=0, atol=1e-5)
    torch.testing.assert_close(rows["rewards"], obs[:, 3] + 2 * a, rtol=0, atol=1e-5)
    ended = nxt[:, 3].abs() > BOUND
    assert torch.equal(rows["terminated"].bool(), ended)
    at_limit = (nxt[:, 2] == TIME_LIMIT) & ~ended
    assert int(at_limit.sum()) > 0 and not bool(rows["terminated"][at_limit].any())  # truncation is no termination


@pytest.mark.slow
def test_transitions_from_two_actor_workers_come_out_intact_and_resume_keeps_the_replay(train_dir):
    args = [*SMALL, f"--train_dir={train_dir}", "--experiment=sac"]
    first = run_script("train_appo.py", [*args, "--train_for_env_steps=1500"], check=True)
    ckpt_dir = train_dir / "sac" / "checkpoint_p0"
    replay = torch.load(ckpt_dir / "replay.pth", weights_only=True)
    rows = replay["rows"]
    assert replay["size"] >= 1500, first.stdout[-2000:]
    check_rows(rows)
    assert len(set(rows["obs"][:, 0].tolist())) == 2  # two actor worker processes wrote them
    state = torch.load(list_checkpoints(ckpt_dir)[-1], weights_only=True)
    updates = state["sac_counters"]["updates"]
    assert updates > 0 and int(state["model"]["updates"]) == updates
    assert {"critic", "critic_target", "log_alpha", "actor_optimizer", "critic_optimizer"} <= set(state)

    budget = int(state["env_steps"]) + 1000  # room beyond where the first run stopped, however far past 1,500
    second = run_script("train_appo.py", [*args, f"--train_for_env_steps={budget}"], check=True)
    assert re.search(rf"replay of {replay['size']} transitions loaded", second.stdout), second.stdout[-3000:]
    resumed = torch.load(ckpt_dir / "replay.pth", weights_only=True)
    assert resumed["size"] >= budget  # the first session's transitions and the second's
    check_rows(resumed["rows"])
    assert torch.equal(resumed["rows"]["obs"][: replay["size"]], rows["obs"])  # kept, oldest first
    after = torch.load(list_checkpoints(ckpt_dir)[-1], weights_only=True)
    assert after["sac_counters"]["updates"] > updates

    acc = EventAccumulator(str(train_dir / "sac" / "summaries" / "0"), size_guidance={"scalars": 0})
    acc.Reload()
    tags = set(acc.Tags()["scalars"])
    wanted = {"train/q1", "train/q_loss", "train/actor_loss", "train/alpha", "train/entropy"}
    wanted |= {"episode/return_mean", "perf/fps", "perf/updates_per_sec", "perf/updates_per_env_step"}
    assert wanted <= tags, sorted(wanted - tags)
    ratio = acc.Scalars("perf/updates_per_env_step")[-1].value
    assert 0.8 <= ratio <= 1.01, ratio

    enjoy = run_script("enjoy.py", [f"--train_dir={train_dir}", "--experiment=sac", "--max_num_episodes=2"])
    assert enjoy.returncode == 0, enjoy.stdout[-2000:]
    assert re.search(r"mean return -?\d+\.\d ± \d+\.\d over 2 episodes", enjoy.stdout), enjoy.stdout[-2000:]


def test_bad_sac_input_is_one_line_and_exit_2(train_dir):
    base = [f"--train_dir={train_dir}", "--experiment=bad", "--algo=sac"]
    for extra, expected in [
        (["--env=CartPole-v1"], r"error: --algo=sac: needs a 1-D continuous \(Box\) action space"),
        (["--env=Pendulum-v1", "--tau=2"], r"error: --tau=2.0: must be in \(0, 1\]"),
        (["--env=Pendulum-v1", "--target_entropy=x"], r"error: --target_entropy=x: must be auto or a number"),
        (["--env=Pendulum-v1", "--num_policies=2", "--with_pbt"], r"error: --with_pbt: not supported with --algo"),
    ]:
        result = run_script("train_appo.py", base + extra, timeout=60)
        lines = [line for line in result.stdout.splitlines() if line.startswith("error:")]
        assert result.returncode == 2 and any(re.match(expected, line) for line in lines), result.stdout[-2000:]
        assert "Traceback" not in result.stdout
