"""Files and dirs that are this user's alone, on a machine shared with other users.

A gateway has many Unix users and one /tmp: anything tfyarn finds there by name may have
been planted by another user (a decoy dir, a symlink to the victim's ticket cache). So
what tfyarn creates is made exclusively and private (0700 dirs, 0600 files), and what it
reads back is opened without following a symlink and checked for its owner first. Also
the per-user secret that admits a user to their own local web pages. Owns those checks;
must not know what the files hold.
"""

from __future__ import annotations

import contextlib
import hmac
import os
import secrets
import stat
import threading
from typing import BinaryIO

from tfyarn.core.errors import EnvironmentMissing
from tfyarn.core.settings import trusted  # noqa: F401 - the one rule, re-exported

SECRET_FILE = "web-token"  # in ~/.tfyarn: admits its owner to their local pages


class NotPrivate(EnvironmentMissing):
    """A path tfyarn would use is another user's, a symlink, or open to others."""


def _uid() -> int:
    return os.geteuid()


def private_dir(path: str) -> str:
    """`path` as a dir of this user's, 0700: made if missing (parents as needed); an
    existing one must be a real dir (not a symlink) owned by this user and writable by
    nobody else (it is then closed to others: chmod 0700). Else NotPrivate."""
    try:
        os.mkdir(path, 0o700)
    except FileNotFoundError:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return private_dir(path)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode) or not stat.S_ISDIR(st.st_mode):
        raise NotPrivate(f"{path} is not a directory of yours (a symlink or a file); "
                         "remove it, or set TMPDIR (TFYARN_CACHE) to a dir of your own")
    if st.st_uid != _uid():
        raise NotPrivate(f"{path} belongs to uid {st.st_uid}, not to you (uid {_uid()}): "
                         "another user may have planted it; remove it (as root) or set "
                         "TMPDIR (TFYARN_CACHE) to a dir of your own")
    if st.st_mode & 0o022:
        raise NotPrivate(f"{path} is writable by other users (mode {st.st_mode & 0o777:o}), "
                         "so what is in it may be theirs; remove it, or set TMPDIR "
                         "(TFYARN_CACHE) to a dir of your own")
    if st.st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def read_checked(path: str, limit: int) -> tuple[bytes, int] | None:
    """A regular file's bytes and its owner's uid, opened without following a symlink;
    None when it is missing. At most `limit` bytes: a bigger file is refused, not read
    into memory (NotPrivate)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:  # ELOOP: a symlink
        raise NotPrivate(f"{path}: not read ({exc.strerror}): tfyarn reads no symlink "
                         "back") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise NotPrivate(f"{path}: not a regular file; not read")
        if st.st_size > limit:
            raise NotPrivate(f"{path}: {st.st_size} bytes, more than the {limit} such a file "
                             "may have; not read")
        chunks, left = [], limit + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > limit:
            raise NotPrivate(f"{path}: grew past {limit} bytes while read; not read")
        return data, st.st_uid
    finally:
        os.close(fd)


def open_owned(path: str) -> tuple[BinaryIO, int] | None:
    """A regular file of this user's, opened for reading without following a symlink,
    and its size; None when it is missing or not such a file (another user's, a link)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != _uid():
        os.close(fd)
        return None
    return os.fdopen(fd, "rb"), st.st_size


def write_private(path: str, data: bytes, mode: int = 0o600) -> None:
    """`data` to `path` whole (a hidden temp file made exclusively with `mode`, never
    through a symlink, then renamed in: readers never see halves)."""
    folder, name = os.path.split(path)
    tmp = os.path.join(folder, f".{name}.{os.getpid()}.{threading.get_ident()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 mode)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        if mode & 0o077:  # the umask may have taken bits this file is meant to have
            os.fchmod(fd, mode)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    os.replace(tmp, path)


def user_secret(home: str) -> str:
    """This user's secret for their local web pages (job page, `tfyarn history`): kept in
    ~/.tfyarn/web-token, 0600, made on first use. A file found open to others is replaced
    (whoever read it holds a stale secret); one of another user's is refused."""
    folder = private_dir(os.path.join(os.path.expanduser(home), ".tfyarn"))
    path = os.path.join(folder, SECRET_FILE)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = -1
    except OSError as exc:
        raise NotPrivate(f"{path}: not read ({exc.strerror}); remove it") from None
    if fd >= 0:
        try:
            st = os.fstat(fd)
            if st.st_uid != _uid() or not stat.S_ISREG(st.st_mode):
                raise NotPrivate(f"{path} is not a file of yours; remove it")
            token = os.read(fd, 256).decode("ascii", "replace").strip()
        finally:
            os.close(fd)
        if not st.st_mode & 0o077 and len(token) >= 32:
            return token
    token = secrets.token_urlsafe(32)
    write_private(path, token.encode() + b"\n", 0o600)
    return token


def same_secret(given: str | None, secret: str) -> bool:
    """Whether `given` is `secret` (compared in constant time)."""
    return bool(given) and hmac.compare_digest(given.encode(), secret.encode())
