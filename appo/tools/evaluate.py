"""Watch a trained policy: `python enjoy.py --experiment=NAME [--checkpoint=best] [--save_video]`.

Everything about the run (env, model, episode limit) comes from the run's saved cfg.json; the flags below
only steer this evaluation. The policy runs on the CPU in this one process, one env, one episode at a time,
deterministically unless `--stochastic`. Each episode's return and length go to stdout, then their mean.

Rendering: a window (`render_mode=human`, needs a display), an mp4 under train_dir/NAME/videos/
(`--save_video`, offscreen `rgb_array` frames written with imageio's ffmpeg plugin), or none (`--no_render`).
The video holds the reset frame of every episode plus one frame per step, so an episode of length L gives
L + 1 frames (within a trial of several episodes the env starts the next episode inside the step that ends one:
L frames for each episode of a trial but its first).

Task envs (runs with a --task_schedule): the env is built exactly as in training (envs.make_run_env), over
the run's held-out test split; each engine episode is a trial of as many episodes on one task as training
used (envs.trial_length: `--episodes_per_trial`, or 1 under per_episode), the recurrent state carried across
them, so a recurrent policy adapts within it."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium as gym
import numpy as np

from appo.config.cfg import Cfg, _f, experiment_dir
from appo.envs import UnknownEnvError, make_run_env, trial_length
from appo.tools.video import VideoError, VideoWriter, new_video_path
from appo.utils.logging import first_line, init_logging, log
from appo.utils.paths import cfg_path, checkpoint_dir

if TYPE_CHECKING:  # torch is imported where it is used, so `enjoy.py --help` and bad-input errors stay fast
    from appo.models.actor_critic import ActorCritic

RENDER_MODES = ("auto", "human", "rgb_array", "none")


@dataclass
class EnjoyCfg(Cfg):
    """The run's cfg plus the flags of one evaluation."""

    policy_index: str = _f("0", "which policy of the run to load (checkpoint_p<index>), or best (best_policy.json)")
    checkpoint: str = _f("latest", "latest, best, or a path to a checkpoint .pth file")
    max_num_episodes: int = _f(5, "episodes to run (rounded up to whole trials for meta-task envs)")
    stochastic: bool = _f(False, "sample actions instead of taking the distribution's mode")
    render_mode: str = _f("auto", "auto, human, rgb_array (video) or none")
    save_video: bool = _f(False, "render offscreen and write an mp4 to train_dir/NAME/videos/")
    no_render: bool = _f(False, "no rendering at all (overrides --render_mode)")
    fps: int = _f(30, "frames per second of the saved video")
    task: str = _f("random", "meta-task envs: index into the run's test task split, or random (one per trial)")


# The training flags enjoy.py takes from its command line; every other setting is the run's (cfg.json), and a typed
# one is ignored with a warning naming it.
TRAINING_FLAGS_HONOURED = (
    "train_dir",
    "experiment",
    "log_level",
    "seed",  # --stochastic's draws
    "max_episode_steps",  # the episode limit of the evaluation env
    "command_return",  # the command a reward-conditioned policy (udrl, rcp_r, rcp_a) plays
    "command_horizon",
)
ENJOY_DESCRIPTION = (
    "Watch or record a trained policy. The run's cfg.json gives the env, the model and every training setting; of "
    "the training flags below enjoy.py takes only "
    + ", ".join(f"--{name}" for name in TRAINING_FLAGS_HONOURED)
    + " (any other is ignored, with a warning), and the evaluation flags of the last group."
)


def parse_enjoy_cfg(argv: list[str]) -> tuple[EnjoyCfg, list[str]]:
    """enjoy.py's cfg: the run's saved one with the flags enjoy.py honours applied; and the typed flags it ignored."""
    from appo.config.cfg import build_parser, cfg_from_flags

    typed = vars(build_parser("enjoy.py", EnjoyCfg, ENJOY_DESCRIPTION).parse_args(argv))
    honoured = set(TRAINING_FLAGS_HONOURED) | {f.name for f in fields(EnjoyCfg)} - {f.name for f in fields(Cfg)}
    ignored = sorted(name for name in typed if name not in honoured)
    return cfg_from_flags({k: v for k, v in typed.items() if k in honoured}, EnjoyCfg), ignored


def ignored_flags_warning(ignored: list[str]) -> str:
    """The one line enjoy.py prints for typed training flags it does not honour."""
    names = ", ".join(f"--{name}" for name in ignored)
    return f"warning: enjoy.py ignores {names}: the run's cfg.json sets them (see enjoy.py --help)"


