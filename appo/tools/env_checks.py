"""The checks behind `python -m appo.check_env` (appo/check_env.py): an env built as the actor workers build it
(`make_run_env` with the run's cfg, appo/sampling/actor_worker.py) and stepped as they step it, every finding one
line that names the env and what would be valid. Single-agent envs are stepped through gymnasium's API; multi-agent
envs (`AgentEnv`, envs/multi_agent/multi_agent.py) through AgentEnv's rows, with each agent's own returns checked
against its own spaces on the way (`_Recorder`).

Actor workers are spawned processes that receive the run's cfg and build their envs from its --env themselves
(nothing pickles an env): `spawn_problem` builds the env in such a process, so that an env whose module imports only
where the check (or a run's driver) happens to run shows up."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from appo.driver.supported_spaces import describe, first_line
from appo.envs.common.packed_obs import PackDictObs

SPAWN_TIMEOUT = 120.0  # seconds a spawned process may take to start and build the env


@dataclass
class Findings:
    """What the checks found: problems (the env will not train as it is) and notes (worth knowing)."""

    problems: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    steps: int = 0
    episodes: int = 0


class EnvProblem(Exception):
    """A finding that stops the stepping: its message is the line to print (less the env's name)."""


def worker_cfg(name: str, max_episode_steps: int = 0, seed: int = 0) -> Any:
    """The cfg a run of `--env=name` gives its actor workers: the defaults and the env's preset."""
    from appo.config.cfg import merge_cfg

    return merge_cfg({"env": name, "max_episode_steps": max_episode_steps, "seed": seed}, None)


def build_env(cfg: Any) -> Any:
    """The env as actor worker 0 builds its first env (appo/sampling/actor_worker.py `_build_env`)."""
    from appo.envs import make_run_env

    return make_run_env(cfg, 0, training=True)


def build_problem(name: str, exc: BaseException) -> str:
    """The line for an env that cannot be built: the engine's own one-line message where it has one (an unknown
    name, a module that does not import, spaces AgentEnv cannot share), else the exception's first line."""
    from appo.envs import UnknownEnvError
    from appo.envs.multi_agent.agent_spaces import AgentEnvError

    message = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    if isinstance(exc, (UnknownEnvError, AgentEnvError, ValueError)) and message.startswith("--"):
        return message
    return f"--env={name}: cannot be built: {first_line(exc)}"


def obs_problem(space: gym.Space, obs: Any) -> str | None:
    """Why `obs` is not an observation of `space` as the engine stores it (shape, a dtype it cannot cast to the
    space's without losing its kind, non-finite values), or None."""
    if isinstance(space, gym.spaces.Dict):
        if not isinstance(obs, Mapping) or set(obs) != set(space.spaces):
            got = sorted(obs) if isinstance(obs, Mapping) else type(obs).__name__
            return f"an observation with keys {got}, the space has {sorted(space.spaces)}"
        for key, sub in space.spaces.items():
            if (problem := obs_problem(sub, obs[key])) is not None:
                return f"key {key!r}: {problem}"
        return None
    if isinstance(space, gym.spaces.Discrete):
        value = np.asarray(obs)
        ok = value.ndim == 0 and value.dtype.kind in "iu" and space.start <= int(value) < space.start + space.n
        return None if ok else f"an observation {obs!r}, the space is {describe(space)}"
    value = np.asarray(obs)
    if value.shape != space.shape:
        return f"an observation of shape {value.shape}, the space says {space.shape}"
    if not np.can_cast(value.dtype, space.dtype, "same_kind"):
        return f"an observation of dtype {value.dtype}, the space says {space.dtype}"
    if value.dtype.kind == "f" and not np.all(np.isfinite(value)):
        return "an observation with non-finite values"
    return None


def step_problem(reward: Any, terminated: Any, truncated: Any) -> str | None:
    if np.ndim(reward) != 0 or not math.isfinite(float(reward)):
        return f"a reward of {reward!r}, where a finite number is needed"
    if np.ndim(terminated) != 0 or np.ndim(truncated) != 0:
        return f"terminated={terminated!r}, truncated={truncated!r}, where two booleans are needed"
    return None


def _returns(call: str, out: Any, count: int) -> tuple:
    if not isinstance(out, tuple) or len(out) != count:
        got = f"{len(out)} values" if isinstance(out, tuple) else f"a {type(out).__name__}"
        what = "(observation, info)" if count == 2 else "(observation, reward, terminated, truncated, info)"
        raise EnvProblem(f"{call} returned {got}; gymnasium's API returns {count}: {what}")
    return out


def _sample(space: gym.Space) -> Any:
    """An action as the actor workers pass it: Box actions float32 clipped to the box, Discrete ones an int64."""
    if isinstance(space, gym.spaces.Box):
        return np.clip(space.sample().astype(np.float32), space.low, space.high)
    return np.int64(space.sample()) if isinstance(space, gym.spaces.Discrete) else space.sample()


def same_obs(a: Any, b: Any) -> bool:
    if isinstance(a, Mapping):
        return isinstance(b, Mapping) and set(a) == set(b) and all(same_obs(a[k], b[k]) for k in a)
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def step_single(env: Any, steps: int, seed: int, found: Findings) -> Any:
    """Reset and step a single-agent env `steps` times with random actions, resetting as its episodes end; returns
    the first observation of reset(seed) (for the seeding check). A Dict env is checked on its own dict observations
    (under make_env's packing wrapper)."""
    raw = env.env if isinstance(env, PackDictObs) else env
    space = raw.observation_space
    first, info = _returns("reset()", raw.reset(seed=seed), 2)
    if (problem := obs_problem(space, first)) is not None:
        raise EnvProblem(f"reset() returned {problem}")
    if not isinstance(info, dict):
        raise EnvProblem(f"reset() returned an info of type {type(info).__name__}, where a dict is needed")
    env.action_space.seed(seed)
    for _ in range(steps):
        obs, reward, terminated, truncated, info = _returns("step()", raw.step(_sample(env.action_space)), 5)
        found.steps += 1
        problem = obs_problem(space, obs) or step_problem(reward, terminated, truncated)
        if problem is None and not isinstance(info, dict):
            problem = f"an info of type {type(info).__name__}, where a dict is needed"
        if problem is not None:
            raise EnvProblem(f"step() at step {found.steps} returned {problem}")
        if terminated or truncated:
            found.episodes += 1
            obs, _ = _returns("reset()", raw.reset(), 2)
            if (problem := obs_problem(space, obs)) is not None:
                raise EnvProblem(f"reset() after {found.episodes} episodes returned {problem}")
    return first


class _Recorder:
    """A multi-agent env's inner Parallel env, checking each agent's returns against its own spaces before AgentEnv
    reads them (AgentEnv pads, one-hots and packs them, which can hide a wrong shape)."""

    def __init__(self, env: Any, spaces: dict[str, gym.Space]) -> None:
        self._env, self._spaces = env, spaces

    def __getattr__(self, name: str) -> Any:
        return getattr(self._env, name)

    def _agents(self, call: str, obs: Any) -> None:
        if not isinstance(obs, Mapping):
            raise EnvProblem(f"{call} returned observations of type {type(obs).__name__}, where a dict by agent")
        for agent, value in obs.items():
            if agent in self._spaces and (problem := obs_problem(self._spaces[agent], value)) is not None:
                raise EnvProblem(f"{call} returned, for agent {agent!r}, {problem}")

    def reset(self, *args: Any, **kwargs: Any) -> tuple:
        out = _returns("reset()", self._env.reset(*args, **kwargs), 2)
        self._agents("reset()", out[0])
        return out

    def step(self, actions: Any) -> tuple:
        out = _returns("step()", self._env.step(actions), 5)
        self._agents("step()", out[0])
        for agent, reward in out[1].items() if isinstance(out[1], Mapping) else ():
            if np.ndim(reward) != 0:
                raise EnvProblem(f"step() returned, for agent {agent!r}, a reward of {reward!r}: a number is needed")
        return out


def step_agents(env: Any, steps: int, seed: int, found: Findings) -> Any:
    """The multi-agent stepping of the actor workers (appo/sampling/agent_split.py): one random action per row,
    games reset when over; returns the rows of reset(seed)."""
    env.env = _Recorder(env.env, {agent: spaces[0] for agent, spaces in env.raw_spaces.items()})
    first, active = env.reset(seed=seed)
    env.action_space.seed(seed)
    for _ in range(steps):
        actions = np.array([_sample(env.action_space) for _ in range(env.num_agents)])
        _, _, _, _, active, over, _ = env.step(actions, active)
        found.steps += 1
        if over:
            found.episodes += 1
            env.check_spaces()  # as the workers do before every new game
            _, active = env.reset()
    return first


def seed_note(name: str, cfg: Any, first: Any, seed: int) -> str | None:
    """A note when a second env, built alike, gives another first observation from reset(seed): the env does not
    draw its randomness from reset's seed."""
    twin = build_env(cfg)
    try:
        again = (twin.env if isinstance(twin, PackDictObs) else twin).reset(seed=seed)[0]
    finally:
        twin.close()
    if same_obs(first, again):
        return None
    return (
        f"--env={name}: two envs reset with seed={seed} gave two different first observations: the env does not seem "
        "to draw its randomness from reset's seed (super().reset(seed=seed), then self.np_random), so runs will not "
        "repeat"
    )


def render_note(name: str, cfg: Any) -> str | None:
    """A note when the env cannot give enjoy.py's videos (--save_video) their frames: built with
    render_mode="rgb_array" as enjoy.py builds it, reset, its render() must return an image (appo/tools/video.py)."""
    from appo.envs import make_run_env

    why = f"--env={name}: enjoy.py --save_video cannot record it"
    try:
        env = make_run_env(cfg, render_mode="rgb_array")
        try:
            env.reset(seed=0)
            frame = env.render()
        finally:
            env.close()
    except Exception as exc:  # noqa: BLE001 (any failure is the finding)
        return f"{why}: with render_mode='rgb_array', {first_line(exc)}"
    shape = getattr(frame, "shape", None)
    if shape is not None and (len(shape) == 2 or (len(shape) == 3 and shape[2] in (3, 4))):
        return None
    got = type(frame).__name__ if shape is None else f"an array of shape {tuple(shape)}"
    return f"{why}: with render_mode='rgb_array', render() returned {got}, not an RGB frame (H, W, 3)"


def spawned_build(name: str, max_episode_steps: int, seed: int, conn: Any) -> None:
    """In a spawned process: build the env as an actor worker would (its reset and steps are checked in the process
    that started this one); sends None or the error's line."""
    try:
        build_env(worker_cfg(name, max_episode_steps, seed)).close()
        conn.send(None)
    except BaseException as exc:  # noqa: BLE001 (any failure is the finding)
        conn.send(first_line(exc).replace(f"--env={name}: ", "", 1))


def spawn_problem(name: str, max_episode_steps: int, seed: int, timeout: float = SPAWN_TIMEOUT) -> str | None:
    """Build the env in a spawned process, as an actor worker does: the problem's line, or None."""
    from appo.protocol.processes import spawn_context

    ctx = spawn_context()
    here, there = ctx.Pipe(duplex=False)
    process = ctx.Process(target=spawned_build, args=(name, max_episode_steps, seed, there), daemon=True)
    why = "cannot be built in a fresh process (actor workers are spawned and build their envs from --env themselves)"
    hint = "the env's module must import there as well: on PYTHONPATH or installed, needing nothing set up beforehand"
    try:
        process.start()
        there.close()
        if not here.poll(timeout):
            return f"--env={name}: {why}: no answer in {timeout:g} s"
        try:
            error = here.recv()
        except EOFError:  # it died without a word (a crash in native code, os._exit)
            process.join(5)
            return f"--env={name}: {why}: the process exited with code {process.exitcode}"
    except Exception as exc:  # noqa: BLE001 (a process that cannot start, a pipe that breaks)
        return f"--env={name}: {why}: {first_line(exc)}"
    finally:
        process.join(5)
        if process.is_alive():
            process.kill()
            process.join()
    return None if error is None else f"--env={name}: {why}: {error}; {hint}"
