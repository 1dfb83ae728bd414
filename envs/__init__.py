"""Environment factory: `make_env(name)` returns a gymnasium Env for a project env name, any registered
gymnasium id, or `module.path:ClassName` for a user's own env class. Actor workers, the driver (to read
the spaces) and enjoy.py all build their envs here, so every env is made the same way."""

from __future__ import annotations

import importlib
from collections.abc import Callable
from functools import partial
from typing import TYPE_CHECKING, Any

import gymnasium as gym

from appo.envs.common.packed_obs import PackDictObs, is_dict_obs
from appo.envs.multi_agent.multi_agent import AgentEnv, is_parallel_env
from appo.envs.multi_agent.sf_agents import SfAgents, is_sf_multi_agent
from appo.envs.registry import families, family_of
from appo.utils.seeding import incarnation_seed

if TYPE_CHECKING:
    from appo.envs.meta.schedules import TaskAssigner, TaskSchedule
    from appo.envs.meta.tasks import Task

# The project's envs by name, from every family's ENVS (envs/registry.py): name -> callable(**kwargs) -> Env. A
# constructor applies its env's TimeLimit itself and takes `max_episode_steps` (> 0) to override its length.
PROJECT_ENVS: dict[str, Callable[..., gym.Env]] = {
    name: make for family in families() for name, make in getattr(family, "ENVS", {}).items()
}
# The project envs that are meta-task families (envs/meta/tasks.py).
TASK_FAMILIES = tuple(name for family in families() for name in getattr(family, "TASK_FAMILIES", ()))


class UnknownEnvError(ValueError):
    """Raised with a one-line message naming the env and what would be valid."""


def _from_class_path(name: str, kwargs: dict[str, Any]) -> gym.Env:
    module_name, _, class_name = name.partition(":")
    try:
        env_cls = getattr(importlib.import_module(module_name), class_name)
    except (ImportError, AttributeError) as exc:
        raise UnknownEnvError(f"--env={name}: cannot import {class_name} from {module_name} ({exc})") from exc
    return env_cls(**kwargs)


def make_env(
    name: str,
    max_episode_steps: int = 0,
    render_mode: str | None = None,
    agent_ids: bool = False,
    value_input: str = "local",
    **kwargs: Any,
) -> gym.Env:
    """Build the env called `name`. `max_episode_steps` > 0 overrides the env's own time limit. A multi-agent env
    (PettingZoo's Parallel API) comes back as an `AgentEnv` (appo/envs/multi_agent.py): a row per agent, with the
    agent's one-hot in its observation where `agent_ids` (--obs_agent_id), and the team input of a centralised value
    where `value_input` is not "local" (--value_input). An env with a Dict observation space comes
    back wrapped in `PackDictObs` (appo/envs/packed_obs.py): one uint8 array per observation, which the model takes
    apart again."""
    agents = partial(AgentEnv, name=name, agent_ids=agent_ids, value_input=value_input)
    env = _make_env(name, max_episode_steps, render_mode, agents, **kwargs)
    return PackDictObs(env, name) if is_dict_obs(env) else env


def _make_env(
    name: str, max_episode_steps: int, render_mode: str | None, agents: Callable[..., AgentEnv], **kwargs: Any
) -> gym.Env:
    if render_mode is not None:
        kwargs["render_mode"] = render_mode
    if name in PROJECT_ENVS:
        # Project constructors apply their own TimeLimit (their default episode length) and take the override.
        limit = {"max_episode_steps": max_episode_steps} if max_episode_steps > 0 else {}
        env = PROJECT_ENVS[name](**limit, **kwargs)
        return agents(env) if is_parallel_env(env) else env
    family = family_of(name)
    if family is not None and hasattr(family, "make"):  # a family that owns names by prefix (atari_pong)
        try:
            env = family.make(name, max_episode_steps, **kwargs)
        except ValueError as exc:
            raise UnknownEnvError(str(exc).splitlines()[0]) from exc
        if env is not None:
            return env
    if ":" in name:
        env = _from_class_path(name, kwargs)
        if is_parallel_env(env):  # many agents in one env (a PettingZoo Parallel env): a row per agent
            return agents(env, max_episode_steps=max_episode_steps)
        if is_sf_multi_agent(env):  # ... or one of Sample Factory's (appo/envs/sf_agents.py)
            return agents(SfAgents(env, name), max_episode_steps=max_episode_steps)
    else:
        try:
            # The passive env checker costs time on every step; envs are checked by tests instead.
            limit = {"max_episode_steps": max_episode_steps} if max_episode_steps > 0 else {}
            return gym.make(name, disable_env_checker=True, **limit, **kwargs)
        except gym.error.DependencyNotInstalled as exc:  # a registered id whose package is missing: say which
            raise UnknownEnvError(f"--env={name}: {exc}".splitlines()[0]) from exc
        except gym.error.Error as exc:
            known = ", ".join(sorted(PROJECT_ENVS)) or "none yet"
            raise UnknownEnvError(
                f"--env={name}: not a project env ({known}), a registered gymnasium id, or module.path:ClassName"
            ) from exc
    if max_episode_steps > 0:
        env = gym.wrappers.TimeLimit(env, max_episode_steps=max_episode_steps)
    return env