class EnjoyError(Exception):
    """A problem the user can fix; its message is one line, printed as `error: ...` with exit status 2."""


@dataclass(frozen=True)
class RenderPlan:
    env_render_mode: str | None  # what make_env gets: None, "human" or "rgb_array"
    record_video: bool


# --- checks and choices -------------------------------------------------------------------------------------
def check_flags(cfg: EnjoyCfg) -> None:
    """Raise EnjoyError on the first flag of this evaluation that cannot work."""
    for name in ("max_num_episodes", "fps", "episodes_per_trial"):
        if getattr(cfg, name) <= 0:
            raise EnjoyError(f"--{name}={getattr(cfg, name)}: must be > 0")
    if cfg.render_mode not in RENDER_MODES:
        raise EnjoyError(f"--render_mode={cfg.render_mode}: must be one of {', '.join(RENDER_MODES)}")
    if cfg.no_render and cfg.save_video:
        raise EnjoyError("--no_render and --save_video contradict each other: pass one of them")
    resolve_policy_index(cfg)
    if cfg.task != "random" and not cfg.task.isdigit():
        raise EnjoyError(f"--task={cfg.task}: must be an index into the test task split, or random")


def resolve_policy_index(cfg: EnjoyCfg) -> int:
    """--policy_index as a number; `best` reads the run's best_policy.json (kept current by the driver)."""
    from appo.utils.paths import pick_policy_index

    try:
        return pick_policy_index(experiment_dir(cfg), cfg.policy_index, cfg.num_policies)
    except ValueError as exc:
        raise EnjoyError(str(exc)) from None


