"""Videos of evaluated episodes: RGB frames streamed into an H.264 mp4 under train_dir/NAME/videos/ (imageio with its
ffmpeg plugin), for enjoy.py's --save_video and MAML's before/after-adaptation recordings."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from appo.utils.logging import first_line
from appo.utils.paths import videos_dir


class VideoError(Exception):
    """A video that cannot be made (imageio or ffmpeg missing, a frame that is no image): one line for the user."""


class VideoWriter:
    """Streams RGB frames into an H.264 mp4 (imageio + imageio-ffmpeg). Frames with an odd side are padded
    by one edge pixel, because yuv420p needs even sizes and imageio would otherwise rescale them."""

    def __init__(self, path: Path, fps: int) -> None:
        try:
            import imageio.v2 as imageio
        except ImportError as exc:
            raise VideoError(
                "--save_video needs imageio and imageio-ffmpeg: pip install imageio imageio-ffmpeg"
            ) from exc
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.num_frames = 0
        try:
            self._writer = imageio.get_writer(path, format="FFMPEG", mode="I", fps=fps, macro_block_size=2)
        except (ImportError, RuntimeError) as exc:  # imageio-ffmpeg (the ffmpeg binary) missing
            raise VideoError(
                f"--save_video: cannot start ffmpeg ({first_line(exc)}); pip install imageio-ffmpeg"
            ) from exc

    def add(self, frame: np.ndarray | None) -> None:
        """One RGB frame (H x W x 3; a grayscale H x W or an RGBA frame is turned into one); VideoError for what an
        env's render() gave that is no image."""
        shape = getattr(frame, "shape", None)
        if shape is not None and len(shape) == 2:
            frame = np.repeat(np.asarray(frame)[:, :, None], 3, axis=2)
        elif shape is not None and len(shape) == 3 and shape[2] == 4:
            frame = np.asarray(frame)[:, :, :3]
        elif shape is None or len(shape) != 3 or shape[2] != 3:
            got = type(frame).__name__ if shape is None else f"an array of shape {tuple(shape)}"
            raise VideoError(f"--save_video: the env's render() returned {got}, not an RGB frame (H x W x 3)")
        pad = ((0, frame.shape[0] % 2), (0, frame.shape[1] % 2), (0, 0))
        if pad[0][1] or pad[1][1]:
            frame = np.pad(frame, pad, mode="edge")
        self._writer.append_data(np.ascontiguousarray(frame, dtype=np.uint8))
        self.num_frames += 1

    def close(self, keep: bool = True) -> None:
        """Finish the file; `keep=False` (a failed recording) removes it."""
        self._writer.close()
        if not keep:
            self.path.unlink(missing_ok=True)


def new_video_path(exp_dir: Path, ckpt_path: Path) -> Path:
    """videos/<checkpoint>_<time>.mp4, never overwriting an earlier video."""
    stem = f"{ckpt_path.stem}_{time.strftime('%Y%m%d_%H%M%S')}"
    path = videos_dir(exp_dir) / f"{stem}.mp4"
    n = 1
    while path.exists():
        path = videos_dir(exp_dir) / f"{stem}_{n}.mp4"
        n += 1
    return path
