"""appo/tools/video.py: the frames an env's render() may give (RGB, grayscale, RGBA, odd sides) read back from the
mp4 as RGB of even sides, and what is no image is one line (VideoError) with no file kept."""

from __future__ import annotations

import imageio.v2 as imageio
import numpy as np
import pytest

from appo.tools.video import VideoError, VideoWriter


def test_gray_rgba_and_odd_frames_become_even_rgb_and_a_non_image_is_refused(tmp_path):
    video = VideoWriter(tmp_path / "v.mp4", fps=10)
    try:
        video.add(np.full((15, 21, 3), 200, np.uint8))
        video.add(np.full((15, 21), 100, np.uint8))
        video.add(np.full((15, 21, 4), 50, np.uint8))
        for bad, said in ((None, "NoneType"), (np.zeros((4, 4, 2), np.uint8), "an array of shape (4, 4, 2)")):
            with pytest.raises(VideoError) as caught:
                video.add(bad)
            assert str(caught.value).startswith(f"--save_video: the env's render() returned {said}, not an RGB")
    finally:
        video.close()
    reader = imageio.get_reader(tmp_path / "v.mp4", format="FFMPEG")
    try:
        frames = [frame for frame in reader]  # list(reader) would size itself by len(reader): inf
    finally:
        reader.close()
    assert [f.shape for f in frames] == [(16, 22, 3)] * 3
    assert [round(float(f[:15, :21].mean()) / 10) for f in frames] == [20, 10, 5]  # H.264 is lossy: to within ~5


def test_a_failed_recording_keeps_no_file(tmp_path):
    video = VideoWriter(tmp_path / "v.mp4", fps=10)
    video.add(np.zeros((8, 8, 3), np.uint8))
    video.close(keep=False)
    assert not list(tmp_path.iterdir())
