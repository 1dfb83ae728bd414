"""A split of multi-agent games (appo/envs/multi_agent.py AgentEnv): every agent is a row of the split, and so a
slot of the shared trajectory tensors, exactly as an env of a single-agent run. Game `g` of a split holds rows
[g * k, (g + 1) * k) for k agents per game. The rollout protocol (slots, requests, hand-over, double buffering, the
policies and weight sets per row) is the EnvRunner's, unchanged; what changes is how a step happens (one call per
game for its k rows) and what an agent's episode is:

- an agent's episode is its life in a game: it ends when the agent terminates or is truncated (a done in its row,
  reported with the agent's return and length), even while the others play on;
- a row whose agent is out of the game (it left early, or has not joined yet) steps with reward 0, a zero
  observation and `dones` 1 (nothing bootstraps across it) and `valid` 0: the learner trains on none of its steps;
- a game whose agents are all out is reset within the step; its rows' next observations are the new game's;
- with a centralised value (--value_input) each row's value input (`team_obs`) is written beside its observation,
  read from the game at that same moment (envs/multi_agent/team_value.py).

With several policies every row draws its own policy when its agent's episode ends (so a population mixes within
one game); a row whose next policy differs changes at the rollout's end, where its whole game is cut like a time
limit and reset (appo/sampling/env_runner.py `_finish_rollout`).

Self-play against past selves (--selfplay_pool, appo/learning/snapshot_pool.py): at each game's start, with
probability --selfplay_pool_prob (once the pool holds a snapshot), one agent of the game, drawn uniformly among those
in it from its start, plays its row's policy (the policy of the rollout that plays the game) and every other agent a
snapshot of that policy drawn uniformly from its pool. A snapshot's row is an opponent, not a learner: its weight set
acts (`slot_policy`, switched at the game's start, even mid-rollout), its steps are `valid` 0 and carry the newest
version of the row's own policy (whose learner gets the row: they must not count as policy lag, nor make the row's
trajectory stale), and its episodes are not reported. The learner's episode in such a game is reported as usual and
as a game against the pool (selfplay/pool_* summaries)."""

from __future__ import annotations

from typing import Any

import numpy as np

from appo.envs.multi_agent.multi_agent import AgentEnvError
from appo.envs.multi_agent.team_value import fill_rows
from appo.protocol.control import FREE, weight_set_of
from appo.sampling.env_runner import EnvRunner
from appo.sampling.split_envs import FinishedEpisode


class AgentRow:
    """Row `index` of a game, as the runner sees a single env: spaces only (resets and steps go by game)."""

    def __init__(self, game: Any, index: int) -> None:
        self.game, self.index = game, index
        self.action_space = game.action_space
        self.observation_space = game.observation_space
        self.unwrapped = self

    def close(self) -> None:
        pass


