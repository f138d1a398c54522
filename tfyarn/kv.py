"""The small key-value protocol the driver, the launchers and the client share.

Two stores, same keys, same code path: a directory of files (local mode) and skein's
key-value store (YARN). Values are UTF-8 strings, usually JSON.

Job keys (STATUS, PHASE, CLIENT, ACK, KILL, ATTEMPT) live at the top. Everything one gang
of launchers writes or reads (CLUSTER, STOP, RANKS, task/...) lives under its attempt's
prefix (`attempt/<k>/`, see `Scoped`), so a restarted gang never reads an address, an exit
or a stop request of an earlier one.
"""

from __future__ import annotations

import json
import os
import queue
import sys
import threading
import time
import urllib.parse
from abc import ABC, abstractmethod
from typing import Any

from tfyarn.tfconfig import Task
from tfyarn.timing import DIR_POLL_S, SKEIN_POLL_S

CLUSTER = "cluster"  # the cluster spec JSON, put by the driver once every task registered
STOP = "stop"  # reason text; every launcher stops its user process when it appears
STATUS = "status"  # the final status JSON, put by the driver last
PHASE = "phase"  # what the driver is doing now: registering / running / stopping
CLIENT = "client"  # put by a watching el_submit; the driver then waits for its ACK
ACK = "status_ack"  # the client has read STATUS; the AM (and its store) may go
KILL = "kill"  # reason text; put by a client (Ctrl-C, `tfyarn kill`) to ask the driver to stop
RANKS = "ranks"  # allreduce jobs: rank table, master and rendezvous, put just before CLUSTER
ATTEMPT = "attempt"  # JSON {"attempt": k, "attempts": [earlier outcomes]}: the gang now wanted
TENSORBOARD = "tensorboard"  # JSON {"url": ...} once it answers, or {"error": ...}
PAGE = "page"  # the job page's URL (on YARN: proxied through the ResourceManager)
TENSORBOARD_DONE = "tensorboard_done"  # put by the TensorBoard side task when it ended


def addr_key(task: Task) -> str:
    return f"task/{task}/addr"


def exit_key(task: Task) -> str:
    return f"task/{task}/exit"


def start_key(task: Task) -> str:
    return f"task/{task}/started"


def beat_key(task: Task) -> str:
    """A counter the launcher bumps every HEARTBEAT_S while it lives."""
    return f"task/{task}/beat"


def lost_key(task: Task) -> str:
    """Put by whoever saw a launcher die before it reported (local mode's client)."""
    return f"task/{task}/lost"


class StoreGone(Exception):
    """The store cannot be reached any more (on YARN: the ApplicationMaster is gone)."""


