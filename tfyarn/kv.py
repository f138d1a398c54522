"""The small key-value protocol the driver, the launchers and the client share.

Two stores, same keys, same code path: a directory of files (local mode) and skein's
key-value store (YARN). Values are UTF-8 strings, usually JSON.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from abc import ABC, abstractmethod
from typing import Any

from tfyarn.tfconfig import Task

CLUSTER = "cluster"  # the cluster spec JSON, put by the driver once every task registered
STOP = "stop"  # reason text; every launcher stops its user process when it appears
STATUS = "status"  # the final status JSON, put by the driver last
PHASE = "phase"  # what the driver is doing now: registering / running / stopping
CLIENT = "client"  # put by a watching el_submit; the driver then waits for its ACK
ACK = "status_ack"  # the client has read STATUS; the AM (and its store) may go
RELEASE = "release"  # local mode: launchers may exit (on YARN the AM's shutdown ends them)
POLL_S = 0.02


def addr_key(task: Task) -> str:
    return f"task/{task}/addr"


def exit_key(task: Task) -> str:
    return f"task/{task}/exit"


def start_key(task: Task) -> str:
    return f"task/{task}/started"


class KV(ABC):
    """What the protocol needs from a store: put, get, prefix scan and a bounded wait."""

    poll_s = POLL_S

    @abstractmethod
    def put(self, key: str, value: str) -> None: ...

    @abstractmethod
    def get(self, key: str) -> str | None: ...

    @abstractmethod
    def scan(self, prefix: str) -> dict[str, str]: ...

    def wait(self, key: str, timeout: float | None = None) -> str | None:
        """Value of `key` once it exists, or None after `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            value = self.get(key)
            if value is not None:
                return value
            if deadline is not None and time.monotonic() >= deadline:
                return None
            time.sleep(self.poll_s)


class DirKV(KV):
    """One file per key, written atomically (write + rename), so readers never see halves."""

    def __init__(self, root: str) -> None:
        self.root = root
        os.makedirs(root, exist_ok=True)

    def _path(self, key: str) -> str:
        return os.path.join(self.root, urllib.parse.quote(key, safe=""))

    def put(self, key: str, value: str) -> None:
        path = self._path(key)
        tmp = f"{path}.{os.getpid()}.tmp"
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
        out = {}
        for name in os.listdir(self.root):
            key = urllib.parse.unquote(name)
            if name.endswith(".tmp") or not key.startswith(prefix):
                continue
            value = self.get(key)
            if value is not None:
                out[key] = value
        return out


class SkeinKV(KV):
    """skein's application key-value store, from inside a container or from the client."""

    poll_s = 0.25

    def __init__(self, app_client: Any) -> None:
        self.app = app_client

    def put(self, key: str, value: str) -> None:
        self.app.kv[key] = value.encode("utf-8")

    def get(self, key: str) -> str | None:
        value = self.app.kv.get(key)
        return None if value is None else value.decode("utf-8")

    def scan(self, prefix: str) -> dict[str, str]:
        return {k: v.decode("utf-8") for k, v in self.app.kv.get_prefix(prefix).items()}


def open_kv(url: str) -> KV:
    """`dir:/path` for local mode, `skein:` inside a YARN container of the application."""
    scheme, _, rest = url.partition(":")
    if scheme == "dir":
        return DirKV(rest)
    if scheme == "skein":
        import skein

        return SkeinKV(skein.ApplicationClient.from_current())
    raise ValueError(f"unknown key-value store {url!r}")
