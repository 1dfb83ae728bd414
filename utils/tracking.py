"""Experiment tracking with Weights & Biases (`--with_wandb`; the optional extra: pip install 'appo[wandb]').

One wandb run per policy, named <experiment>_p<k>, grouped by --wandb_group (default: the experiment), with the
run's cfg as its config. Every scalar the driver writes to a policy's tensorboard file goes to the policy's wandb run
too, at the same env steps: WandbMirror wraps the tensorboard writer (add_scalar, flush and close as tensorboardX's)
and logs one wandb row per env step, `env_steps` the x-axis of every metric. The runs' ids are kept in
train_dir/NAME/wandb_ids.json, so a resumed training run continues the same wandb runs, and enjoy.py --save_video
logs its mp4 into them (log_video). wandb is imported only under --with_wandb (here, and by appo/config/verify.py
to check that it imports)."""

from __future__ import annotations

import dataclasses
import json
import os
import secrets
import string
import sys
from pathlib import Path
from typing import Any

from appo.utils.logging import first_line, log
from appo.utils.paths import write_text_atomic

IDS_FILE = "wandb_ids.json"  # {"<policy id>": "<wandb run id>"} in the run's folder
STEP = "env_steps"  # the x-axis of every metric, logged with each row
INSTALL = "pip install 'appo[wandb]'"


class TrackingError(Exception):
    """wandb missing, or a wandb run that cannot be opened: one line, naming the flag."""


def import_wandb() -> Any:
    try:
        import wandb
    except ImportError as exc:
        raise TrackingError(f"--with_wandb: cannot import wandb ({first_line(exc)}); {INSTALL}") from None
    return wandb


def new_run_id() -> str:
    """Eight random lowercase letters and digits, as wandb's own ids."""
    return "".join(secrets.choice(string.ascii_lowercase + string.digits) for _ in range(8))


def run_ids(exp_dir: Path, num_policies: int) -> list[str]:
    """Every policy's wandb run id from the run's wandb_ids.json; ids missing there are made and written first."""
    path = exp_dir / IDS_FILE
    try:
        ids = json.loads(path.read_text()) if path.is_file() else {}
    except (OSError, json.JSONDecodeError) as exc:
        raise TrackingError(f"--with_wandb: {path} is unreadable ({first_line(exc)}); remove it") from None
    if not isinstance(ids, dict):
        raise TrackingError(f"--with_wandb: {path} is not a JSON object; remove it")
    missing = [str(pid) for pid in range(num_policies) if str(pid) not in ids]
    if missing:
        ids.update({pid: new_run_id() for pid in missing})
        exp_dir.mkdir(parents=True, exist_ok=True)
        write_text_atomic(path, json.dumps(ids, indent=2) + "\n")
    return [str(ids[str(pid)]) for pid in range(num_policies)]


def open_run(wandb: Any, cfg: Any, exp_dir: Path, policy_id: int, run_id: str, job_type: str = "train") -> Any:
    """The policy's wandb run, resumed by id if it exists (wandb files under train_dir/NAME/ unless WANDB_DIR says
    otherwise); `env_steps` made the x-axis of every metric. Training passes the cfg as the run's config."""
    tags = [t.strip() for t in cfg.wandb_tags.split(",") if t.strip()]
    try:
        run = wandb.init(
            project=cfg.wandb_project,
            group=cfg.wandb_group or cfg.experiment,
            name=f"{cfg.experiment}_p{policy_id}",
            id=run_id,
            resume="allow",
            tags=tags or None,
            job_type=job_type,
            config={**dataclasses.asdict(cfg), "policy_id": policy_id} if job_type == "train" else None,
            dir=None if os.environ.get("WANDB_DIR") else str(exp_dir),
            reinit="create_new",  # one run per policy in this process, next to any run of the caller's own
            # The driver's console goes to the first policy's run only (every run would get the same lines).
            settings=wandb.Settings(console="auto" if policy_id == 0 and job_type == "train" else "off"),
        )
        run.define_metric(STEP)
        run.define_metric("*", step_metric=STEP)
    except Exception as exc:  # no API key, no network in online mode, a bad project name: all one line
        raise TrackingError(f"--with_wandb: wandb.init of policy {policy_id} failed ({first_line(exc)})") from None
    return run


class WandbMirror:
    """A tensorboard writer whose scalars also go to a wandb run: the same add_scalar(tag, value, step), flush() and
    close(). Scalars are gathered by step and logged as one row per step (`env_steps` plus the tags), in step
    order, at flush(), at close(), or when a step beyond every gathered one starts; a wandb failure is logged once
    and ends the mirroring, never the training."""

    def __init__(self, writer: Any, run: Any) -> None:
        self.writer = writer
        self.run = run
        self.rows: dict[int, dict[str, float]] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.writer.add_scalar(tag, value, step)
        if self.run is None:
            return
        step = int(step)
        if self.rows and step > max(self.rows):
            self._log_rows()
        self.rows.setdefault(step, {})[tag] = float(value)

    def _log_rows(self) -> None:
        rows, self.rows = self.rows, {}
        if self.run is None:
            return
        try:
            for step in sorted(rows):
                self.run.log({STEP: step, **rows[step]})
        except Exception as exc:
            log.warning("wandb: logging failed (%s); tensorboard only from here on", first_line(exc))
            self._finish()

    def flush(self) -> None:
        self.writer.flush()
        self._log_rows()

    def _finish(self) -> None:
        run, self.run = self.run, None
        if run is not None:
            try:
                run.finish()
            except Exception as exc:
                log.warning("wandb: finishing run %s failed (%s)", getattr(run, "id", "?"), first_line(exc))

    def close(self) -> None:
        try:
            self._log_rows()
            self._finish()
        finally:
            self.writer.close()


def mirror_writers(writers: list[Any], cfg: Any, exp_dir: Path) -> list[WandbMirror]:
    """The policies' tensorboard writers, each mirrored into its policy's wandb run. A run that cannot be opened
    is a usage error: the runs opened so far are finished, every writer closed, one `error:` line, exit 2."""
    mirrors: list[WandbMirror] = []
    try:
        wandb = import_wandb()
        ids = run_ids(exp_dir, len(writers))
        for pid, writer in enumerate(writers):
            mirrors.append(WandbMirror(writer, open_run(wandb, cfg, exp_dir, pid, ids[pid])))
            log.info("wandb: policy %d logs to run %s (project %s)", pid, ids[pid], cfg.wandb_project)
    except TrackingError as exc:
        for mirror in mirrors:
            mirror._finish()
        for writer in writers:
            writer.close()
        print(f"error: {exc}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    return mirrors


def log_video(cfg: Any, exp_dir: Path, policy_id: int, path: Path, env_steps: int) -> str:
    """An mp4 written by enjoy.py --save_video, logged as `video/enjoy` at `env_steps` into the policy's wandb run
    (resumed by the id in wandb_ids.json, made there if training never opened one); returns the run id. The file is
    passed as it is (wandb.Video of a path needs no moviepy)."""
    wandb = import_wandb()
    run_id = run_ids(exp_dir, cfg.num_policies)[policy_id]
    run = open_run(wandb, cfg, exp_dir, policy_id, run_id, job_type="enjoy")
    try:
        run.log({STEP: int(env_steps), "video/enjoy": wandb.Video(str(path), format="mp4")})
    except Exception as exc:
        raise TrackingError(f"--with_wandb: logging {path} to wandb run {run_id} failed ({first_line(exc)})") from None
    finally:
        run.finish()
    return run_id
