"""appo's package: the wheel installs one top-level package, `appo`. The checkout keeps envs/ and utils/ beside
appo/ (appo/envs and appo/utils are links to them), so they install as appo.envs and appo.utils; train_appo.py
and enjoy.py stay in the checkout and install as the console scripts appo-train and appo-enjoy (appo/cli.py)."""

import re
from pathlib import Path

from setuptools import find_packages, setup

PROGRAMS = ["train", "enjoy", "plot", "sweep", "export", "runs"]

setup(
    name="appo",
    # One place for the version: appo/__init__.py's __version__ (docs/changelog.md's newest heading names it too).
    version=re.search(r'__version__ = "([^"]+)"', (Path(__file__).parent / "appo" / "__init__.py").read_text())[1],
    description="Asynchronous PPO over shared memory for continuous control and meta-RL",
    # find_packages follows the links appo/envs and appo/utils; package_dir says the same for a checkout without
    # them (an archive that dropped links), so the wheel never holds top-level envs or utils.
    packages=sorted(
        set(find_packages(include=["appo", "appo.*"]))
        | {"appo.envs", "appo.utils"}
        | {f"appo.{p}" for p in find_packages(include=["envs.*", "utils.*"])}
    ),
    package_dir={"appo.envs": "envs", "appo.utils": "utils"},
    entry_points={"console_scripts": [f"appo-{name} = appo.cli:{name}" for name in PROGRAMS]},
    python_requires=">=3.10",
    license="MIT",
    install_requires=[
        "torch>=2.1",
        "faster-fifo>=1.4.5",
        "numpy>=1.24",
        "gymnasium[mujoco,classic-control]>=1.0",
        "mujoco>=3.1",
        "tensorboardX>=2.6",
        "threadpoolctl>=3.1",
        "psutil>=5.9",
        "setproctitle>=1.3",
        "tensorboard>=2.12",  # its event reader: appo.tools.plot, tests, benchmarks
        "matplotlib>=3.7",
        "imageio>=2.31",
        "imageio-ffmpeg>=0.4.9",
    ],
    extras_require={
        "test": [
            "pytest>=7",
            "pytest-timeout>=2.1",
            "pytest-xdist>=3.5",  # README's test command runs the suite in two workers (-n 2)
            "ruff>=0.5",
            "setuptools>=70.1",
        ],  # setuptools: the wheel test builds one
        "box2d": ["box2d>=2.3.10"],  # LunarLander-v3 (the UDRL benchmark); a manylinux wheel, no build
        # --env=atari_<game>: ale-py bundles the ROMs (no download); opencv for gymnasium's Atari preprocessing (its
        # 84x84 resize). Tested with ale-py 0.12.1 and opencv-python-headless 5.1.0.
        "atari": ["ale-py>=0.11", "opencv-python-headless>=4"],
        # --env=doom_<scenario>: the vizdoom wheel bundles its engine, freedoom and the scenarios; opencv resizes the
        # screen. Tested with vizdoom 1.3.2.
        "doom": ["vizdoom>=1.3.2", "opencv-python-headless>=4"],
        # Multi-agent envs: PettingZoo's Parallel API (classic games such as rps_v2) and its particle worlds (mpe2).
        "multiagent": ["pettingzoo>=1.25", "mpe2>=1.1"],
        # --backend=ray and sweeps on a cluster: the minimal package (no dashboard); tested with 2.60.0 (cp311 wheel)
        "ray": ["ray>=2.60,<2.61"],
        # --with_wandb: experiment tracking (utils/tracking.py); several runs in one process (reinit="create_new")
        # need 0.19.10 or newer; tested with 0.31.0 (offline: WANDB_MODE=offline)
        "wandb": ["wandb>=0.19.10"],
        # python -m appo.export --format=onnx, and onnxruntime to check the graph (tests/integration/test_export.py)
        "onnx": ["onnx>=1.16", "onnxruntime>=1.18"],
    },
)