def env_kwargs(cfg: Any) -> dict[str, Any]:
    """The constructor keywords that `cfg` gives its env: for an env in its family's CFG_KEYS, each of its cfg
    keys under the constructor's name (e.g. --num_arms as `num_arms`); empty for every other env. A tabular MDP's
    horizon is --max_episode_steps where that is set (its episodes terminate there: envs/meta/tabular_mdp.py)."""
    family = family_of(cfg.env)
    keys = getattr(family, "CFG_KEYS", {}).get(cfg.env, {}) if family is not None else {}
    kwargs = {kwarg: getattr(cfg, key) for key, kwarg in keys.items()}
    if cfg.env == "tabular_mdp" and getattr(cfg, "max_episode_steps", 0) > 0:
        kwargs["episode_steps"] = cfg.max_episode_steps
    return kwargs


def _family_kwargs(cfg: Any, hook: str) -> dict[str, Any]:
    """The keywords the env's family hook `hook` gives for `cfg`; empty where the family has no such hook."""
    family = family_of(cfg.env)
    return getattr(family, hook)(cfg) if family is not None and hasattr(family, hook) else {}


def training_kwargs(cfg: Any, training: bool) -> dict[str, Any]:
    """Constructor keywords for the envs that collect training experience only (Atari's episodic life): the
    family's `training_kwargs`."""
    return _family_kwargs(cfg, "training_kwargs") if training else {}


def evaluation_kwargs(cfg: Any, evaluation: bool) -> dict[str, Any]:
    """Constructor keywords for the evaluator's env only (a duel's evaluation game against a built-in bot): the
    family's `evaluation_kwargs`."""
    return _family_kwargs(cfg, "evaluation_kwargs") if evaluation else {}


def make_run_vector(cfg: Any) -> Callable[[int], Any] | None:
    """A builder of native vector envs of `n` training envs for the run's env (Atari: ale-py's AtariVectorEnv), or
    None where the run steps single envs: no native vector for the env, --env_vector=per_env, or a run that needs
    per-env control (task schedules, reward commands, sparse rewards, episodic algorithms)."""
    family = family_of(cfg.env)
    if getattr(cfg, "env_vector", "per_env") != "auto" or family is None or not hasattr(family, "native_vector"):
        return None
    if cfg.task_schedule != "none" or getattr(cfg, "command_dims", 0) or getattr(cfg, "sparse_reward", False):
        return None
    if cfg.traits.episodic:
        return None
    return family.native_vector(cfg)


def is_task_env(env: gym.Env) -> bool:
    from appo.envs.meta.tasks import TaskFamily

    return isinstance(getattr(env, "unwrapped", env), TaskFamily)


def trial_length(cfg: Any) -> int:
    """Episodes per trial in a run: what its training schedule uses (per_episode: 1, whatever
    --episodes_per_trial says), or 1 without a task schedule. The meta-test and enjoy.py run trials of this
    length too, so their returns compare with the training returns. `cfg` is an appo Cfg."""
    if cfg.task_schedule == "none":
        return 1
    from appo.envs.meta.schedules import make_schedule

    # Ask the schedule rather than repeat its rules here: which schedules override --episodes_per_trial is
    # envs/meta/schedules.py's business. The placeholder task list only satisfies the constructor.
    return make_schedule(cfg.task_schedule, [{}], cfg.episodes_per_trial, 0, cfg.seed).episodes_per_trial


def make_run_env(
    cfg: Any,
    env_idx: int = 0,
    split: str = "train",
    render_mode: str | None = None,
    training: bool = False,
    evaluation: bool = False,
) -> gym.Env:
    """The env exactly as a run sees it: `make_env` plus, for task schedules, the meta-task wrapper over
    the `split` ("train" or "test") tasks. Actor workers, the evaluator and enjoy.py all build it here, so
    observation augmentation always matches what the policy was trained on. In a run the actor's EnvRunner
    gives every trial its task (`make_task_assigner`, appo/protocol/control.py); the wrapper's own schedule serves
    standalone use (the meta-test, enjoy.py) and sets the trial length. `training`: the actor workers' envs, which
    take the run's training-only settings (Atari's --episodic_life); `evaluation`: the evaluator's env, which takes
    the family's evaluation settings (doom_duel's game against a built-in bot). `cfg` is an appo Cfg."""
    kwargs = env_kwargs(cfg) | training_kwargs(cfg, training) | evaluation_kwargs(cfg, evaluation)
    agent_ids = bool(getattr(cfg, "obs_agent_id", False))
    value_input = str(getattr(cfg, "value_input", "local"))
    env = make_env(cfg.env, cfg.max_episode_steps, render_mode, agent_ids, value_input, **kwargs)
    env = _reward_conditioning(cfg, env)
    if cfg.task_schedule == "none":
        return env
    from appo.envs.meta.wrappers import MetaTaskWrapper

    try:
        _, schedule = _run_schedule(cfg, env, env_idx, split)
    except UnknownEnvError:
        env.close()
        raise
    return MetaTaskWrapper(env, schedule, cfg.task_visibility)


