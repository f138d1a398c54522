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
import threading
import time
import urllib.parse
from abc import ABC, abstractmethod

from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import DIR_POLL_S, SKEIN_POLL_S
from tfyarn.protocol.skeinlink import App

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
TASKS = "tasks"  # JSON list of every task of the job, put by the driver first


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
    """Put by whoever saw a launcher die or go silent before it reported: the driver
    (heartbeat timeout, YARN ended its container), local mode's client (dead process)."""
    return f"task/{task}/lost"


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
    """skein's application key-value store, from inside a container or from the client;
    a call that cannot reach it raises StoreGone (see skeinlink)."""

    poll_s = SKEIN_POLL_S

    def __init__(self, app: App) -> None:
        self.app = app

    def put(self, key: str, value: str) -> None:
        self.app.kv_put(key, value.encode("utf-8"))

    def get(self, key: str) -> str | None:
        value = self.app.kv_get(key)
        return None if value is None else value.decode("utf-8")

    def scan(self, prefix: str) -> dict[str, str]:
        return {k: v.decode("utf-8") for k, v in self.app.kv_prefix(prefix).items()}

    def wait(self, key: str, timeout: float | None = None,
             poll_s: float | None = None) -> str | None:
        """Block on skein's put events (no polling)."""
        value = self.app.kv_wait(key, timeout, lambda: self.app.kv_get(key))
        return None if value is None else value.decode("utf-8")


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


def open_kv(url: str) -> KV:
    """`dir:/path` for local mode, `skein:` inside a YARN container of the application."""
    scheme, _, rest = url.partition(":")
    if scheme == "dir":
        return DirKV(rest)
    if scheme == "skein":
        return SkeinKV(App.current())
    raise ValueError(f"unknown key-value store {url!r}")
