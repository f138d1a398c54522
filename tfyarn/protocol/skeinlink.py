"""tfyarn's link to a running skein application (and, through it, gRPC).

One of the two modules that import skein or grpc (the gateway's YARN client is
`client/skeinclient.py`), and where their exceptions become `StoreGone` (a running
application cannot be reached: its ApplicationMaster ended, or the network).

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
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from tfyarn.core.errors import StoreGone

T = TypeVar("T")
Range = tuple[str, "str | None"]  # [start, end) of keys; end None: no bound
GRPC_FORK_VAR = "GRPC_ENABLE_FORK_SUPPORT"
PRIMER_KEY = "tfyarn-primer"  # never put (see App._prime)
SUBSCRIBE_S = 10.0  # a watch the AM has not confirmed by then never will be (_confirmed)
PUT_TRIES = 5  # a put the ApplicationMaster failed (see App.kv_put) is tried this often
PUT_RETRY_S = 0.05
_users_grpc_fork: str | None = None  # its value before we turned it off, for user processes


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
        self.primer: Any = None
        self.watching: dict[str, Puts] = {}  # kv_expect's subscriptions, by key
        self.kept: dict[Range, Any] = {}  # each range's watch, held for the process's life

    @classmethod
    def current(cls) -> App:
        """The application this process runs in (a YARN container of it)."""
        without_grpc_fork_support()
        import skein

        return cls(gone_on_failure(skein.ApplicationClient.from_current))

    def _prime(self) -> None:
        """Open this process's watch stream with a watch nothing matches, before its first
        real one. skein carries every subscription of an application client over one
        stream, and its ApplicationMaster sends a stream's first message unsafely: a put
        matching a watch being created on a new stream can send it at the same time
        (`sendHeaders has already been called` in the AM's log). Then the put fails, or
        the watch's confirmation is lost and the stream breaks, and every later wait of
        the process hangs. Primed, the first message is this watch's confirmation."""
        if self.primer is None:
            self.primer = _confirmed(
                lambda: self.raw.kv.events(key=PRIMER_KEY, event_type="put"))

    def kv_put(self, key: str, value: bytes) -> None:
        """Put, again if skein's ApplicationMaster failed the call: a put whose key
        matches a watch being created at that moment can race the watch's own first
        message (`sendHeaders has already been called` in the AM's log; the value is
        stored, the call fails). A put is idempotent; a gone AM fails every try."""
        import skein

        for tries_left in range(PUT_TRIES - 1, -1, -1):
            try:
                self.raw.kv[key] = value
                return
            except skein.exceptions.ApplicationError as exc:  # not its ConnectionError
                if not tries_left:
                    raise StoreGone(f"the application failed the put of {key!r} {PUT_TRIES} "
                                    f"times: {exc}") from None
                time.sleep(PUT_RETRY_S)
            except failures() as exc:
                raise StoreGone(f"the application cannot be reached: {exc}") from None

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
        address, before the driver puts the cluster spec), no put can race its creation
        (see `_prime`), and repeated waits create nothing. A range this process already
        watches serves it without a new watch (see `kv_follow`)."""
        puts = self.watching.get(key)
        if puts is None:
            covering = [r for r in self.kept if _covers(r, key)]
            puts = self.watching[key] = self.kv_follow(covering[:1] or [(key, key + "\0")],
                                                       only=key)
        return puts

    def kv_follow(self, ranges: Sequence[Range], only: str | None = None) -> Puts:
        """A subscription to the puts of every key in each [start, end) range (end None:
        no bound), in one queue (of `only`'s puts alone, if given): events, not rescans.

        The ApplicationMaster is asked to watch a range once per process, and never to
        stop: skein's AM answers a watch's creation or cancellation on the stream's own
        thread, while a put's thread sends the same stream a matching event, and the
        two sends race (`sendHeaders has already been called`, or a confirmation lost:
        the driver restarting a gang waited for one that never came). A queue made
        later for a watched range, or closed, sends the AM nothing."""
        self._prime()
        for start, end in ranges:
            if (start, end) not in self.kept:
                keeper = gone_on_failure(_sieve_type(), self.raw.kv, lambda key: False)
                _confirmed(lambda k=keeper, s=start, e=end:
                           k.subscribe(start=s, end=e, event_type="put"))
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
        """End the application with this final status and diagnostics."""
        gone_on_failure(self.raw.shutdown, state, diagnostics)


class Puts:
    """The puts a `kv_follow` subscription queued."""

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
        """Stop queueing (the AM's watch stays: see `App.kv_follow`)."""
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


def _confirmed(subscribe: Callable[[], T]) -> T:
    """`subscribe()`, which waits for the ApplicationMaster's confirmation, bounded:
    skein's AM can lose it (a put matching the watch at its creation sends on the same
    stream at the same time), and skein would wait forever. StoreGone instead: the
    process fails, visibly, rather than hang."""
    out: list[T] = []
    failed: list[BaseException] = []

    def run() -> None:
        try:
            out.append(gone_on_failure(subscribe))
        except BaseException as exc:  # noqa: BLE001 - raised again in the caller's thread
            failed.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(SUBSCRIBE_S)
    if failed:
        raise failed[0]
    if not out:
        raise StoreGone(f"skein's ApplicationMaster never confirmed a watch on the store in "
                        f"{SUBSCRIBE_S:g} s")
    return out[0]


def gone_on_failure(fn: Callable[..., T], *args: Any, **kw: Any) -> T:
    try:
        return fn(*args, **kw)
    except failures() as exc:
        raise StoreGone(f"the application cannot be reached: {exc}") from None
