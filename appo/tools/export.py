"""A trained policy out of its run: as an npz that numpy alone runs (appo/numpy_policy/policy_file.py), as ONNX with the
recurrent state as an explicit input and output, or as TorchScript.

    python -m appo.export --experiment=NAME --format=npz|onnx|torchscript [--checkpoint=latest|best|PATH]
                          [--policy_index=0|best] [--out=FILE] [--train_dir=train_dir]

ONNX and TorchScript graphs compute the deterministic action (the Gaussian's mean, the most likely discrete action,
SAC's tanh(mean) in the env's box) from (obs [B, *obs_shape], rnn_state [B, S]) -> (action, rnn_state); S is 1 and
the state passes through for a feed-forward policy. Clipping to the action box is the caller's, as for the engine.
Both carry the policy file's meta (the run's cfg, spaces, source) as JSON: ONNX in its metadata_props under
`appo_meta`, TorchScript as the extra file `appo_meta.json`.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from appo.numpy_policy.policy_file import write_policy_file
from appo.utils.paths import cfg_path, checkpoint_dir

FORMATS = ("npz", "onnx", "torchscript")
SUFFIXES = {"npz": ".npz", "onnx": ".onnx", "torchscript": ".pt"}


class ExportError(Exception):
    """A problem the user can fix; one line, printed as `error: ...` with exit status 2."""


def find_checkpoint(path: str | Path, checkpoint: str = "latest", policy_index: int = 0) -> tuple[Path, Path]:
    """(run dir, checkpoint file) for `path`: a run dir (its policy `policy_index`'s latest or best checkpoint, or
    the file `checkpoint` names) or a checkpoint file inside a run (train_dir/NAME/checkpoint_p0/*.pth)."""
    from appo.learning.checkpoint import find_best, load_latest

    path = Path(path)
    if path.is_file():
        run = path.parent.parent
        if not cfg_path(run).is_file():
            raise ExportError(f"{path}: not inside a run (no {cfg_path(run)})")
        return run, path
    if not cfg_path(path).is_file():
        raise ExportError(f"{path}: not a run directory (no cfg.json), a checkpoint or an .npz export")
    if checkpoint not in ("latest", "best"):
        file = Path(checkpoint)
        if not file.is_file():
            raise ExportError(f"--checkpoint={checkpoint}: no such file (or pass latest or best)")
        return path, file
    ckpt_dir = checkpoint_dir(path, policy_index)
    if checkpoint == "best":
        found = find_best(ckpt_dir)
    else:  # the newest that loads (as enjoy.py and resuming): an unreadable newer one is skipped, warned
        latest = load_latest(ckpt_dir)
        found = latest[1] if latest is not None else None
    if found is None:
        raise ExportError(f"{ckpt_dir}: no {checkpoint} checkpoint" + (" that loads" if checkpoint == "latest" else ""))
    return path, found


def saved_cfg(run: Path) -> Any:
    """The run's Cfg from its cfg.json; ExportError with the command line's one-line message for a bad file."""
    from appo.config.cfg import make_cfg, read_saved_cfg

    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            return make_cfg(read_saved_cfg(cfg_path(run)))
    except SystemExit:
        lines = [line for line in said.getvalue().splitlines() if line.strip()]
        raise ExportError(lines[-1].removeprefix("error: ") if lines else f"{cfg_path(run)}: unreadable") from None


def run_spaces(cfg: Any) -> tuple[Any, Any]:
    """(observation space, action space) of the run's env, built once; ExportError when it cannot be built here (an
    env id gymnasium does not know, a package missing)."""
    import gymnasium as gym

    from appo.envs import UnknownEnvError, make_run_env
    from appo.envs.multi_agent.multi_agent import AgentEnvError

    try:
        env = make_run_env(cfg)
    except (UnknownEnvError, AgentEnvError, ValueError, ImportError, gym.error.Error) as exc:
        detail = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise ExportError(f"--env={cfg.env}: cannot build the run's env here ({detail})") from None
    try:
        return env.observation_space, env.action_space
    finally:
        env.close()


def load_run_policy(run: Path, ckpt: Path) -> tuple[Any, Any, dict[str, Any], tuple[Any, Any]]:
    """(cfg, torch model with the checkpoint's weights, the checkpoint, (obs space, action space))."""
    from appo.learning.checkpoint import load_checkpoint
    from appo.models.registry import make_model

    cfg = saved_cfg(run)
    try:
        state = load_checkpoint(ckpt)
    except Exception as exc:  # truncated, corrupted, refused by weights_only
        raise ExportError(f"{ckpt}: cannot load ({type(exc).__name__}: {str(exc).splitlines()[0]})") from exc
    spaces = run_spaces(cfg)
    model = make_model(cfg, *spaces)
    try:
        model.load_state_dict(state["model"])
    except (KeyError, RuntimeError) as exc:
        raise ExportError(f"{ckpt}: does not fit the model of {cfg_path(run)}") from exc
    return cfg, model.eval(), state, spaces


def policy_parts(
    run: Path, ckpt: Path, fmt: str = "npz"
) -> tuple[dict[str, Any], dict[str, np.ndarray], dict[str, np.ndarray], Any]:
    """What a policy file holds (meta, numpy state, action bounds) for a run's checkpoint, and the torch model. A
    model that no numpy pass computes (a Dict encoder's) exports to the torch formats only."""
    import gymnasium as gym

    from appo.config.cfg import cfg_to_dict
    from appo.models.numpy_twins import numpy_description
    from appo.protocol.buffers import obs_dtype

    cfg, model, state, (obs_space, action_space) = load_run_policy(run, ckpt)
    description = numpy_description(model)
    if description is None and fmt == "npz":
        raise ExportError(
            f"{ckpt}: {type(model).__qualname__} has no numpy pass (appo/numpy_policy/); "
            "--format=onnx or --format=torchscript export it"
        )
    arrays: dict[str, np.ndarray] = {}
    if isinstance(action_space, gym.spaces.Discrete):
        action = {"type": "Discrete", "n": int(action_space.n)}
        if int(action_space.start):  # Discrete(n, start=k): the env takes the policy's index 0..n-1 plus k
            action["start"] = int(action_space.start)
    else:
        action = {"type": "Box", "shape": list(action_space.shape)}
        arrays = {"action/low": action_space.low, "action/high": action_space.high}
    meta = {
        "model": description if description is not None else {"kind": "torch"},
        "cfg": cfg_to_dict(cfg),
        "observation_shape": list(obs_space.shape),
        "observation_dtype": str(obs_dtype(obs_space)),  # as training stored them: uint8 frames stay uint8
        "action": action,
        # Dict observations go in packed (appo/envs/packed_obs.py): each key's bytes at its offset.
        **(
            {"observation_keys": [k._asdict() for k in layout]}
            if (layout := getattr(model, "packed_layout", None))
            else {}
        ),
        "source": {
            "checkpoint": str(ckpt),
            "version": int(state.get("version", state.get("iteration", 0)) or 0),
            "env_steps": int(state.get("env_steps", 0) or 0),
        },
    }
    # The policy only: a centralised value (--value_input's team_* weights) is the learner's business.
    state_dict = model.state_dict()
    numpy_state = {k: v.detach().cpu().numpy() for k, v in state_dict.items() if not k.startswith("team_")}
    return meta, numpy_state, arrays, model


def deterministic_graph(model: Any, keys: list[str] | None = None) -> Any:
    """A torch module (obs, rnn_state) -> (deterministic action, rnn_state) for tracing; with `keys` (a Dict
    observation space's) it takes one observation tensor per key, in that order, then rnn_state."""
    import torch

    class Deterministic(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, *inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            *obs_parts, rnn_state = inputs
            obs = dict(zip(keys, obs_parts, strict=True)) if keys is not None else obs_parts[0]
            if not hasattr(self.model, "act"):  # MAML's policies: the mean, or the most likely action
                return self.model.mode(obs), rnn_state
            out = self.model.act(obs, rnn_state, deterministic=True)
            return out.actions, out.rnn_states

    return Deterministic().eval()


def input_names(meta: dict[str, Any]) -> list[str]:
    """The exported graph's input names: obs (or obs_<key> per Dict key), rnn_state."""
    keys = [k["key"] for k in meta.get("observation_keys", [])]
    return [f"obs_{k}" for k in keys] or ["obs"]


def example_inputs(meta: dict[str, Any], batch: int = 1) -> tuple[Any, ...]:
    import torch

    from appo.protocol.buffers import rnn_state_size

    cfg = meta["cfg"]
    size = rnn_state_size(argparse.Namespace(**cfg))
    if "observation_keys" in meta:  # one input per Dict key, in its own dtype
        parts = [torch.from_numpy(np.zeros((batch, *k["shape"]), dtype=k["dtype"])) for k in meta["observation_keys"]]
        return (*parts, torch.zeros(batch, size))
    dtype = getattr(torch, meta.get("observation_dtype", "float32"))  # traced in the dtype the model is fed
    return torch.zeros(batch, *meta["observation_shape"], dtype=dtype), torch.zeros(batch, size)


def export(run: Path, ckpt: Path, fmt: str, out: Path) -> Path:
    """Write the policy of `ckpt` (of run `run`) to `out` in format `fmt`; returns `out`."""
    import torch

    meta, numpy_state, arrays, model = policy_parts(run, ckpt, fmt)
    if fmt == "npz":
        return write_policy_file(out, meta, numpy_state, arrays)
    meta_json = json.dumps(meta)
    keys = [k["key"] for k in meta.get("observation_keys", [])]
    graph = deterministic_graph(model, keys or None)
    inputs = example_inputs(meta, batch=2)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(out.name + ".tmp")
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer and legacy-exporter notices: the checks below are the test
            if fmt == "torchscript":
                traced = torch.jit.trace(graph, inputs, check_trace=False)
                torch.jit.save(traced, str(tmp), _extra_files={"appo_meta.json": meta_json})
            else:
                _export_onnx(graph, inputs, tmp, meta_json, input_names(meta))
        tmp.replace(out)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return out


def _export_onnx(graph: Any, inputs: tuple[Any, ...], path: Path, meta_json: str, obs_names: list[str]) -> None:
    import torch

    try:
        import onnx
    except ImportError as exc:
        raise ExportError("--format=onnx needs the onnx extra: pip install 'appo[onnx]'") from exc
    batch = {0: "batch"}
    torch.onnx.export(
        graph,
        inputs,
        str(path),
        dynamo=False,  # the TorchScript-based exporter: no onnxscript needed, recurrent cells export as ops
        input_names=[*obs_names, "rnn_state"],
        output_names=["action", "rnn_state_out"],
        dynamic_axes={name: batch for name in [*obs_names, "rnn_state", "action", "rnn_state_out"]},
        opset_version=17,
    )
    proto = onnx.load(str(path))
    entry = proto.metadata_props.add()
    entry.key, entry.value = "appo_meta", meta_json
    onnx.save(proto, str(path))


def out_path(out: str, fmt: str) -> Path:
    """--out as the file to write: the format's suffix added where it has none; an npz export must end in .npz (the
    suffix by which load_policy knows one)."""
    path = Path(out)
    if not path.suffix:
        return path.with_name(path.name + SUFFIXES[fmt])
    if fmt == "npz" and path.suffix != ".npz":
        raise ExportError(
            f"--out={out}: an npz export's file name must end in .npz (appo.load_policy reads it by that)"
        )
    return path


def chosen_policy(run: Path, policy_index: str) -> int:
    """--policy_index as a number of the run's policies (`best`: its best_policy.json)."""
    from appo.utils.paths import pick_policy_index

    if not cfg_path(run).is_file():
        raise ExportError(f"{run}: not a run directory (no cfg.json)")
    try:
        return pick_policy_index(run, policy_index, saved_cfg(run).num_policies)
    except ValueError as exc:
        raise ExportError(str(exc)) from None


def default_name(policy_index: int, checkpoint: str, ckpt: Path, fmt: str) -> str:
    """policy_p<i>.<ext> for the latest checkpoint; other checkpoints add their own name, so that exporting the best
    or an older one does not overwrite the latest's file."""
    tail = "" if checkpoint == "latest" else f"_{ckpt.stem}"
    return f"policy_p{policy_index}{tail}{SUFFIXES[fmt]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m appo.export", description=__doc__.split("\n\n")[0])
    parser.add_argument("--experiment", required=True, help="the run's name under --train_dir")
    parser.add_argument("--train_dir", default="train_dir", help="root folder of runs (default: train_dir)")
    parser.add_argument("--format", default="npz", help=f"one of {', '.join(FORMATS)} (default: npz)")
    parser.add_argument("--checkpoint", default="latest", help="latest, best, or a checkpoint file")
    parser.add_argument(
        "--policy_index", default="0", help="which policy of the run, or best (best_policy.json) (default: 0)"
    )
    parser.add_argument(
        "--out",
        default="",
        help="output file; no suffix: the format's added (default: train_dir/NAME/export/policy_p<i>[_<checkpoint>]"
        ".<ext>, the checkpoint's name where it is not the latest)",
    )
    args = parser.parse_args(argv)
    try:
        if args.format not in FORMATS:
            raise ExportError(f"--format={args.format}: must be one of {', '.join(FORMATS)}")
        out = out_path(args.out, args.format) if args.out else None
        run_dir = Path(args.train_dir) / args.experiment
        index = chosen_policy(run_dir, args.policy_index)
        run, ckpt = find_checkpoint(run_dir, args.checkpoint, index)
        out = out or run / "export" / default_name(index, args.checkpoint, ckpt, args.format)
        try:
            export(run, ckpt, args.format, out)
        except OSError as exc:  # a folder that cannot be made or written
            raise ExportError(f"--out={out}: {exc.strerror or exc}") from None
    except ExportError as exc:
        print(f"error: {exc}", file=sys.stderr, flush=True)
        return 2
    print(f"wrote {out} ({args.format}, from {ckpt})", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
