"""The wheel installs a working appo: built from the checkout, installed (not editable) into a folder of its own,
and run from another folder, where the checkout cannot be imported, it trains CartPole for a few thousand steps.
(A folder without __init__.py is left out of a wheel by find_packages: appo/sampling/ once was.)"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

from tests.conftest import ROOT


def test_wheel_installs_and_trains_from_another_folder(tmp_path: Path) -> None:
    wheels, site, work = tmp_path / "wheels", tmp_path / "site", tmp_path / "elsewhere"
    work.mkdir()
    pip = [sys.executable, "-m", "pip", "--disable-pip-version-check", "-q"]
    build = subprocess.run(
        [*pip, "wheel", "--no-deps", "--no-build-isolation", "-w", str(wheels), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = wheels.glob("appo-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    packages = {str(p.relative_to(ROOT)) for p in ROOT.glob("[aeu]*/**/__init__.py") if ".venv" not in p.parts}
    assert packages <= names, f"packages missing from the wheel: {sorted(packages - names)}"
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert install.returncode == 0, install.stdout + install.stderr
    # The installed copy first on the path; the run's folder holds no checkout. The dependencies come from this
    # interpreter's environment.
    env = dict(os.environ, PYTHONPATH=str(site))
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import appo.sampling.actor_worker as m, train_appo as t; print(m.__file__, t.__file__)",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert where.returncode == 0 and all(p.startswith(str(site)) for p in where.stdout.split()), where
    args = ["--env=CartPole-v1", "--experiment=wheel", "--train_for_env_steps=4000", "--num_workers=1"]
    train = subprocess.run(
        [sys.executable, "-m", "train_appo", *args, "--num_envs_per_worker=4", "--device=cpu"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert list((work / "train_dir" / "wheel" / "checkpoint_p0").glob("checkpoint_*.pth")), train.stderr[-3000:]
