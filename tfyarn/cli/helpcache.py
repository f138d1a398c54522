"""`el_submit --help` kept: the text click rendered the last time for this tfyarn and
this width, in the user's cache, so the next help costs an interpreter's start and a
file read (click and the flag table cost twice that; `cli.entry` serves it, `cli.main`
keeps what it renders).

The file is read only when it is the user's own and nobody else may write it, in a 0700
dir; its name carries a fingerprint of tfyarn's files (inode, size, mtime), so an edit
or an upgrade renders anew (click's own upgrade does not: its rendering has been stable
across its 8.x releases). Must not import anything beyond `os`, nor keep anything but the
help text.
"""

from __future__ import annotations

import os

HELP_ARGS = (["--help"], ["-h"])


def help_width() -> int:
    """The width click wraps its help to (its HelpFormatter: the terminal's columns, at
    most the 100 of cli.main's CONTEXT, less 2; at least 50), without importing shutil."""
    try:
        columns = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        columns = 0
    if columns <= 0:  # as shutil.get_terminal_size: COLUMNS, else stdout's terminal, else 80
        try:
            columns = os.get_terminal_size(1).columns
        except OSError:
            columns = 80
    return max(min(columns, 100) - 2, 50)


def help_path(prog: str) -> str:
    """Where `prog`'s help for this tfyarn's files and this width is kept."""
    package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    h = 0
    for root, dirs, files in os.walk(package):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith(".py"):
                st = os.stat(os.path.join(root, name))  # ints: hash() is not salted
                h = hash((h, st.st_ino, st.st_size, st.st_mtime_ns)) & 0xFFFFFFFFFFFF
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "tfyarn", "help", f"{prog}-{h:012x}-{help_width()}.txt")


def read_help(prog: str) -> str | None:
    """The kept help, where it is there and the user's own (else None: render it)."""
    path = help_path(prog)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if st.st_uid != os.geteuid() or st.st_mode & 0o022:
            return None
        return os.read(fd, 1 << 20).decode("utf-8")
    finally:
        os.close(fd)


def keep_help(prog: str, text: str) -> None:
    """Keep `prog`'s rendered help (0600 in a 0700 dir, renamed in whole); a cache that
    cannot be written costs the next help its render, nothing else."""
    path = help_path(prog)
    folder = os.path.dirname(path)
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        tmp = f"{path}.{os.getpid()}"
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError:
        return
