"""What `-f` ships: default excludes, size accounting, and copying into a task dir.

Local mode copies; YARN uploads (file resources, directories as archives). Both use the
same excludes and the same size check, so `-f ./` means the same thing on both.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
from collections.abc import Iterable, Iterator

from tfyarn.errors import SpecError
from tfyarn.jobspec import ShippedFile

EXCLUDES = (".git", "__pycache__", "*.pyc", ".venv", ".pytest_cache", ".ruff_cache")


def excluded(name: str, excludes: Iterable[str] = EXCLUDES) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in excludes)


def walk(root: str, skip: Iterable[str] = ()) -> Iterator[str]:
    """Every file under `root` that ships, as paths relative to `root`."""
    skip_abs = {os.path.abspath(s) for s in skip}
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if not excluded(d)
                       and os.path.abspath(os.path.join(dirpath, d)) not in skip_abs]
        for name in filenames:
            if not excluded(name):
                yield os.path.relpath(os.path.join(dirpath, name), root)


def total_bytes(files: Iterable[ShippedFile], skip: Iterable[str] = ()) -> int:
    total = 0
    for f in files:
        if f.is_dir:
            total += sum(os.path.getsize(os.path.join(f.source, r)) for r in walk(f.source, skip))
        else:
            total += os.path.getsize(f.source)
    return total


def check_size(files: Iterable[ShippedFile], limit_mb: int | None, skip: Iterable[str] = ()) -> int:
    """Refuse to ship more than `limit_mb` (catches `-f ~`); None means --force."""
    size = total_bytes(files, skip)
    if limit_mb is not None and size > limit_mb * 1024 * 1024:
        raise SpecError(f"-f: {size / 2**20:.0f} MB to ship exceeds {limit_mb} MB; "
                        "check the -f paths or add --force")
    return size


def stage(files: Iterable[ShippedFile], task_dir: str, skip: Iterable[str] = ()) -> None:
    """Copy the shipped files into one task's working dir, keeping their hierarchy."""
    for f in files:
        target = os.path.join(task_dir, f.dest) if f.dest else task_dir
        if not f.is_dir:
            shutil.copy2(f.source, target)
            continue
        for rel in walk(f.source, skip):
            dst = os.path.join(target, rel)
            os.makedirs(os.path.dirname(dst), exist_ok=True)
            shutil.copy2(os.path.join(f.source, rel), dst)
