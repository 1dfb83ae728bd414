"""A fixed-horizon task ends by termination, so no learner bootstraps a value past it: a tabular MDP's episode
terminates at its horizon (--mdp_episode_steps, or --max_episode_steps where set), and its trial ends as a
termination too; an env cut by a time limit (navigation2d) still ends its trial by truncation."""

from __future__ import annotations

from appo.config.cfg import parse_cfg
from appo.envs import make_run_env


def trial_end(flags: list[str]) -> tuple[int, bool, bool]:
    """(steps, terminated, truncated) of the first trial of a run's env with a fixed action."""
    env = make_run_env(parse_cfg([*flags, "--task_schedule=per_trial", "--episodes_per_trial=2"]))
    try:
        env.reset(seed=0)
        for steps in range(1, 10_000):
            _, _, terminated, truncated, info = env.step(env.action_space.sample() * 0)
            if terminated or truncated:
                assert "trial" in info
                return steps, terminated, truncated
    finally:
        env.close()
    raise AssertionError("no trial end")


def test_a_tabular_mdp_trial_terminates_at_its_horizon() -> None:
    assert trial_end(["--env=tabular_mdp"]) == (20, True, False)
    assert trial_end(["--env=tabular_mdp", "--mdp_episode_steps=3"]) == (6, True, False)
    assert trial_end(["--env=tabular_mdp", "--max_episode_steps=4"]) == (8, True, False)


def test_a_time_limited_trial_still_ends_by_truncation() -> None:
    steps, terminated, truncated = trial_end(["--env=navigation2d", "--max_episode_steps=7"])
    assert (steps, terminated, truncated) == (14, False, True)
