"""The process table as checks read it: tests, integration tests and scripts/faults.py.

Deliberately separate from tfyarn's own /proc code (tfyarn.system.tree), which is what these
checks check.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import NamedTuple


class Proc(NamedTuple):
    pid: int
    comm: str
    cmdline: str
    env: frozenset[bytes]
    cwd: str = ""  # a forked process (locally: the driver, the fork server, launchers)
    # carries its parent's environment block; its working dir (under the job dir) names it
    ppid: int = 0  # read with the rest, so a process that exits after the scan still has one


def live() -> Iterator[Proc]:
    """Every live (non-zombie) process whose details this user may read."""
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{name}/stat") as f:
                state, ppid = f.read().rsplit(")", 1)[1].split()[:2]
            if state == "Z":
                continue
            with open(f"/proc/{name}/environ", "rb") as f:
                env = frozenset(f.read().split(b"\0"))
            with open(f"/proc/{name}/cmdline", "rb") as f:
                cmd = f.read().replace(b"\0", b" ").decode(errors="replace")
            with open(f"/proc/{name}/comm") as f:
                comm = f.read().strip()
            cwd = os.readlink(f"/proc/{name}/cwd")
        except OSError:
            continue
        yield Proc(int(name), comm, cmd, env, cwd, int(ppid))


def carrying(*pairs: str) -> list[Proc]:
    """Live processes whose environment holds any of the `VAR=value` pairs."""
    needles = {p.encode() for p in pairs}
    return [p for p in live() if needles & p.env]
