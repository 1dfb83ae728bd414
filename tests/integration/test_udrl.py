"""UDRL end to end as real processes on the 10-step chain (tests/support/chain_env.py, the return is the number of
right moves): after a short run the greedy policy follows commands 2, 5 and 8; the run resumes with its replay,
command and counters; enjoy.py plays a chosen command; bad flags are one line, exit 2."""

from __future__ import annotations

import re

import pytest
import torch

from appo.algorithms.reward_conditioned.udrl import run_command_episode
from appo.config.cfg import make_cfg, read_saved_cfg
from appo.envs import make_run_env
from appo.learning.checkpoint import list_checkpoints
from appo.models.registry import make_model
from appo.tools.plot import load_events, scalar_series
from tests.conftest import run_script

CHAIN = [
    "--algo=udrl",
    "--env=tests.support.chain_env:ChainEnv",
    "--num_workers=1",
    "--num_envs_per_worker=4",
    "--rollout=16",
    "--udrl_warmup_episodes=200",
    "--report_interval=2",
    "--seed=1",
]


def greedy_returns(exp_dir, commands: list[float]) -> list[float]:
    cfg = make_cfg(read_saved_cfg(exp_dir / "cfg.json"))
    env = make_run_env(cfg)
    state = torch.load(list_checkpoints(exp_dir / "checkpoint_p0")[-1], weights_only=True)
    model = make_model(cfg, env.observation_space, env.action_space)
    model.load_state_dict(state["model"])
    return [run_command_episode(env, model.eval(), (command, 10.0))[0] for command in commands]


@pytest.mark.slow
def test_udrl_follows_commands_on_the_chain_and_resumes(train_dir):
    args = [*CHAIN, f"--train_dir={train_dir}", "--experiment=chain"]
    first = run_script("train_appo.py", [*args, "--train_for_env_steps=6000", "--eval_interval=2000"], check=True)
    exp_dir = train_dir / "chain"
    # Two evaluations, two tags: the engine's evaluator (eval/*) plays the model's command, the
    # learner's greedy evaluation (greedy/*, every --udrl_eval_every iterations) is written once per evaluation.
    events = load_events(exp_dir / "summaries" / "0")
    state = torch.load(list_checkpoints(exp_dir / "checkpoint_p0")[-1], weights_only=True)
    evaluated = state["udrl"]["history"][:, -1]
    greedy_steps, _, greedy = scalar_series(events, "greedy/return_mean")
    assert len(greedy) == int((~torch.isnan(evaluated)).sum()) >= 1, (greedy, evaluated)
    assert greedy.tolist() == evaluated[~torch.isnan(evaluated)].tolist()
    eval_steps, _, _ = scalar_series(events, "eval/return_mean")
    assert len(eval_steps) >= 2  # at 2000 and 4000 steps, and the final one
    assert (greedy_steps > 0).all()  # each at the steps it ran at
    returns = greedy_returns(exp_dir, [2.0, 5.0, 8.0])
    assert returns[0] < returns[1] < returns[2], (returns, first.stdout[-3000:])
    for command, got in zip([2.0, 5.0, 8.0], returns, strict=True):
        assert abs(got - command) <= 1.5, (returns, first.stdout[-3000:])

    state = torch.load(list_checkpoints(exp_dir / "checkpoint_p0")[-1], weights_only=True)
    iterations, updates = state["udrl"]["iterations"], int(state["model"]["updates"])
    assert iterations > 0 and updates == 100 * iterations
    assert (exp_dir / "checkpoint_p0" / "replay.pth").is_file()

    # The first run stops past 6,000 steps by however many its last batches held; resume with room beyond that
    # checkpoint (a budget it has already reached trains nothing).
    resume_budget = int(state["env_steps"]) + 1000
    second = run_script("train_appo.py", [*args, f"--train_for_env_steps={resume_budget}"], check=True)
    loaded = re.search(r"UDRL: replay of (\d+) episodes loaded", second.stdout)
    assert loaded and int(loaded.group(1)) == min(500, state["udrl"]["episodes"]), second.stdout[-3000:]
    resumed = torch.load(list_checkpoints(exp_dir / "checkpoint_p0")[-1], weights_only=True)
    assert resumed["udrl"]["iterations"] > iterations  # went on training: no second warm-up
    assert resumed["udrl"]["episodes"] > state["udrl"]["episodes"]

    played = run_script(
        "enjoy.py",
        [f"--train_dir={train_dir}", "--experiment=chain", "--no_render", "--max_num_episodes=1"]
        + ["--command_return=8", "--command_horizon=10"],
        check=True,
    )
    assert "command: return 8.0, horizon 10" in played.stdout
    assert re.search(r"episode 0: return (7|8|9)\.0 length 10", played.stdout), played.stdout


def test_bad_udrl_flag_is_one_line_and_exit_2(train_dir):
    bad = run_script("train_appo.py", [*CHAIN, f"--train_dir={train_dir}", "--command_scale", "0.1"])
    assert bad.returncode == 2
    lines = [line for line in bad.stdout.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: --command_scale=[0.1]: must be 2 numbers"), bad.stdout
