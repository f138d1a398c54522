"""What `-f` ships: one walk, one symlink policy, one size check, for both backends.

Policy: links to files and to directories are followed (their targets ship as plain
files and dirs); a link loop, a dangling link, a FIFO/socket/device or an unreadable
file is refused with an error naming it. Default excludes apply everywhere. Local mode
copies the files once per job and links their top-level entries into each task dir
(symlinks to one shared copy, as YARN links localized resources into a container's
working dir); YARN uploads files and dir archives.
Must not copy or upload: it decides what ships, staging and local mode carry it.
"""

from __future__ import annotations

import errno
import fnmatch
import os
import shutil
import stat
from collections.abc import Collection, Iterable, Iterator
from dataclasses import dataclass

from tfyarn.core.errors import SpecError
from tfyarn.core.jobspec import ShippedFile
from tfyarn.core.policy import plural
from tfyarn.core.progress import Progress

EXCLUDES = (".git", "__pycache__", "*.pyc", ".venv", ".pytest_cache", ".ruff_cache")


def excluded(name: str, excludes: Iterable[str] = EXCLUDES) -> bool:
    return any(fnmatch.fnmatch(name, pattern) for pattern in excludes)


def _stat(path: str) -> os.stat_result:
    """stat() following links, with every way it can fail said in one -f line."""
    try:
        return os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise SpecError(f"-f: {path} is a dangling symlink (to {os.readlink(path)!r}); fix "
                            "or remove it") from None
        raise SpecError(f"-f: {path} vanished while being read") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SpecError(f"-f: {path} is a symlink loop; remove the link") from None
        raise SpecError(f"-f: cannot read {path}: {exc.strerror}") from None


def _check_file(path: str, st: os.stat_result) -> None:
    if not stat.S_ISREG(st.st_mode):
        kind = ("a FIFO" if stat.S_ISFIFO(st.st_mode) else "a socket" if stat.S_ISSOCK(st.st_mode)
                else "a device or special file")
        raise SpecError(f"-f: {path} is {kind}, not a file; leave it out of -f")
    if not os.access(path, os.R_OK):
        raise SpecError(f"-f: {path} is not readable (permissions); fix them or leave it out")


def walk(root: str, skip: Iterable[str] = ()) -> Iterator[tuple[str, int]]:
    """(path relative to `root`, size) of every file under `root` that ships, links
    followed."""
    skip_abs = {os.path.abspath(s) for s in skip}
    st = _stat(root)
    yield from _visit(root, "", {(st.st_dev, st.st_ino)}, skip_abs)


def _visit(path: str, rel: str, ancestors: frozenset | set,
           skip: Collection[str]) -> Iterator[tuple[str, int]]:
    try:
        names = sorted(os.listdir(path))
    except OSError as exc:
        raise SpecError(f"-f: cannot list {path}: {exc.strerror}") from None
    for name in names:
        full, sub = os.path.join(path, name), os.path.join(rel, name)
        if excluded(name) or os.path.abspath(full) in skip:
            continue
        st = _stat(full)
        if stat.S_ISDIR(st.st_mode):
            key = (st.st_dev, st.st_ino)
            if key in ancestors:
                raise SpecError(f"-f: {full} is a symlink loop (it leads back to a directory "
                                "above it); remove the link or leave its dir out of -f")
            yield from _visit(full, sub, {*ancestors, key}, skip)
        else:
            _check_file(full, st)
            yield sub, st.st_size


@dataclass(frozen=True)
class Inventory:
    """Every file that ships: (source path, destination relative to the working dir)."""

    entries: tuple[tuple[str, str], ...]
    total_bytes: int

    def top_level(self) -> list[str]:
        """The names that appear directly in a task's working dir."""
        return sorted({dest.split(os.sep, 1)[0] for _, dest in self.entries})


def inventory(files: Iterable[ShippedFile], limit_mb: int | None,
              skip: Iterable[str] = ()) -> Inventory:
    """Walk every `-f` entry once, apply the policy and refuse more than `limit_mb`
    (catches `-f ~`; None means --force)."""
    entries: list[tuple[str, str]] = []
    total = 0
    for f in files:
        if f.remote:  # localized by YARN / fetched by local mode: nothing to walk here
            continue
        if not f.is_dir:
            st = _stat(f.source)
            _check_file(f.source, st)
            entries.append((f.source, f.dest))
            total += st.st_size
            continue
        for rel, size in walk(f.source, skip):
            entries.append((os.path.join(f.source, rel), os.path.join(f.dest, rel)))
            total += size
    if limit_mb is not None and total > limit_mb * 1024 * 1024:
        raise SpecError(f"-f: {total / 2**20:.0f} MB to ship exceeds {limit_mb} MB; "
                        "check the -f paths or add --force")
    return Inventory(tuple(entries), total)


def copy_into(inv: Inventory, root: str) -> None:
    """Copy every shipped file under `root`, keeping the hierarchy (the one real copy)."""
    made: set[str] = set()
    progress = Progress(f"copying -f ({plural(len(inv.entries), 'file')})", inv.total_bytes)
    for src, dest in inv.entries:
        target = os.path.join(root, dest)
        parent = os.path.dirname(target)
        if parent not in made:
            os.makedirs(parent, exist_ok=True)
            made.add(parent)
        shutil.copy2(src, target)
        progress.add(os.path.getsize(target))
    progress.finish()


def link_into(names: Iterable[str], shared: str, task_dir: str) -> None:
    """Give a task dir the shared copy: one symlink per top-level entry."""
    for name in names:
        os.symlink(os.path.join(shared, name), os.path.join(task_dir, name))