class AgentEnvRunner(EnvRunner):
    """EnvRunner over multi-agent games (see the module docstring); `agents_per_env` rows per game."""

    def __init__(self, *args: Any, agents_per_env: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.k = agents_per_env
        self.num_games = self.num_envs // self.k
        self.games: list[Any] = []
        self.active = np.zeros(self.num_envs, dtype=bool)  # the row's agent acts at the next step
        self.fresh: dict[int, np.ndarray] = {}  # game -> its observations after a reset not yet read by every row
        self.valid = self.buf.get("valid")
        # A centralised value's input (--value_input: envs/multi_agent/team_value.py), written beside every
        # observation for a whole step at once (`_write_team`); `team_state` holds each game's global state now
        # (--value_input=state), read right after its every reset and step.
        self.team_obs = self.buf.get("team_obs")
        self.team_state: np.ndarray | None = None
        self.opponent = np.full(self.num_envs, FREE, dtype=np.int64)  # a snapshot's weight set acting for the row
        self.step_opponent = self.opponent.copy()  # ... as it was when the current step began
        self.pool_versions = self.control.get("snapshot_versions") if self.control is not None else None
        # The newest version of each policy its learner rows here acted with: what a snapshot's step carries.
        self.latest_version = np.zeros(self.cfg.num_policies, dtype=np.int64)

    def _make_envs(self) -> list[Any]:
        self.games = [self._make_game(g) for g in range(self.num_games)]
        team = self.games[0].team
        if team is not None and team.kind == "state":
            self.team_state = np.zeros((self.num_games, team.shared_size), dtype=np.float32)
        return [AgentRow(game, j) for game in self.games for j in range(self.k)]

    def _make_game(self, g: int) -> Any:
        return self.env_fn(self.first_env // self.k + g)  # the run-wide game index

    def _rows(self, g: int) -> slice:
        return slice(g * self.k, (g + 1) * self.k)

    def _reset_game(self, g: int, seed: int | None = None, policies: np.ndarray | None = None) -> np.ndarray:
        """Start game `g`: its rows' first observations (zeros for agents not in it) and which rows act.
        `policies`: each row's policy in the new game (default: the policies of the rollout under way)."""
        self.games[g].check_spaces()  # a contract error (AgentEnvError) names the agent
        obs, active = self.games[g].reset(seed=seed)
        self.active[self._rows(g)] = active
        if self.pool_versions is not None:
            self._draw_opponents(g, self.env_policy if policies is None else policies)
        return self._note_team(g, _zero_inactive(obs, active).astype(self.obs_dtype))

    def _note_team(self, g: int, obs: np.ndarray) -> np.ndarray:
        """Game `g`'s rows now show `obs` (returned): with --value_input=state its global state is read now (the env's
        after this very reset or step)."""
        if self.team_state is not None:
            self.team_state[g] = self.games[g].team.shared(obs)
        return obs

    def _write_team(self, t: int) -> None:
        """Every row's value input at step `t` of the rollout, beside its observation there (the games as they are
        now): the game's observation rows or global state, the row's one-hot, the game's clock."""
        if self.team_obs is None:
            return
        slots = slice(self.first, self.first + self.num_envs)
        shared = self.team_state
        if shared is None:
            shared = self.buf["obs"][slots, t].reshape(self.num_games, -1)
        clocks = np.array([game.steps for game in self.games], dtype=np.float32)
        fill_rows(self.team_obs[slots, t], shared, clocks, self.k)

    def _draw_opponents(self, g: int, policies: np.ndarray) -> None:
        """Whether game `g` is played against the pool, and with which snapshots (see the module docstring). The
        learner is one of the agents in the game from its start (any agent where none is yet)."""
        rows = self._rows(g)
        self.opponent[rows] = FREE
        if self.rng.random() < self.cfg.selfplay_pool_prob:
            present = np.flatnonzero(self.active[rows])
            candidates = present if len(present) else np.arange(self.k)
            learner = g * self.k + int(self.rng.choice(candidates))
            policy = int(policies[learner])
            filled = np.flatnonzero(np.asarray(self.pool_versions[policy]) > 0)
            if len(filled):
                for i in range(rows.start, rows.stop):
                    if i != learner:
                        self.opponent[i] = weight_set_of(self.cfg, policy, int(self.rng.choice(filled)))
        if self.slot_policy is not None and self.first >= 0:  # from the game's next step on
            self.slot_policy[self.first + rows.start : self.first + rows.stop] = self._acting(rows)

    def _acting(self, rows: slice) -> np.ndarray:
        """The weight set acting for each of `rows`: its snapshot where it plays one, else its own."""
        opponent = self.opponent[rows]
        return np.where(opponent != FREE, opponent, self.env_weights[rows])

    def _reset_env(self, i: int, trial: dict | None = None, seed: int | None = None) -> np.ndarray:
        """Rows are reset by game: the game's first row resets it, the others read its observations."""
        g, j = divmod(i, self.k)
        if j == 0 or g not in self.fresh:
            self.fresh[g] = self._reset_game(g, seed)
        return self.fresh[g][j]

    def _step_envs(
        self, actions: np.ndarray, t: int
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict[int, dict], list[int]]:
        n, k = self.num_envs, self.k
        rewards = np.zeros(n, dtype=np.float32)
        dones = np.zeros(n, dtype=np.float32)
        truncs = np.zeros(n, dtype=np.float32)
        self.continues = np.zeros(n, dtype=bool)
        self.ended = np.zeros(n, dtype=bool)  # agents whose episode ended at this step (reported)
        self.end_objective = np.full(n, np.nan)  # ... and their true objectives, where their infos give one
        self.acted = self.active.copy()
        self.step_opponent = self.opponent.copy()
        learning = self.step_opponent == FREE
        if self.pool_versions is not None:  # (only a self-play pool's rows act with other weights than their own)
            versions = self.buf["policy_versions"][self.first : self.first + n, t]  # a view of the buffer
            np.maximum.at(self.latest_version, self.env_policy[learning], versions[learning])
            if not learning.all():  # a snapshot's step: the newest version of its row's policy (whose learner gets it)
                latest = self.latest_version[self.env_policy[~learning]]
                versions[~learning] = np.where(latest > 0, latest, versions[~learning])
        failed: list[int] = []
        obs_out = self.buf["obs"]
        for g, game in enumerate(self.games):
            rows, first = self._rows(g), self.first + g * k
            acted = self.acted[rows]
            try:
                obs, r, term, trunc, after, over, infos = game.step(actions[rows], acted)
            except AgentEnvError:
                raise  # the env breaks its contract: the run stops with the message, which names the agent
            except Exception as exc:  # a broken env must not take the worker down: rebuild it, cut every agent
                obs_out[first : first + k, t + 1] = self._recover_env(g * k, exc)
                dones[rows] = truncs[rows] = 1.0
                failed += range(g * k, (g + 1) * k)
                if self.final_obs is not None:
                    self.final_obs[first : first + k, t] = self.missing_obs
                continue
            ended = acted & (term | trunc)
            self.ended[rows] = ended
            if ended.any():
                self.end_objective[rows] = game.objectives(infos)
            rewards[rows] = r
            dones[rows] = ended | ~acted  # a row out of the game: nothing bootstraps across its steps
            truncs[rows] = ended & trunc & ~term
            if self.final_obs is not None:
                for j in np.flatnonzero(ended):
                    self.final_obs[first + j, t] = obs[j]
            if over:
                obs = self._reset_game(g)
            else:
                self.active[rows] = after
                obs = self._note_team(g, _zero_inactive(obs, after))
            obs_out[first : first + k, t + 1] = obs
        self._write_team(t + 1)
        if self.valid is not None:
            self.valid[self.first : self.first + n, t] = self.acted & learning
        return rewards, dones, truncs, {}, failed

    def _recover_env(self, i: int, exc: Exception) -> np.ndarray:
        """Rebuild the game of row `i` (its error logged once) and return its rows' first observations."""
        self._note_env_error(i, exc)
        g = i // self.k
        try:
            self.games[g].close()
        except Exception:  # the broken game may not even close; it is replaced anyway
            pass
        self.games[g] = self._make_game(g)
        self.envs[self._rows(g)] = [AgentRow(self.games[g], j) for j in range(self.k)]
        return self._reset_game(g)

    def _rebuilt_with(self, i: int) -> range:
        """The game of row `i` is rebuilt: each of its rows starts anew."""
        g = i // self.k
        return range(g * self.k, (g + 1) * self.k)

    def _record_episodes(
        self, rewards: np.ndarray, dones: np.ndarray, ends: dict[int, dict], failed: list[int]
    ) -> None:
        """As the EnvRunner's, with an agent's life as its episode: only rows that acted count a step, and an
        episode ends where its agent's did (or where its game failed, not reported)."""
        self.ep_returns += rewards
        self.ep_lengths += self.acted
        self.episode_count[dones > 0] += 1  # learning episodes (episode ids): each step out of the game is one
        ended = self.ended.copy()
        ended[failed] = True
        against_pool = (self.step_opponent != FREE).reshape(-1, self.k).any(axis=1).repeat(self.k)
        for i in np.flatnonzero(ended):
            if int(i) not in failed and self.step_opponent[i] == FREE:  # (a snapshot's episode is not a result)
                objective = float(self.end_objective[i])
                self.finished.append(
                    FinishedEpisode(
                        float(self.ep_returns[i]),
                        int(self.ep_lengths[i]),
                        int(self.env_policy[i]),
                        true_objective=None if np.isnan(objective) else objective,
                        agent=str(self.games[i // self.k].agents[i % self.k]),
                        vs_pool=bool(against_pool[i]),
                    )
                )
            self.next_policy[i], self.next_weights[i] = self._assigned(int(i), self._draw(int(i)))
        self.ep_returns[ended] = 0.0
        self.ep_lengths[ended] = 0

    def _cut_episode(self, i: int) -> None:
        """Row `i` changes policy at the rollout's end: its whole game is cut there like a time limit and reset
        (once, whichever of its rows asks)."""
        g = i // self.k
        if g in self.fresh:
            return
        T, rows = self.cfg.rollout, self._rows(g)
        for slot in range(self.first + rows.start, self.first + rows.stop):
            if self.buf["dones"][slot, T - 1] == 0:
                self.buf["dones"][slot, T - 1] = 1.0
                self.buf["truncated"][slot, T - 1] = 1.0
                if self.final_obs is not None:
                    self.final_obs[slot, T - 1] = self.buf["obs"][slot, T]
        self.episode_count[rows] += 1
        self.fresh[g] = self.next_obs[rows] = self._reset_game(g, policies=self.next_policy)  # the next rollout's
        self.next_rnn[rows] = 0.0
        self.ep_returns[rows] = 0.0
        self.ep_lengths[rows] = 0

    def _start_rollout(self) -> list[Any]:
        self.fresh.clear()  # (games cut at the last rollout's end)
        msgs = super()._start_rollout()
        if not self.is_parked:
            self._write_team(0)
        if self.slot_policy is not None and not self.is_parked and (self.opponent != FREE).any():
            self.slot_policy[self.first : self.first + self.num_envs] = self._acting(slice(0, self.num_envs))
        return msgs

    def decorrelate(self, seconds: float) -> None:
        import time

        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for g, game in enumerate(self.games):
                rows = self._rows(g)
                acts = np.array([game.action_space.sample() for _ in range(self.k)])
                obs, _, _, _, after, over, _ = game.step(acts, self.active[rows])
                self.active[rows] = after
                self.next_obs[rows] = self._reset_game(g) if over else self._note_team(g, _zero_inactive(obs, after))
        self.ep_returns[:] = 0.0
        self.ep_lengths[:] = 0
        self.buf["obs"][self.first : self.first + self.num_envs, 0] = self.next_obs
        self._write_team(0)

    def close(self) -> None:
        for game in self.games:
            game.close()


def _zero_inactive(obs: np.ndarray, active: np.ndarray) -> np.ndarray:
    """The rows' observations with zeros where the agent is out of the game."""
    return np.where(active.reshape(-1, *[1] * (obs.ndim - 1)), obs, np.zeros((), dtype=obs.dtype))
