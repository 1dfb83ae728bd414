"""Learning curves from runs' tensorboard summaries, as PNG files.

    python -m appo.tools.plot train_dir/NAME [train_dir/OTHER ...] [--out PATH] [--tag episode/return_mean]

Each run's `summaries/<policy_id>/` is read with tensorboard's own EventAccumulator (so the plot shows what
TensorBoard shows, resumed sessions included). The main figure has the tag against env steps and against
wall time, one line per run and policy. Runs whose summaries hold `meta_test/return_ep0`, `..._ep1`, ...
also get an adaptation figure: the mean return of each episode index within a trial, at the last
evaluation, next to the main figure as `<out stem>_adaptation.png`.

Default output: `train_dir/NAME/plots/returns.png` for one run; with several runs, `compare.png` in the
first run's plots/ folder."""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

if TYPE_CHECKING:  # tensorboard and matplotlib are imported in main(), where a missing one is a clean error
    from matplotlib.figure import Figure
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

DEFAULT_TAG = "episode/return_mean"
ADAPTATION_TAG_RE = re.compile(r"^meta_test/return_ep(\d+)$")


class Series(NamedTuple):
    """One scalar tag of one policy of one run; wall times are seconds since the run's first event."""

    label: str
    steps: np.ndarray
    wall: np.ndarray
    values: np.ndarray


class PlotError(Exception):
    """A one-line problem with the input, printed as `error: ...` with exit status 2."""


# --- reading ------------------------------------------------------------------------------------------------
def policy_summary_dirs(run_dir: Path) -> list[tuple[int, Path]]:
    """(policy id, folder) of every `summaries/<id>/` of a run, in id order; PlotError if there is none."""
    if not run_dir.is_dir():
        raise PlotError(f"{run_dir}: no such run folder")
    root = run_dir / "summaries"
    found = sorted((int(p.name), p) for p in root.glob("*") if p.is_dir() and p.name.isdigit())
    if not found:
        raise PlotError(f"{run_dir}: no summaries/<policy_id>/ folder (not a run, or it never reported)")
    return found


def load_events(summary_dir: Path) -> EventAccumulator:
    """Every scalar event of one policy (size_guidance 0 keeps all of them instead of a reservoir sample)."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(summary_dir), size_guidance={"scalars": 0})
    acc.Reload()
    return acc


def scalar_series(acc: EventAccumulator, tag: str) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(steps, wall times, values) of `tag`, or None if the summaries do not have it."""
    if tag not in acc.Tags().get("scalars", []):
        return None
    events = acc.Scalars(tag)
    steps = np.array([e.step for e in events], dtype=np.int64)
    wall = np.array([e.wall_time for e in events], dtype=np.float64)
    values = np.array([e.value for e in events], dtype=np.float64)
    return steps, wall, values


def adaptation_returns(acc: EventAccumulator) -> np.ndarray | None:
    """Mean return by episode index within a trial (`meta_test/return_ep<i>`) at the last evaluation that
    logged all of them, or None if the summaries have no such tags."""
    tags = {int(m.group(1)): t for t in acc.Tags().get("scalars", []) if (m := ADAPTATION_TAG_RE.match(t))}
    if not tags:
        return None
    by_index = [{e.step: e.value for e in acc.Scalars(tags[i])} for i in sorted(tags)]
    common = set.intersection(*(set(d) for d in by_index))
    if not common:
        return None
    last = max(common)
    return np.array([d[last] for d in by_index], dtype=np.float64)


def run_labels(runs: list[Path]) -> list[str]:
    """Folder names, or the paths as given where two runs share a name (two train_dirs)."""
    names = [r.name for r in runs]
    return [r.name if names.count(r.name) == 1 else str(r) for r in runs]


def select_policies(run: Path, policy_index: str = "all") -> list[tuple[int, Path]]:
    """The summary folders of `run` that --policy_index picks: all, a number, or best (best_policy.json)."""
    from appo.utils.paths import read_best_policy

    policies = policy_summary_dirs(run)
    if policy_index == "all":
        return policies
    if policy_index == "best":
        try:
            wanted = read_best_policy(run)
        except ValueError as exc:  # a corrupt best_policy.json: one line naming it
            raise PlotError(f"--policy_index=best: {exc}") from None
        if wanted is None:
            raise PlotError(f"--policy_index=best: {run} has no best_policy.json")
    elif policy_index.isdigit():
        wanted = int(policy_index)
    else:
        raise PlotError(f"--policy_index={policy_index}: must be all, best or a policy number")
    chosen = [(pid, folder) for pid, folder in policies if pid == wanted]
    if not chosen:
        raise PlotError(f"--policy_index={policy_index}: {run} has summaries of policies {[p for p, _ in policies]}")
    return chosen


def collect(runs: list[Path], tag: str, policy_index: str = "all") -> tuple[list[Series], list[tuple[str, np.ndarray]]]:
    """The `tag` series and the adaptation curves of the chosen policies of every run."""
    series: list[Series] = []
    curves: list[tuple[str, np.ndarray]] = []
    for run, run_label in zip(runs, run_labels(runs), strict=True):
        policies = select_policies(run, policy_index)
        for pid, folder in policies:
            label = run_label if len(policies) == 1 else f"{run_label}/p{pid}"
            acc = load_events(folder)
            data = scalar_series(acc, tag)
            if data is None:
                print(f"note: {folder}: no '{tag}' scalars; skipped", file=sys.stderr)
            else:
                steps, wall, values = data
                series.append(Series(label, steps, wall - wall.min(), values))
            curve = adaptation_returns(acc)
            if curve is not None:
                curves.append((label, curve))
    return series, curves