class KV(ABC):
    """What the protocol needs from a store: put, get, prefix scan and a bounded wait."""

    poll_s = DIR_POLL_S

    @abstractmethod
    def put(self, key: str, value: str) -> None: ...

    @abstractmethod
    def get(self, key: str) -> str | None: ...

    @abstractmethod
    def scan(self, prefix: str) -> dict[str, str]: ...

    def wait(self, key: str, timeout: float | None = None,
             poll_s: float | None = None) -> str | None:
        """Value of `key` once it exists, or None after `timeout` seconds; a store without
        events polls every `poll_s` (default: its own interval)."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            value = self.get(key)
            if value is not None:
                return value
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(poll_s or self.poll_s)


class DirKV(KV):
    """One file per key, written atomically (write + rename), so readers never see halves."""

    def __init__(self, root: str) -> None:
        self.root = root
        self._seen: dict[str, tuple[tuple[int, int, int], str]] = {}  # name -> (stat, value)
        os.makedirs(root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, urllib.parse.quote(key, safe=""))

    def put(self, key: str, value: str) -> None:
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.{threading.get_ident()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(value)
        os.replace(tmp, path)

    def get(self, key: str) -> str | None:
        try:
            with open(self._path(key), encoding="utf-8") as f:
                return f.read()
        except FileNotFoundError:
            return None

    def scan(self, prefix: str) -> dict[str, str]:
        """Every key under `prefix`; a file unchanged since the last scan (same inode,
        mtime, size: writes replace files) is not read again, so a driver scanning a big
        idle job costs a stat per key."""
        out = {}
        with os.scandir(self.root) as entries:
            for entry in entries:
                key = urllib.parse.unquote(entry.name)
                if entry.name.endswith(".tmp") or not key.startswith(prefix):
                    continue
                try:
                    st = entry.stat()
                except FileNotFoundError:
                    continue
                stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
                seen = self._seen.get(entry.name)
                value = seen[1] if seen and seen[0] == stamp else self.get(key)
                if value is not None:
                    self._seen[entry.name] = (stamp, value)
                    out[key] = value
        return out


class SkeinKV(KV):
    """skein's application key-value store, from inside a container or from the client.

    Every skein failure (the AM went away, a connection error) becomes StoreGone, so
    callers handle one exception instead of skein's family.
    """

    poll_s = SKEIN_POLL_S

    def __init__(self, app_client: Any) -> None:
        self.app = app_client

    def _call(self, fn: Any, *args: Any) -> Any:
        import skein

        try:
            return fn(*args)
        except (skein.exceptions.SkeinError, ConnectionError, OSError) as exc:
            raise StoreGone(f"skein key-value store unreachable: {exc}") from None

    def put(self, key: str, value: str) -> None:
        self._call(self.app.kv.__setitem__, key, value.encode("utf-8"))

    def get(self, key: str) -> str | None:
        value = self._call(self.app.kv.get, key)
        return None if value is None else value.decode("utf-8")

    def scan(self, prefix: str) -> dict[str, str]:
        items = self._call(self.app.kv.get_prefix, prefix)
        return {k: v.decode("utf-8") for k, v in items.items()}

    def wait(self, key: str, timeout: float | None = None,
             poll_s: float | None = None) -> str | None:
        """Block on skein's put events (no polling): subscribe first, then get, so a put
        between the two is never missed."""
        with self._call(lambda: self.app.kv.events(key=key, event_type="put")) as events:
            value = self.get(key)
            if value is not None:
                return value
            try:
                event = self._call(events.get, True, timeout)
            except queue.Empty:
                return None
        return event.result.value.decode("utf-8")


class Scoped(KV):
    """One attempt's view of a store: every key under `attempt/<k>/`."""

    def __init__(self, store: KV, attempt: int) -> None:
        self.store, self.attempt = store, attempt
        self.prefix = f"attempt/{attempt}/"
        self.poll_s = store.poll_s

    def put(self, key: str, value: str) -> None:
        self.store.put(self.prefix + key, value)

    def get(self, key: str) -> str | None:
        return self.store.get(self.prefix + key)

    def scan(self, prefix: str) -> dict[str, str]:
        n = len(self.prefix)
        return {k[n:]: v for k, v in self.store.scan(self.prefix + prefix).items()}

    def wait(self, key: str, timeout: float | None = None,
             poll_s: float | None = None) -> str | None:
        return self.store.wait(self.prefix + key, timeout, poll_s)


def attempts(store: KV) -> tuple[int, list[dict]]:
    """The attempt the driver last started (0 before any restart) and how each earlier
    one ended (state, message, task, cause, task table)."""
    raw = store.get(ATTEMPT)
    if raw is None:
        return 0, []
    wanted = json.loads(raw)
    return int(wanted["attempt"]), list(wanted["attempts"])


def current_attempt(store: KV) -> int:
    return attempts(store)[0]


GRPC_FORK_VAR = "GRPC_ENABLE_FORK_SUPPORT"
_users_grpc_fork: str | None = None  # its value before we turned it off, for user processes


def without_grpc_fork_support() -> None:
    """gRPC's fork handlers off in this process, set before grpc loads: we start children
    with a live skein channel, and those handlers (restarting gRPC's threads in the child)
    aborted children and corrupted the parent's TLS stream on YARN."""
    global _users_grpc_fork
    if "grpc" not in sys.modules and os.environ.get(GRPC_FORK_VAR) != "false":
        _users_grpc_fork = os.environ.get(GRPC_FORK_VAR, "")
        os.environ[GRPC_FORK_VAR] = "false"


def users_env(env: dict[str, str]) -> dict[str, str]:
    """`env` with GRPC_ENABLE_FORK_SUPPORT as the user had it (a user's own gRPC code
    gets its own default, not tfyarn's setting)."""
    if _users_grpc_fork is None:
        return env
    env = {k: v for k, v in env.items() if k != GRPC_FORK_VAR}
    return {**env, GRPC_FORK_VAR: _users_grpc_fork} if _users_grpc_fork else env


def open_kv(url: str) -> KV:
    """`dir:/path` for local mode, `skein:` inside a YARN container of the application."""
    scheme, _, rest = url.partition(":")
    if scheme == "dir":
        return DirKV(rest)
    if scheme == "skein":
        without_grpc_fork_support()
        import skein

        return SkeinKV(skein.ApplicationClient.from_current())
    raise ValueError(f"unknown key-value store {url!r}")
