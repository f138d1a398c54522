"""tfyarn's link to a running skein application (and, through it, gRPC).

The one module that imports skein and grpc, and where their exceptions become
`StoreGone` (a running application cannot be reached: its ApplicationMaster ended, or
the network). The gateway's YARN client (`client/skeinclient.py`) gets skein from
`tfyarns_skein()`, which first checks that it is tfyarn's build (scripts/build-skein).

- `App`: a running application, from inside one of its containers (`App.current()`) or
  from the gateway (`skeinclient.Yarn.connect`): its key-value store, its containers, its
  web UI and its final status.
- gRPC's fork handlers: off in every process that holds a skein channel and starts
  children (they aborted children on YARN); user processes get the user's setting back.

Must not submit, list or kill applications (gateway-only: `client/skeinclient.py`).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from tfyarn.core.errors import EnvironmentMissing, StoreGone

T = TypeVar("T")
Range = tuple[str, "str | None"]  # [start, end) of keys; end None: no bound
GRPC_FORK_VAR = "GRPC_ENABLE_FORK_SUPPORT"
_users_grpc_fork: str | None = None  # its value before we turned it off, for user processes


TFYARNS_SKEIN = "+tfyarn."  # in the version of skein's build by scripts/build-skein
BUILD_SKEIN = '.venv/bin/pip install "$(scripts/build-skein)"'


@functools.cache
def check_skein_build() -> None:
    """EnvironmentMissing, saying what to run, unless the installed skein is tfyarn's
    build (scripts/build-skein: its AM with the watch race fixed, preemption notices and
    parallel container starts; no distutils on Python 3.12+). PyPI's 0.8.2 would run the
    job's ApplicationMaster without those, and on 3.12+ fails to import with a traceback.
    Checked on the gateway (which ships its jar to the AM), by the version its
    `_version.py` names, found and read without importing skein (importlib.metadata's
    scan of every installed distribution took 30-40 ms of each client's start: #46)."""
    version = installed_skein_version()
    if version is None or TFYARNS_SKEIN not in version:
        found = f"skein {version} is PyPI's build" if version else "skein is not installed"
        raise EnvironmentMissing(
            f"{found}; tfyarn runs on YARN with its own build of skein (PyPI's source with "
            f"tfyarn's patches; needs a JDK and Maven the first time). In the repository, "
            f"run: {BUILD_SKEIN}")


def installed_skein_version() -> str | None:
    """The version in the importable skein's `_version.py` (tfyarn's build writes it,
    PyPI's has versioneer's JSON; both name it as `"version": "..."`), or None."""
    import importlib.util
    import re

    try:
        spec = importlib.util.find_spec("skein")
    except (ImportError, ValueError):
        return None
    for folder in (spec.submodule_search_locations or []) if spec else []:
        try:
            with open(os.path.join(folder, "_version.py"), encoding="utf-8") as f:
                found = re.search(r'"version":\s*"([^"]+)"', f.read())
        except OSError:
            continue
        return found.group(1) if found else None
    return None


def tfyarns_skein() -> Any:
    """skein, once `check_skein_build` passed."""
    check_skein_build()
    import skein

    return skein


def failures() -> tuple[type[BaseException], ...]:
    """What a skein call raises when the other side is gone: skein's family, gRPC's, and
    the OS's (a reset connection)."""
    import grpc
    import skein

    return (skein.exceptions.SkeinError, grpc.RpcError, OSError)


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


# ---------------------------------------------------------------- a running application


class App:
    """A running application, through skein's ApplicationClient (`raw`); every failed
    call raises StoreGone."""

    def __init__(self, raw: Any) -> None:
        self.raw = raw
        self.watching: dict[str, Puts] = {}  # kv_expect's subscriptions, by key
        self.kept: dict[Range, Any] = {}  # each range's watch, held for the process's life

    @classmethod
    def current(cls) -> App:
        """The application this process runs in (a YARN container of it)."""
        without_grpc_fork_support()
        import skein

        return cls(gone_on_failure(skein.ApplicationClient.from_current))

    def kv_put(self, key: str, value: bytes) -> None:
        gone_on_failure(self.raw.kv.__setitem__, key, value)

    def kv_put_many(self, items: Mapping[str, bytes]) -> None:
        """Every put in one transaction: one round trip, not one each."""
        import skein

        puts = [skein.kv.put(key, value) for key, value in items.items()]
        gone_on_failure(self.raw.kv.transaction, on_success=puts)

    def kv_get(self, key: str) -> bytes | None:
        return gone_on_failure(self.raw.kv.get, key)

    def kv_prefix(self, prefix: str) -> dict[str, bytes]:
        return dict(gone_on_failure(self.raw.kv.get_prefix, prefix))

    def kv_range(self, start: str, end: str | None) -> dict[str, bytes]:
        """Every key in [start, end) (end None: no bound)."""
        return dict(gone_on_failure(self.raw.kv.get_range, start=start, end=end))

    def kv_wait(self, key: str, timeout: float | None,
                current: Callable[[], bytes | None]) -> bytes | None:
        """`current()` once subscribed to puts of `key` (so a put between the two is never
        missed), else the next put's value, else None after `timeout`. The subscription
        stays for the next wait on `key` (see `kv_expect`)."""
        puts = self.kv_expect(key)
        value = current()
        if value is not None:
            return value
        for k, v in puts.next(timeout if timeout is not None else 1e9):
            if k == key:
                return v
        return None

    def kv_expect(self, key: str) -> Puts:
        """This process's subscription to puts of `key`, made now if it has none: made
        before the process announces what makes another put `key` (a launcher its
        address, before the driver puts the cluster spec), so that put is never missed,
        and repeated waits create nothing. A range this process already watches serves
        it without a new watch (see `kv_subscribe`)."""
        puts = self.watching.get(key)
        if puts is None:
            covering = [r for r in self.kept if _covers(r, key)]
            puts = self.watching[key] = self.kv_subscribe(covering[:1] or [(key, key + "\0")],
                                                       only=key)
        return puts

    def kv_subscribe(self, ranges: Sequence[Range], only: str | None = None) -> Puts:
        """A subscription to the puts of every key in each [start, end) range (end None:
        no bound), in one queue (of `only`'s puts alone, if given): events, not rescans.

        The ApplicationMaster is asked to watch a range once per process, by a keeper
        queue that keeps nothing, and the watch is kept: the driver follows the same
        ranges attempt after attempt, and a queue made later for a watched range, or
        closed, costs the AM no round trip. (Cancelling is safe with tfyarn's skein,
        whose AM sends a watch's replies under the store's lock: scripts/skein-patches
        0002; with PyPI's 0.8.2 a creation or cancellation raced a matching put.)"""
        for start, end in ranges:
            if (start, end) not in self.kept:
                keeper = gone_on_failure(_sieve_type(), self.raw.kv, lambda key: False)
                gone_on_failure(keeper.subscribe, start=start, end=end, event_type="put")
                self.kept[(start, end)] = keeper
        queue = gone_on_failure(_sieve_type(), self.raw.kv,
                                lambda key: only is None or key == only)
        for start, end in ranges:  # watched (just above): skein asks the AM nothing
            gone_on_failure(queue.subscribe, start=start, end=end, event_type="put")
        return Puts(queue)

    def containers(self, states: list[str] | None = None,
                   services: list[str] | None = None) -> list[Any]:
        """skein's container records (id, service_name, instance, state, exit_message,
        yarn_container_logs, ...)."""
        kw = {k: v for k, v in (("states", states), ("services", services)) if v is not None}
        return list(gone_on_failure(self.raw.get_containers, **kw))

    def add_container(self, service: str, env: dict[str, str]) -> str:
        """Start one more container of `service`; its skein id."""
        return gone_on_failure(self.raw.add_container, service, env=env).id

    def kill_container(self, container_id: str) -> None:
        """Kill a container; one that ended meanwhile is fine."""
        with contextlib.suppress(KeyError, ValueError):  # skein: no such running container
            gone_on_failure(self.raw.kill_container, container_id)

    def add_page(self, route: str, target: str, link_name: str) -> str:
        """Register a page with skein's web UI (linked from the tracking URL); its
        proxied address."""
        return gone_on_failure(self.raw.ui.add_page, route, target, link_name=link_name).address

    def shutdown(self, state: str, diagnostics: str) -> None:
        """End the application with this final status and diagnostics (plain strings:
        skein takes no str subclass, such as tfyarn's enums)."""
        gone_on_failure(self.raw.shutdown, str(state), diagnostics)


class Puts:
    """The puts a `kv_subscribe` subscription queued."""

    def __init__(self, queue: Any) -> None:
        self.queue = queue

    def next(self, timeout: float) -> list[tuple[str, bytes]]:
        """(key, value) of each put queued within `timeout` (once one came, every one
        queued by then); empty if none came."""
        import queue

        out: list[tuple[str, bytes]] = []
        block = True
        while True:
            try:
                event = gone_on_failure(self.queue.get, block, timeout)
            except queue.Empty:
                return out
            out.append((event.key, event.result.value))
            block = False

    def close(self) -> None:
        """Stop queueing (the AM's watch stays: see `App.kv_subscribe`)."""
        with contextlib.suppress(*failures()):
            self.queue.unsubscribe_all()


def _covers(r: Range, key: str) -> bool:
    start, end = r
    return start <= key and (end is None or key < end)


@functools.cache
def _sieve_type() -> type:
    """skein's event queue, keeping only the puts of keys `keep` accepts (and a broken
    stream's error): a wide watch shared by a narrow wait queues nothing else, and a
    keeper (`keep` accepts none) holds a watch without growing."""
    import skein

    class Sieve(skein.kv.EventQueue):  # type: ignore[misc]
        def __init__(self, kv: Any, keep: Callable[[str], bool]) -> None:
            super().__init__(kv)
            self.keep = keep

        def put(self, item: Any, block: bool = True, timeout: float | None = None) -> None:
            if isinstance(item, Exception) or self.keep(item.key):
                super().put(item, block, timeout)

    return Sieve


def gone_on_failure(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    try:
        return fn(*args, **kw)
    except failures() as exc:
        raise StoreGone(f"the application cannot be reached: {exc}") from None
