"""The wheel installs a working appo and nothing else: built from the checkout and installed (not editable) into a
folder of its own, it puts only the package appo (envs/ and utils/ inside it), its dist-info and the console
scripts there; run from another folder, where the checkout cannot be imported, `appo-train` trains CartPole for a
few thousand steps. (A folder without __init__.py is left out of a wheel by find_packages.)"""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import appo
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
    packages = {str(p.relative_to(ROOT)) for p in ROOT.glob("appo/**/__init__.py")} | {
        f"appo/{p.relative_to(ROOT)}" for folder in ("envs", "utils") for p in ROOT.glob(f"{folder}/**/__init__.py")
    }
    assert packages <= names, f"packages missing from the wheel: {sorted(packages - names)}"
    install = subprocess.run(
        [*pip, "install", "--no-deps", "--target", str(site), str(wheel)], capture_output=True, text=True, timeout=300
    )
    assert install.returncode == 0, install.stdout + install.stderr
    top = sorted(p.name for p in site.iterdir())
    assert top == ["appo", f"appo-{appo.__version__}.dist-info", "bin"], f"the wheel installs more than appo: {top}"
    scripts = sorted(p.name for p in (site / "bin").iterdir())
    assert scripts == [f"appo-{n}" for n in ("enjoy", "export", "plot", "runs", "sweep", "train")], scripts
    # The installed copy first on the path; the run's folder holds no checkout. The dependencies come from this
    # interpreter's environment.
    env = dict(os.environ, PYTHONPATH=str(site))
    where = subprocess.run(
        [
            sys.executable,
            "-c",
            "import appo.sampling.actor_worker as m, appo.envs.presets as e; print(m.__file__, e.__file__)",
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
        [sys.executable, str(site / "bin" / "appo-train"), *args, "--num_envs_per_worker=4", "--device=cpu"],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    assert list((work / "train_dir" / "wheel" / "checkpoint_p0").glob("checkpoint_*.pth")), train.stderr[-3000:]