def has_display() -> bool:
    """Whether a window can be opened: X11 or Wayland on Linux; macOS and Windows always have a desktop."""
    if sys.platform in ("darwin", "win32"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


def plan_render(cfg: EnjoyCfg, display: bool) -> RenderPlan:
    """Turn --no_render, --save_video and --render_mode into the env's render mode and whether to record."""
    if cfg.no_render or cfg.render_mode == "none":
        return RenderPlan(None, False)
    if cfg.save_video or cfg.render_mode == "rgb_array":
        return RenderPlan("rgb_array", True)
    if cfg.render_mode == "human" and not display:
        log.info("render_mode=human but no DISPLAY: rendering offscreen to a video instead")
        return RenderPlan("rgb_array", True)
    if cfg.render_mode == "auto" and not display:
        log.info("no DISPLAY: not rendering (pass --save_video to write an mp4)")
        return RenderPlan(None, False)
    return RenderPlan("human", False)


def prepare_headless(display: bool) -> None:
    """Without a display, point MuJoCo at EGL and SDL (pygame: classic control) at its dummy driver before
    either is imported, so offscreen rendering neither fails nor prints about a missing X server."""
    if not display:
        os.environ.setdefault("MUJOCO_GL", "egl")
        os.environ.setdefault("SDL_VIDEODRIVER", "dummy")


# --- policy -------------------------------------------------------------------------------------------------
def load_policy_state(cfg: EnjoyCfg) -> tuple[dict[str, Any], Path]:
    """The checkpoint --checkpoint names (latest, best or a path), loaded with weights_only=True on the CPU."""
    from appo.learning.checkpoint import find_best, load_checkpoint, load_latest

    ckpt_dir = checkpoint_dir(experiment_dir(cfg), resolve_policy_index(cfg))
    if cfg.checkpoint == "latest":
        loaded = load_latest(ckpt_dir)
        if loaded is None:
            raise EnjoyError(f"--experiment={cfg.experiment}: no loadable checkpoint in {ckpt_dir}")
        return loaded
    if cfg.checkpoint == "best":
        path = find_best(ckpt_dir)
        if path is None:
            raise EnjoyError(
                f"--experiment={cfg.experiment}: no best checkpoint in {ckpt_dir} (try --checkpoint=latest)"
            )
    else:
        path = Path(cfg.checkpoint)
        if not path.is_file():
            raise EnjoyError(f"--checkpoint={cfg.checkpoint}: no such file")
    try:
        return load_checkpoint(path), path
    except Exception as exc:  # truncated, corrupted, or refused by weights_only: all mean "unusable"
        raise EnjoyError(f"--checkpoint={path}: cannot load ({type(exc).__name__}: {first_line(exc)})") from exc


def build_policy(cfg: EnjoyCfg, env: gym.Env, state: dict[str, Any], path: Path) -> ActorCritic:
    from appo.models.registry import make_model

    model = make_model(cfg, env.observation_space, env.action_space)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as exc:
        raise EnjoyError(f"{path}: does not fit the model of cfg.json ({first_line(exc)})") from exc
    return model.eval()


# --- tasks --------------------------------------------------------------------------------------------------
def is_meta(cfg: EnjoyCfg) -> bool:
    return cfg.task_schedule != "none"


def choose_tasks(cfg: EnjoyCfg, env: gym.Env) -> None:
    """Task envs: trials on the run's held-out test tasks, all on `--task` or a seeded random one each."""
    if not is_meta(cfg):
        if cfg.task != "random":
            raise EnjoyError(f"--task={cfg.task}: --env={cfg.env} runs no task schedule (--task_schedule=none)")
        return
    from appo.envs.meta.schedules import SequenceSchedule, TaskSchedule

    test = env.schedule.tasks
    if cfg.task == "random":
        env.schedule = TaskSchedule(test, trial_length(cfg), cfg.seed)
        return
    if not cfg.task.isdigit() or int(cfg.task) >= len(test):
        raise EnjoyError(f"--task={cfg.task}: must be random or an index 0..{len(test) - 1} of the test split")
    env.schedule = SequenceSchedule([test[int(cfg.task)]], trial_length(cfg))


# --- video --------------------------------------------------------------------------------------------------
# --- episodes -----------------------------------------------------------------------------------------------
def run_all(cfg: EnjoyCfg, env: gym.Env, model: ActorCritic, on_frame: Callable[[], None] | None) -> list[float]:
    """Every episode (task envs: every trial, printed episode by episode); returns the episode returns."""
    from appo.models.numpy_twins import make_numpy_policy
    from appo.protocol.buffers import rnn_state_size
    from appo.sampling.evaluator import run_episode

    # The numpy pass where the run's actors used one: the same arithmetic as the actor workers and as an exported
    # policy (appo.load_policy), so their returns on the same seeds are the same.
    fast = make_numpy_policy(model, "cpu", cfg.seed) if cfg.numpy_inference else None
    per_trial = trial_length(cfg)
    returns: list[float] = []
    for i in range(math.ceil(cfg.max_num_episodes / per_trial)):
        seed = cfg.seed if i == 0 else None  # later episodes continue the env's rng stream
        total, length, info = run_episode(env, model, rnn_state_size(cfg), not cfg.stochastic, seed, on_frame, fast)
        if "trial" in info:
            trial = info["trial"]
            print(f"trial {i}: task {trial['task']}", flush=True)
            pairs = list(zip(trial["returns"], trial["lengths"], strict=True))
        else:
            pairs = [(total, length)]
        for ret, steps in pairs:
            print(f"episode {len(returns)}: return {ret:.1f} length {steps}", flush=True)
            returns.append(ret)
    return returns


def print_summary(returns: list[float], episodes_per_trial: int) -> None:
    values = np.array(returns)
    print(f"mean return {values.mean():.1f} ± {values.std():.1f} over {len(values)} episodes", flush=True)
    if episodes_per_trial > 1 and len(values) >= episodes_per_trial:
        # A trial's return (its episodes' sum) is what training reports as episode/return_mean for task envs.
        whole = values[: len(values) // episodes_per_trial * episodes_per_trial].reshape(-1, episodes_per_trial)
        trials = whole.sum(axis=1)
        print(f"mean trial return {trials.mean():.1f} ± {trials.std():.1f} over {len(trials)} trials", flush=True)
        # The adaptation curve: how the return changes with the episode's position within its trial.
        by_position = ", ".join(f"{v:.1f}" for v in whole.mean(axis=0))
        print(f"mean return by episode within trial: {by_position}", flush=True)


# --- entry --------------------------------------------------------------------------------------------------
def make_eval_env(cfg: EnjoyCfg, plan: RenderPlan) -> tuple[gym.Env, RenderPlan]:
    """The run's env exactly as training built it (task envs: over the test split) with the planned render
    mode. An env that cannot render is an error when a window or a video was asked for, but under
    --render_mode=auto it just runs unrendered."""
    split = "test" if is_meta(cfg) else "train"
    try:
        try:
            return make_run_env(cfg, split=split, render_mode=plan.env_render_mode), plan
        except (ValueError, gym.error.DependencyNotInstalled) as exc:
            if isinstance(exc, UnknownEnvError) or cfg.render_mode != "auto" or plan.record_video:
                raise
            log.info("--env=%s cannot render (%s): not rendering", cfg.env, first_line(exc))
            return make_run_env(cfg, split=split), RenderPlan(None, False)
    except UnknownEnvError as exc:
        raise EnjoyError(str(exc)) from exc
    except (ValueError, gym.error.DependencyNotInstalled) as exc:
        raise EnjoyError(f"--env={cfg.env} with render_mode={plan.env_render_mode}: {first_line(exc)}") from exc


def evaluate_policy(cfg: EnjoyCfg, env: gym.Env, model: ActorCritic, video: VideoWriter | None) -> None:
    """Run the episodes (writing frames to `video` if any) and print the summary."""
    import torch

    torch.manual_seed(cfg.seed)  # --stochastic: the same seed samples the same actions
    env.action_space.seed(cfg.seed)
    on_frame = (lambda: video.add(env.render())) if video is not None else None
    try:
        returns = run_all(cfg, env, model, on_frame)
    except gym.error.DependencyNotInstalled as exc:  # e.g. pygame, needed only once a frame is drawn
        raise EnjoyError(f"rendering --env={cfg.env}: {first_line(exc)}") from exc
    print_summary(returns, trial_length(cfg))


def _evaluate(cfg: EnjoyCfg) -> int:
    exp_dir = experiment_dir(cfg)
    if not cfg_path(exp_dir).is_file():
        raise EnjoyError(f"--experiment={cfg.experiment}: no run at {exp_dir} (cfg.json missing)")
    check_flags(cfg)
    state, ckpt_path = load_policy_state(cfg)
    display = has_display()
    prepare_headless(display)
    if cfg.traits.consumes == "meta_batches":  # a meta-gradient policy adapts to one test task: before and after
        return _enjoy_adaptation(cfg, state, ckpt_path, plan_render(cfg, display))
    env, plan = make_eval_env(cfg, plan_render(cfg, display))
    video: VideoWriter | None = None
    try:
        model = build_policy(cfg, env, state, ckpt_path)
        choose_tasks(cfg, env)
        if hasattr(model, "command"):  # a reward-conditioned policy plays a command (--command_return/_horizon)
            from appo.models.command_policy import play_command

            log.info("command: return %.1f, horizon %.0f", *play_command(cfg, env, model))
        log.info("loaded %s (version %s, %s env steps)", ckpt_path, state.get("version"), state.get("env_steps"))
        if plan.record_video:
            video = VideoWriter(new_video_path(exp_dir, ckpt_path), cfg.fps)
        evaluate_policy(cfg, env, model, video)
    except (EnjoyError, VideoError):
        if video is not None:  # no half-made video left behind
            video.close(keep=False)
            video = None
        raise
    finally:
        env.close()
        if video is not None:
            video.close()
    if video is not None:
        show_video(cfg, video, state)
    return 0


def _enjoy_adaptation(cfg: EnjoyCfg, state: dict[str, Any], ckpt_path: Path, plan: RenderPlan) -> int:
    version = state.get("iteration", state.get("version"))
    log.info("loaded %s (iteration %s, %s env steps)", ckpt_path, version, state.get("env_steps"))
    video = VideoWriter(new_video_path(experiment_dir(cfg), ckpt_path), cfg.fps) if plan.record_video else None
    try:
        from appo.maml.enjoy import enjoy_maml

        enjoy_maml(cfg, state, plan.env_render_mode, video)
    except (ValueError, VideoError) as exc:  # --task out of the test split's range; an env's render() no image
        if video is not None:
            video.close(keep=False)
            video = None
        raise EnjoyError(first_line(exc)) from exc
    finally:
        if video is not None:
            video.close()
    if video is not None:
        show_video(cfg, video, state)
    return 0


def show_video(cfg: EnjoyCfg, video: VideoWriter, state: dict[str, Any]) -> None:
    """Say where the mp4 is; for a run trained --with_wandb, log it into the policy's wandb run too."""
    print(f"video: {video.path} ({video.num_frames} frames)", flush=True)
    if cfg.with_wandb:
        from appo.utils.tracking import TrackingError, log_video

        steps = int(state.get("env_steps") or 0)  # the checkpoint's: where the video sits on the x-axis
        try:
            run_id = log_video(cfg, experiment_dir(cfg), resolve_policy_index(cfg), video.path, steps)
        except TrackingError as exc:
            raise EnjoyError(f"{exc} (the video is kept)") from None
        print(f"video: logged to wandb run {run_id} (project {cfg.wandb_project})", flush=True)


def enjoy(cfg: EnjoyCfg) -> int:
    """Evaluate the run's policy as the cfg says; 0 on success, 2 (one `error:` line on stderr) on bad input."""
    init_logging(cfg.log_level)
    try:
        return _evaluate(cfg)
    except (EnjoyError, VideoError) as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    except KeyboardInterrupt:  # Ctrl-C while watching: the env and the video were closed on the way out
        print("interrupted", file=sys.stderr, flush=True)
        return 130
