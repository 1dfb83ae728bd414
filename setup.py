from setuptools import find_packages, setup

setup(
    name="appo",
    version="0.1.0",
    description="Asynchronous PPO over shared memory for continuous control and meta-RL",
    packages=find_packages(include=["appo", "appo.*", "envs", "envs.*", "utils", "utils.*"]),
    py_modules=["train_appo", "enjoy"],
    python_requires=">=3.10",
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
        # --backend=ray and sweeps on a cluster: the minimal package (no dashboard); tested with 2.60.0 (cp311 wheel)
        "ray": ["ray>=2.60,<2.61"],
        # --with_wandb: experiment tracking (appo/driver/tracking.py); several runs in one process (reinit="create_new")
        # need 0.19.10 or newer; tested with 0.31.0 (offline: WANDB_MODE=offline)
        "wandb": ["wandb>=0.19.10"],
        # python -m appo.export --format=onnx, and onnxruntime to check the graph (tests/integration/test_export.py)
        "onnx": ["onnx>=1.16", "onnxruntime>=1.18"],
    },
)
