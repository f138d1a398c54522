"""Locks among the test processes of one checkout (pytest-xdist's workers, the unit and
integration suites): a file in REPO/build, held with flock while the block runs, so a
process that dies lets go. Test-side only; tfyarn itself takes none of these."""

from __future__ import annotations

import contextlib
import fcntl
from collections.abc import Iterator
from pathlib import Path

DIR = Path(__file__).resolve().parents[1] / "build"


@contextlib.contextmanager
def held(name: str, shared: bool = False) -> Iterator[None]:
    """build/.NAME.lock, exclusively or (`shared`) beside other shared holders."""
    DIR.mkdir(mode=0o700, exist_ok=True)
    with open(DIR / f".{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield  # closing the file lets go