# --- drawing ------------------------------------------------------------------------------------------------
def _new_figure(ncols: int, width: float) -> Figure:
    """A figure on the Agg canvas: no GUI backend, no pyplot global state, works without a display."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, 4.5), layout="constrained")
    FigureCanvasAgg(fig)
    fig.subplots(1, ncols)
    return fig


def _wall_unit(series: list[Series]) -> tuple[str, float]:
    longest = max(float(s.wall.max()) for s in series)
    if longest > 2 * 3600:
        return "hours", 3600.0
    return ("minutes", 60.0) if longest > 120 else ("seconds", 1.0)


def plot_returns(series: list[Series], tag: str, out: Path) -> None:
    """`tag` against env steps (left) and wall time (right), one line per run/policy."""
    fig = _new_figure(2, 13.0)
    by_steps, by_time = fig.axes
    unit, seconds = _wall_unit(series)
    for s in series:
        by_steps.plot(s.steps, s.values, label=s.label, linewidth=1.2)
        by_time.plot(s.wall / seconds, s.values, label=s.label, linewidth=1.2)
    by_steps.set_xlabel("env steps")
    by_time.set_xlabel(f"wall time ({unit})")
    for ax in (by_steps, by_time):
        ax.set_ylabel(tag)
        ax.grid(alpha=0.3)
        ax.legend(fontsize="small")
    _save(fig, out)


def plot_adaptation(curves: list[tuple[str, np.ndarray]], out: Path) -> None:
    """Mean return by episode index within a trial, one line per run/policy."""
    fig = _new_figure(1, 6.5)
    ax = fig.axes[0]
    for label, curve in curves:
        ax.plot(np.arange(len(curve)), curve, marker="o", label=label)
    ax.set_xlabel("episode within trial")
    ax.set_ylabel("mean return (last meta-test evaluation)")
    ax.set_xticks(np.arange(max(len(c) for _, c in curves)))
    ax.grid(alpha=0.3)
    ax.legend(fontsize="small")
    _save(fig, out)


def png_out(out: Path) -> Path:
    """The file --out names; a name with no suffix gets .png (what matplotlib would write)."""
    return out if out.suffix else out.with_name(out.name + ".png")


def check_out(out: Path) -> None:
    """PlotError for an --out whose suffix names no format matplotlib writes (before any run is read)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    formats = FigureCanvasAgg(Figure()).get_supported_filetypes()
    if out.suffix[1:].lower() not in formats:
        raise PlotError(f"--out={out}: unknown image format {out.suffix!r}; use one of .{', .'.join(sorted(formats))}")


def _save(fig: Figure, out: Path) -> None:
    """Write the figure to `out`; PlotError (one line) for a format matplotlib does not know or a folder it cannot
    write, leaving no partial file behind."""
    tmp = out.with_name(f".{out.name}.tmp{out.suffix}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fig.savefig(tmp, dpi=100, format=out.suffix[1:] or "png")
        tmp.replace(out)
    except (OSError, ValueError) as exc:
        tmp.unlink(missing_ok=True)
        raise PlotError(f"--out={out}: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}") from None
    print(f"wrote {out}")


# --- entry --------------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m appo.tools.plot", description="Plot learning curves of runs as PNG."
    )
    parser.add_argument("runs", nargs="+", type=Path, help="run folders (train_dir/NAME)")
    parser.add_argument("--out", type=Path, default=None, help="PNG path (default: RUN/plots/returns.png)")
    parser.add_argument("--tag", default=DEFAULT_TAG, help=f"scalar tag to plot (default: {DEFAULT_TAG})")
    parser.add_argument(
        "--policy_index", default="all", help="all (default), a policy number, or best (the run's best_policy.json)"
    )
    return parser


def default_out(runs: list[Path]) -> Path:
    return runs[0] / "plots" / ("returns.png" if len(runs) == 1 else "compare.png")


def adaptation_out(out: Path) -> Path:
    return out.with_name(f"{out.stem}_adaptation{out.suffix or '.png'}")


def plot_runs(runs: list[Path], tag: str, out: Path, policy_index: str = "all") -> None:
    """Read every run, then write the figures; PlotError on a missing run or when no run has `tag`."""
    for run in runs:
        select_policies(run, policy_index)  # fail on a bad folder before the slow reading of the good ones
    series, curves = collect(runs, tag, policy_index)
    if not series:
        raise PlotError(f"no '{tag}' scalars in {', '.join(map(str, runs))}")
    plot_returns(series, tag, out)
    if curves:
        plot_adaptation(curves, adaptation_out(out))


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        import matplotlib  # noqa: F401
        import tensorboard  # noqa: F401
    except ImportError as exc:
        print(f"error: appo.tools.plot needs matplotlib and tensorboard ({exc})", file=sys.stderr)
        return 2
    try:
        if args.out:
            check_out(png_out(args.out))
        plot_runs(args.runs, args.tag, png_out(args.out) if args.out else default_out(args.runs), args.policy_index)
    except PlotError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
