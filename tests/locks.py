"""Locks among the test processes of one checkout (pytest-xdist's workers, the unit and
integration suites): a file in REPO/build, held with flock while the block runs, so a
process that dies lets go. And the test slots that `scripts/test-suites` hands out, so
the two suites side by side run two tests at a time, not four. Test-side only; tfyarn
itself takes none of these."""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Iterator
from pathlib import Path

DIR = Path(__file__).resolve().parents[1] / "build"
SLOTS = "TFYARN_TEST_SLOTS"  # a FIFO holding one byte per free slot (scripts/test-suites)


@contextlib.contextmanager
def held(name: str, shared: bool = False) -> Iterator[None]:
    """build/.NAME.lock, exclusively or (`shared`) beside other shared holders."""
    DIR.mkdir(mode=0o700, exist_ok=True)
    with open(DIR / f".{name}.lock", "a") as f:
        fcntl.flock(f, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        yield  # closing the file lets go


@contextlib.contextmanager
def cluster_share(exclusive: bool) -> Iterator[None]:
    """The sandbox cluster, shared (flock LOCK_SH) or alone (LOCK_EX) among this
    checkout's test processes, of both suites. A turnstile, held by an exclusive holder
    while it waits, stops new shared ones, so it waits for the running ones only (flock
    alone lets readers starve it)."""
    with contextlib.ExitStack() as share:
        with held("cluster-turnstile"):
            share.enter_context(held("cluster-share", shared=not exclusive))
        yield


def beside_the_integration_suite() -> bool:
    """Run by `scripts/test-suites`, the unit suite beside the integration suite."""
    return bool(os.environ.get(SLOTS))


@contextlib.contextmanager
def slot() -> Iterator[None]:
    """One of the slots `scripts/test-suites` hands out (a make-style jobserver: a byte
    read from its FIFO, written back after), so the two suites' four workers run two
    tests at a time, as one suite's two did. Taken after any cluster lock: a worker
    waiting for the cluster holds no slot, and the other suite's test runs in it. With
    no slots given (one suite alone), nothing to take."""
    path = os.environ.get(SLOTS)
    if not path:
        yield
        return
    global _slots
    if _slots is None:  # read and write ends, kept: a read waits for a byte, never an EOF
        _slots = os.open(path, os.O_RDWR)
    os.read(_slots, 1)
    try:
        yield
    finally:
        os.write(_slots, b"s")


_slots: int | None = None  # this process's descriptor of the FIFO