def _reward_conditioning(cfg: Any, env: gym.Env) -> gym.Env:
    """--sparse_reward (the return paid at the episode's end), then, for a reward-conditioned --algo, the command
    appended to the observation (envs/common/reward_conditioning.py); `env` itself otherwise. The cfg says what its
    algorithm takes (`command_dims`, `command_follows`: appo's Cfg reads them from the algorithm's spec)."""
    dims = getattr(cfg, "command_dims", 0)
    if not getattr(cfg, "sparse_reward", False) and not dims:
        return env
    from appo.envs.common.reward_conditioning import CommandObservation, SparseReward

    if getattr(cfg, "sparse_reward", False):
        env = SparseReward(env)
    if dims:
        follow = getattr(cfg, "command_follows", "") or ""
        cap = cfg.max_command_return if follow else float("inf")
        discount = cfg.gamma if follow == "discounted_return_to_go" else 1.0
        env = CommandObservation(env, cfg.command_scale, follow=bool(follow), cap=cap, discount=discount)
    return env


def make_task_assigner(cfg: Any, env: gym.Env, env_idx: int, incarnation: int = 0) -> TaskAssigner | None:
    """The task assigner of env number `env_idx` of a run (`env`: that env, wrappers allowed): the run's train
    tasks and the very schedule `make_run_env` builds for that env (same rng stream), so with the control
    channel all free each env runs the task sequence its wrapper would have drawn; a restarted actor worker's
    (`incarnation` > 0) draws its own sequence (appo/utils/seeding.py). None without a task schedule
    (--task_schedule=none). `cfg` is an appo Cfg."""
    if cfg.task_schedule == "none":
        return None
    from appo.envs.meta.schedules import TaskAssigner

    return TaskAssigner(*_run_schedule(cfg, env, env_idx, "train", incarnation))


def run_tasks(cfg: Any, env: gym.Env) -> list[Task]:
    """The task table of an episodic run (appo/sampling/env_runner.py: MAML), which its control channel's TASK cells
    index: the run's train tasks, then its test tasks (envs.tasks.task_split of --num_train_tasks, --num_test_tasks,
    --seed)."""
    train, test = _run_split(cfg, env)
    return train + test


# One split per run and process: every env of an actor worker (and its task assigner) shares the same task lists
# instead of drawing its own copy (10,000 tabular MDP tasks of 550 values each, drawn for each of 64 envs, held
# 3.5 GB per actor worker and took minutes to draw). The lists are read, never changed.
_SPLITS: dict[tuple[Any, ...], tuple[list[Task], list[Task]]] = {}


def _run_split(cfg: Any, env: gym.Env) -> tuple[list[Task], list[Task]]:
    from appo.envs.meta.tasks import task_split

    family = type(getattr(env, "unwrapped", env))
    key = (family, tuple(sorted(env_kwargs(cfg).items())), cfg.num_train_tasks, cfg.num_test_tasks, cfg.seed)
    if key not in _SPLITS:
        _SPLITS.clear()  # one run per process: keep one split
        _SPLITS[key] = task_split(env, cfg.num_train_tasks, cfg.num_test_tasks, cfg.seed)
    return _SPLITS[key]


def _run_schedule(
    cfg: Any, env: gym.Env, env_idx: int, split: str, incarnation: int = 0
) -> tuple[list[Task], TaskSchedule]:
    """The `split` tasks of a run and the schedule of env `env_idx` over them: the one rule behind the
    wrapper's schedule and the actor's task assigner (of a worker's `incarnation`-th start)."""
    from appo.envs.meta.schedules import make_schedule

    if not is_task_env(env):
        raise UnknownEnvError(
            f"--task_schedule={cfg.task_schedule}: --env={cfg.env} is not a task family "
            f"({', '.join(sorted(PROJECT_ENVS))}); use --task_schedule=none"
        )
    train, test = _run_split(cfg, env)
    if split == "test":
        # The training trial length, not --episodes_per_trial: under per_episode training sees 1-episode
        # trials, and a 2-episode meta-test trial would double the return it reports.
        return test, make_schedule("sequence", test, trial_length(cfg), env_idx, cfg.seed)
    seed = incarnation_seed(cfg.seed, incarnation)
    return train, make_schedule(cfg.task_schedule, train, cfg.episodes_per_trial, env_idx, seed)
