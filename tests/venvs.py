"""A small virtual env with tfyarn in it, as a user makes one: shared by the unit and the
integration suites (a packed env for -m virtual-env, a caller of tfyarn.run)."""

from __future__ import annotations

import contextlib
import site
import subprocess
import sys
import sysconfig
from pathlib import Path

from locks import held

REPO = Path(__file__).resolve().parents[1]


def one_build() -> contextlib.AbstractContextManager[None]:
    """One pip build of this tree at a time among the test processes (-n 2): setuptools
    builds in REPO/build and REPO/*.egg-info, which two builds at once would share."""
    return held("venv-build")


def small_venv(where: Path) -> Path:
    """where/venv with tfyarn installed in it (a real, non-editable install). Its other
    packages (skein, TF, cloudpickle) come from this runner's site-packages through a .pth
    file, which holds on this machine and the sandbox (its nodes are this machine)."""
    venv = where / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    purelib = subprocess.run([str(venv / "bin" / "python"), "-c",
                              "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                             capture_output=True, text=True, check=True).stdout.strip()
    runner_sites = [sysconfig.get_paths()["purelib"], *site.getsitepackages()]
    Path(purelib).joinpath("runner.pth").write_text("\n".join(runner_sites) + "\n")
    with one_build():
        subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps",
                        "--no-build-isolation", "--target", purelib, str(REPO)], check=True,
                       capture_output=True)
    check = subprocess.run([str(venv / "bin" / "python"), "-c",  # not from the repo's cwd:
                            "import tfyarn, skein; print(tfyarn.__file__)"],  # '' is sys.path[0]
                           capture_output=True, text=True, cwd=where)
    assert check.returncode == 0 and str(venv) in check.stdout, check.stderr
    return venv
