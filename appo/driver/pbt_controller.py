"""The driver's side of population-based training: objectives from the run's statistics, the decisions of
appo/config/pbt.py at each policy's period boundary turned into messages for the learners, every decision appended
to `train_dir/NAME/pbt.jsonl`, and `best_policy.json` kept current (for enjoy.py --policy_index=best).

The population's own state (hyperparameters, next period boundaries, rng) is kept in `pbt_state.json` so that a
resumed run goes on with its schedule: without it the boundaries would restart from 0 env steps and fire at
once on restored env steps with no objectives yet (the period lost), and the rng would replay its draws.
Hyperparameters restored from the learners' checkpoints still arrive via on_hparams and win.

A replacement takes two messages: CopyPolicy to the better policy's learner, which snapshots itself and sends
LoadPolicy to the worse one's learner. The replaced policy's recent returns are forgotten, so that it is
judged on its new weights only.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Any

from appo.config.cfg import Cfg
from appo.config.pbt import Event, Population
from appo.driver.stats import PolicyStats
from appo.protocol.messages import CopyPolicy, SetHyperparams
from appo.utils.logging import log
from appo.utils.paths import best_policy_path, write_text_atomic

PBT_LOG_FILE = "pbt.jsonl"
PBT_STATE_FILE = "pbt_state.json"
MIN_EPISODES = 10  # a policy with fewer recent episodes has no train_return (true_objective) objective yet


class PbtController:
    def __init__(self, cfg: Cfg, exp_dir: Path) -> None:
        self.cfg, self.exp_dir = cfg, Path(exp_dir)
        self.population = Population(cfg)
        self.state_path = self.exp_dir / PBT_STATE_FILE
        self._dirty = False  # the population changed outside tick (on_hparams): save at the next tick
        if cfg.with_pbt:
            self._load()

    def _load(self) -> None:
        if not self.state_path.exists():
            return
        try:
            self.population.load_state_dict(json.loads(self.state_path.read_text()))
        except (OSError, ValueError) as exc:  # JSONDecodeError and UnicodeDecodeError are ValueErrors
            log.warning("PBT: ignoring %s (%s); the PBT schedule starts afresh", self.state_path, exc)
            return
        log.info("PBT: schedule resumed from %s, next boundaries %s", self.state_path, self.population.next_period)

    def save(self) -> None:
        """Write the population's state to pbt_state.json atomically (a crash leaves the old or the new file)."""
        if not self.cfg.with_pbt:
            return
        try:
            write_text_atomic(self.state_path, json.dumps(self.population.state_dict()) + "\n")
        except OSError as exc:  # losing the schedule on a resume is not worth stopping the training for
            log.warning("PBT: could not write %s (%s)", self.state_path, exc)
            return
        self._dirty = False

    def close(self) -> None:
        """The driver is closing: keep the latest state for a resume."""
        self.save()

    def objectives(self, policies: list[PolicyStats]) -> list[float | None]:
        if self.cfg.pbt_target_objective == "eval_return":
            return [p.last_eval.return_mean if p.last_eval is not None else None for p in policies]
        if self.cfg.pbt_target_objective == "true_objective":  # what the env reports (envs/common/episode_end.py)
            return [p.objective_mean() if len(p.objectives) >= MIN_EPISODES else None for p in policies]
        return [p.return_mean() if len(p.returns) >= MIN_EPISODES else None for p in policies]

    def tick(self, policies: list[PolicyStats]) -> list[Any]:
        """Decisions for every policy that crossed a period boundary; returns the messages to send."""
        if not self.cfg.with_pbt:
            return []
        out: list[Any] = []
        boundaries = list(self.population.next_period)
        objectives = self.objectives(policies)
        for pid, p in enumerate(policies):
            if not self.population.due(pid, p.env_steps):
                continue
            event = self.population.decide(pid, p.env_steps, objectives)
            if event is None:
                continue
            self._log(event)
            p.hparams = dict(event.new_hparams)
            if event.kind == "replace":
                assert event.source is not None
                out.append(CopyPolicy(event.source, pid, event.new_hparams))
                p.returns.clear()
                p.objectives.clear()
                p.last_eval = None
            else:
                out.append(SetHyperparams(pid, event.new_hparams))
        # Every decision (and every rng draw) follows a boundary move, so comparing boundaries catches all
        # changes; most ticks change nothing and write nothing.
        if self._dirty or self.population.next_period != boundaries:
            self.save()
        return out

    def on_hparams(self, policy_id: int, hparams: dict[str, float]) -> None:
        """A learner started with these (restored) hyperparameters; they win over pbt_state.json's."""
        if self.population.hparams[policy_id] != hparams:
            self.population.set_hparams(policy_id, hparams)
            self._dirty = True

    def _log(self, event: Event) -> None:
        with open(self.exp_dir / PBT_LOG_FILE, "a") as f:
            f.write(event.to_json() + "\n")
        old = event.old_hparams
        changed = {k: f"{old[k]:.4g}->{v:.4g}" for k, v in event.new_hparams.items() if v != old.get(k)}
        if event.kind == "replace":
            log.info(
                "PBT: policy %d (objective %.2f) replaced by a copy of policy %d (%.2f); hyperparameters %s",
                event.target,
                _num(event.objectives[event.target]),
                event.source,
                _num(event.objectives[event.source]),
                changed or "unchanged",
            )
        else:
            log.info("PBT: policy %d mutated %s", event.target, changed)

    def write_best(self, policies: list[PolicyStats]) -> None:
        """best_policy.json: the policy with the best objective now, and everyone's objective."""
        objectives = self.objectives(policies)
        best = self.population.best_policy(objectives)
        if best is None:
            return
        data = {
            "policy_index": best,
            "objective": self.cfg.pbt_target_objective,
            "value": objectives[best],
            "objectives": objectives,
            "env_steps": [p.env_steps for p in policies],
            "hparams": [p.hparams for p in policies],
            "time": time.time(),
        }
        path = best_policy_path(self.exp_dir)
        write_text_atomic(path, json.dumps(data, indent=2) + "\n")


def _num(value: float | None) -> float:
    return math.nan if value is None else value
