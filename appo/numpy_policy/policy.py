"""A trained policy in one's own code, numpy only: `appo.load_policy(...)` returns a `Policy`.

    policy = appo.load_policy("train_dir/my_run")            # or a checkpoint .pth, or an exported .npz
    env = policy.make_env()                                   # the env as the run saw it (tasks, command, trials)
    obs, _ = env.reset(seed=0)
    state = policy.initial_state()                            # None for a feed-forward policy
    action, state = policy.act(obs, state)                    # deterministic unless deterministic=False

`act` takes one observation or a batch [B, *obs_shape] and gives env-ready actions (Box: clipped to the action
box, in its shape; Discrete: ints), and the recurrent state after the step. The observation normaliser is inside.
Reset the state (`initial_state`) when an episode of the env from `make_env` ends: for a task family that env's
episode is a whole trial, so the state is carried across the trial's episodes, as in training. The arithmetic is
the numpy pass the actor workers act with (appo/numpy_policy/), so nothing here imports torch.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from appo.config.algorithms.maml import inner_lr
from appo.numpy_policy.registry import current_description, make_numpy_pass
from appo.utils import packed_layout


class Policy:
    """See the module's docstring. `meta` is the policy file's (appo/numpy_policy/policy_file.py), `state` the
    model's state dict as numpy arrays, `arrays` the action bounds."""

    def __init__(
        self, meta: dict[str, Any], state: dict[str, np.ndarray], arrays: dict[str, np.ndarray], seed: int = 0
    ) -> None:
        meta = {**meta, "model": current_description(meta["model"])}  # an old file's pass kind read as today's
        self.meta, self.state, self.arrays, self.seed = meta, state, arrays, seed
        self.net = make_numpy_pass(meta["model"], seed)
        self.net.load_state(state)
        self.observation_shape = tuple(meta["observation_shape"])
        # A Dict policy's packed layout (appo/utils/packed_layout.py), or None.
        self.packed_layout = packed_layout.as_layout(meta["observation_keys"]) if meta.get("observation_keys") else None
        self.action = meta["action"]
        self.discrete = self.action["type"] == "Discrete"
        if not self.discrete:
            self.low, self.high = arrays["action/low"], arrays["action/high"]
        self.source = meta.get("source", {})

    # --- what a user reads ------------------------------------------------------------------------------------
    @property
    def kind(self) -> str:
        return self.net.kind

    @property
    def state_size(self) -> int:
        """Floats of recurrent state per env; 0 for a feed-forward policy."""
        return self.net.state_size

    @property
    def cfg(self) -> Any:
        """The run's cfg (an appo Cfg: env, task split, trial length ...)."""
        from appo.config.cfg import Cfg, make_cfg

        known = {f.name for f in dataclasses.fields(Cfg)}
        return make_cfg({k: v for k, v in self.meta["cfg"].items() if k in known})

    @property
    def command(self) -> list[float] | None:
        """A reward-conditioned policy's saved command (desired return, horizon), else None."""
        command = getattr(self.net, "command", None)
        return None if command is None else [float(v) for v in command]

    def initial_state(self, batch: int | None = None) -> np.ndarray | None:
        """Zeros of the recurrent state for one env ([S]) or `batch` envs ([batch, S]); None without a core."""
        if not self.state_size:
            return None
        return np.zeros(self.state_size if batch is None else (batch, self.state_size), dtype=np.float32)

    # --- acting -----------------------------------------------------------------------------------------------
    def act(
        self, obs: Any, state: np.ndarray | None = None, deterministic: bool = True
    ) -> tuple[Any, np.ndarray | None]:
        """(env-ready action(s), the recurrent state after this step) for one observation or a batch. `state`:
        the state before the step (None: the initial state). A Dict policy takes a dict of arrays by key (as the env
        gives them) or packed observations (as `make_env`'s env gives them)."""
        layout = self.packed_layout
        if layout and isinstance(obs, dict):
            obs = packed_layout.pack(obs, layout, self.observation_shape[0])
        # Packed Dict observations are bytes: they keep their dtype, as every float view of them would change.
        x = np.asarray(obs, dtype=np.uint8 if layout else np.float32)
        single = x.shape == self.observation_shape
        if not single and x.shape[1:] != self.observation_shape:
            raise ValueError(f"observation of shape {x.shape}: the policy takes {self.observation_shape} or [B, *that]")
        x = x[None] if single else x
        if self.state_size:
            states = self.initial_state(len(x)) if state is None else np.asarray(state, dtype=np.float32)
            states = states.reshape(len(x), self.state_size)
        else:
            states = None
        out = self.net.act(x, states, deterministic)
        actions = self._env_actions(out.actions)
        new_state = None if out.rnn_states is None or not self.state_size else out.rnn_states
        if single:
            return actions[0] if not self.discrete else int(actions[0]), (None if new_state is None else new_state[0])
        return actions, new_state

    def _env_actions(self, actions: np.ndarray) -> np.ndarray:
        if self.discrete:  # the policy's index 0..n-1, plus the space's start (Discrete(n, start=k))
            return actions[:, 0].astype(np.int64) + int(self.action.get("start", 0))
        shaped = actions.reshape(len(actions), *self.action["shape"])
        return np.clip(shaped, self.low, self.high)

    # --- the env it was trained on ------------------------------------------------------------------------------
    def make_env(self, render_mode: str | None = None, task: int | None = None) -> Any:
        """The run's env as enjoy.py builds it: for a task family over the held-out test tasks, trials of the
        run's length, tasks drawn with the run's seed (or always test task `task`; for a run without a schedule,
        MAML-TRPO's, test task `task` of the family's seeded split, as its meta-test); a reward-conditioned policy's
        env starts its episodes from the saved command. Needs the env's packages (MuJoCo ...), not torch."""
        from appo.envs import make_run_env, trial_length

        cfg = self.cfg
        meta = cfg.task_schedule != "none"
        env = make_run_env(cfg, split="test" if meta else "train", render_mode=render_mode)
        if meta:
            from appo.envs.meta.schedules import SequenceSchedule, TaskSchedule

            tests = env.schedule.tasks
            if task is None:
                env.schedule = TaskSchedule(tests, trial_length(cfg), cfg.seed)
            else:
                env.schedule = SequenceSchedule([tests[task]], trial_length(cfg))
        elif task is not None:  # a run without a schedule (MAML-TRPO's): held-out test task `task` of the family
            from appo.envs.meta.tasks import task_family, task_split

            tests = task_split(env, cfg.num_train_tasks, cfg.num_test_tasks, cfg.seed)[1]
            task_family(env).set_task(tests[task])
        if self.command is not None:
            env.get_wrapper_attr("set_default_command")(self.command)
        return env

    def evaluate(self, env: Any = None, episodes: int = 5, seed: int | None = None) -> list[float]:
        """Deterministic episodes as enjoy.py plays them: on `env` (default: `make_env()`), the first reset with
        `seed` (default: the run's), later ones continuing the env's generator; a task family's trial counts as its
        episodes (rounded up to whole trials). Returns each episode's return."""
        own = env is None
        env = self.make_env() if own else env
        returns: list[float] = []
        if getattr(env, "is_multi_agent", False):  # games: against the env's scripted opponent where it has one
            return self._evaluate_games(env, episodes, seed, own)
        try:
            while len(returns) < episodes:
                first = not returns
                obs, _ = env.reset(seed=(self.meta["cfg"]["seed"] if seed is None else seed) if first else None)
                state, total = self.initial_state(), 0.0
                while True:
                    action, state = self.act(obs, state)
                    obs, reward, terminated, truncated, info = env.step(action)
                    total += float(reward)
                    if terminated or truncated:
                        break
                returns += list(info["trial"]["returns"]) if "trial" in info else [total]
        finally:
            if own:
                env.close()
        return returns

    def _evaluate_games(self, env: Any, episodes: int, seed: int | None, own: bool) -> list[float]:
        """`evaluate` for a multi-agent env (appo/envs/multi_agent.py run_game), as enjoy.py plays its games: the
        first reset with `seed`, later ones continuing the env's generator."""
        from appo.envs.multi_agent.multi_agent import run_game

        first = self.meta["cfg"]["seed"] if seed is None else seed
        state: dict[str, Any] = {}

        def act(obs: np.ndarray, reset: np.ndarray | None) -> np.ndarray:
            before = state.get("rnn")
            if before is not None and (len(before) != len(obs) or reset is None):
                before = None
            if before is not None and reset is not None:
                before[reset] = 0.0
            actions, state["rnn"] = self.act(obs, before)
            return np.asarray(actions).reshape(len(obs), -1)

        try:
            return [run_game(env, act, first if i == 0 else None)[0] for i in range(episodes)]
        finally:
            if own:
                env.close()

    # --- MAML: adaptation to a task ------------------------------------------------------------------------------
    def collect(self, env: Any, episodes: int, seed: int | None = None) -> list[dict[str, np.ndarray]]:
        """Sampled episodes on `env` (feed-forward policies) as `adapt` takes them: obs, actions as sampled (the env
        gets them clipped to its box), rewards; the first reset with `seed`."""
        out = []
        for i in range(episodes):
            obs, _ = env.reset(seed=seed if i == 0 else None)
            record: dict[str, list] = {"obs": [], "actions": [], "rewards": []}
            while True:
                x = np.asarray(obs, dtype=np.float32)[None]
                raw = self.net.act(x, None, deterministic=False).actions
                obs, reward, terminated, truncated, _ = env.step(self._env_actions(raw)[0])
                record["obs"].append(x[0])
                record["actions"].append(raw[0])
                record["rewards"].append(float(reward))
                if terminated or truncated:
                    break
            out.append({k: np.asarray(v) for k, v in record.items()})
        return out

    def adapt(self, episodes: list[dict[str, np.ndarray]], steps: int | None = None, lr: float | None = None) -> Policy:
        """MAML-TRPO's policy after its adaptation step on one task's `episodes` (`collect`): a new Policy.
        `steps` and `lr` default to the run's --num_inner_steps and --fast_lr (appo/numpy_policy/maml_adapt.py)."""
        if self.kind != "maml_mlp":
            raise ValueError(f"adapt: a {self.kind} policy has no adaptation step (MAML-TRPO's policies do)")
        from appo.numpy_policy.maml_adapt import adapt

        cfg = self.cfg
        steps = cfg.num_inner_steps if steps is None else steps
        lr = inner_lr(cfg) if lr is None else lr
        activation = self.meta["model"]["activation"]
        state = adapt(self.state, activation, episodes, lr, steps, cfg.gamma, cfg.gae_lambda)
        return Policy(self.meta, state, self.arrays, self.seed)

    def __repr__(self) -> str:
        where = self.source.get("checkpoint", "?")
        return f"Policy({self.kind}, env={self.meta['cfg'].get('env')}, state_size={self.state_size}, from {where})"
