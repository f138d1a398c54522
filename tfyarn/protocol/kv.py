"""The small key-value protocol the driver, the launchers and the client share.

Two stores, same keys, same code path: a directory of files (local mode) and skein's
key-value store (YARN). Values are UTF-8 strings: plain text (an address, a reason) or
a typed record of `tfyarn.core.records`, whose codec is the only one that writes them.

Job keys (STATUS, PHASE, CLIENT, ACK, KILL, ATTEMPT, AM, MILESTONES, TRAINING) live at the top.
Everything one gang of launchers writes or reads (CLUSTER, STOP, RANKS, task/...) lives
under its gang's prefix (`gang/<g>/`, see `Scoped`), so a new gang never reads an
address, an exit or a stop request of an earlier one. Gangs are numbered 0, 1, ... per
job: a restart starts a new attempt with a new gang; on YARN a gang that gave its
containers back before it ran is followed by a new gang of the same attempt.
Must not build or parse records' JSON (`core.records`), nor decide anything about the job.
Long because the key schema and both stores (directory and skein) are kept side by side:
a key added to one is seen missing from the other.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
import urllib.parse
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence

from tfyarn.core.records import Wanted
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import DIR_FEED_POLL_S, DIR_POLL_MAX_S, DIR_POLL_S, SKEIN_POLL_S
from tfyarn.protocol.skeinlink import App
from tfyarn.system import bell as bellmod
from tfyarn.system import inotify, private

CLUSTER = "cluster"  # records.Cluster, put by the driver once every task registered
STOP = "stop"  # reason text; every launcher stops its user process when it appears
STATUS = "status"  # records.Outcome, the final one, put by the driver last
PHASE = "phase"  # what the driver is doing now: registering / running / stopping
CLIENT = "client"  # put by a watching el_submit; the driver then waits for its ACK
ACK = "status_ack"  # the client has read STATUS; the AM (and its store) may go
KILL = "kill"  # reason text; put by a client (Ctrl-C, `tfyarn kill`) to ask the driver to stop
RANKS = "ranks"  # records.RankTable (allreduce jobs), put just before CLUSTER
ATTEMPT = "attempts"  # records.Wanted: the gang now wanted, its attempt, earlier attempts
TENSORBOARD = "tensorboard"  # records.TensorBoard: its URL once it answers, or its error
PAGE = "page"  # the job page's URL (on YARN: proxied through the ResourceManager)
TENSORBOARD_DONE = "tensorboard_done"  # put by the TensorBoard side task when it ended
TASKS = "tasks"  # records.JobTasks: every task of the job, put by the driver first
JOB = "job"  # the JobSpec's own JSON, put by the driver first: a handle that attaches reads it
PREEMPTION = "skein:preemption"  # the RM's notice as skein's AM puts it (patch 0005): JSON
NOTICED = "preemption_noticed"  # the RM's time of the last notice the driver acted on
AM = "am"  # "N": put by the driver of ApplicationMaster attempt N > 1 (a lost AM resumed)
KEPT = "course_kept"  # "N": attempt N's course is kept in HDFS for a later AM attempt (YARN)
MILESTONES = "milestones"  # records.Milestones: the driver's moments (its start, gangs, verdict)
TRAINING = "training"  # records.Training: steps, metrics, attempts (the plots), put by the driver


# One gang's task keys, a dir per kind (`addr/worker:1`): whoever waits on one kind is
# not woken by another's writes (a heartbeat never wakes the driver).
TASK_KINDS = ("addr", "started", "beat", "exit", "lost", "steps")
EVENT_KINDS = ("addr", "started", "exit", "lost")  # what the driver acts on at once


def addr_key(task: Task) -> str:
    return f"addr/{task}"


def exit_key(task: Task) -> str:
    return f"exit/{task}"


def start_key(task: Task) -> str:
    return f"started/{task}"


def beat_key(task: Task) -> str:
    """Bumped by the launcher (`KV.beat`) every `timing.heartbeat_s` while it lives."""
    return f"beat/{task}"


def steps_key(task: Task) -> str:
    """Put by the launcher with a heartbeat when the task reported a new step
    (records.StepReport); read by the driver as often as heartbeats, never followed."""
    return f"steps/{task}"


def preempting_key(n: int) -> str:
    """A gang's n-th preemption notice (records.PreemptionNotice), put by the driver; every
    launcher of the gang waits for the next one and tells its tasks."""
    return f"preempting/{n}"


def lost_key(task: Task) -> str:
    """Put by whoever saw a launcher die or go silent before it reported: the driver
    (heartbeat timeout, YARN ended its container), local mode's client (dead process)."""
    return f"lost/{task}"


class KV(ABC):
    """What the protocol needs from a store: put, get, prefix scan, a bounded wait, and a
    feed of changes."""

    poll_s = DIR_POLL_S
    pushes = False  # whether `feed` is told of changes (else it rescans every poll_s)

    @abstractmethod
    def put(self, key: str, value: str) -> None: ...

    def put_many(self, items: Mapping[str, str]) -> None:
        """Several puts at once; where the store has transactions, in one round trip (a
        launcher registers its 16 tasks in one, not 16: #46's 64-rank start)."""
        for key, value in items.items():
            self.put(key, value)

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

    def feed(self, dirs: Sequence[str]) -> Feed:
        """The changes of the keys directly under `dirs` ("" is the top), as they come."""
        return PollFeed(self, dirs, self.poll_s)

    def beat(self, key: str, n: int) -> None:
        """Bump a heartbeat (its `n`th): readers only compare what `beats` gives."""
        self.put(key, str(n))

    def beats(self, prefix: str) -> dict[str, str]:
        """Every heartbeat under `prefix`, as a token that changes with each beat."""
        return self.scan(prefix)

    def done_waiting(self) -> None:  # noqa: B027 - most stores hold nothing between waits
        """This thread will not wait again: let go of what its waits held."""

    def expect(self, keys: Sequence[str]) -> None:  # noqa: B027 - most stores need nothing
        """This process will wait for `keys`: get ready now, before it announces what
        makes another process put them (skein: subscribe, see App.kv_expect)."""

    def expect_all(self) -> None:  # noqa: B027 - most stores need nothing
        """This process will follow and wait for keys anywhere (the driver): get ready for
        all of them now, once, before anyone puts one (skein: one watch of the whole
        store, which every later feed and wait shares; see App.kv_subscribe)."""


class Feed(ABC):
    """Changed keys, for a loop that acts on what others write (the driver)."""

    @abstractmethod
    def next(self, timeout: float) -> dict[str, str]:
        """Keys put since the last call, with their values (the first call: every key
        there is); empty if nothing came within `timeout` seconds."""

    def close(self) -> None:  # noqa: B027 - most feeds hold nothing
        """No more `next` calls: let go of what the feed holds."""


class PollFeed(Feed):
    """Any store: a scan every `interval`, keeping what changed."""

    def __init__(self, store: KV, dirs: Sequence[str], interval: float) -> None:
        self.store, self.dirs, self.interval = store, list(dirs), interval
        self.known: dict[str, str] = {}
        self.first = True

    def next(self, timeout: float) -> dict[str, str]:
        deadline = time.monotonic() + timeout
        while True:
            changed = {k: v for k, v in self._scan().items() if self.known.get(k) != v}
            self.known.update(changed)
            if changed or self.first or time.monotonic() >= deadline:
                self.first = False
                return changed
            time.sleep(max(0.0, min(self.interval, deadline - time.monotonic())))

    def _scan(self) -> dict[str, str]:
        """One scan of the dirs' common prefix (on YARN: one gRPC call), then theirs."""
        common = os.path.commonprefix([f"{d}/" if d else "" for d in self.dirs])
        common = common[:common.rfind("/") + 1]
        wanted = set(self.dirs)
        return {k: v for k, v in self.store.scan(common).items()
                if k.rpartition("/")[0] in wanted}


class DirKV(KV):
    """A directory of files, one per key, in dirs along the key's path (`gang/0/addr/
    worker%3A1`); a put writes a hidden temp file and renames it in, so readers never
    see halves.

    Waiting without polling: a process made the store's `ringer` (the local driver, the
    writer of every key launchers wait for) rings a bell after each of its puts, a unix
    socket every waiting launcher listens on; a single process made a `watcher` (the
    driver, the client, TensorBoard's side task) waits on inotify. Where neither serves
    (the bell not up yet, no inotify), waits poll, backing off."""

    def __init__(self, root: str, ringer: bool = False, watcher: bool = False,
                 mode: int = 0o600) -> None:
        self.root = root
        self.mode = mode  # each key's file's, made exclusively (never through a symlink)
        self.watcher = self.pushes = watcher and inotify.available()
        self._seen: dict[str, tuple[tuple[int, int, int], str]] = {}  # path -> (stat, value)
        self._made: set[str] = set()
        self._local = threading.local()
        self._watch: inotify.DirWatch | None = None  # the feeds' (one per process)
        os.makedirs(root, exist_ok=True)
        self.bell = self._bell() if ringer else None

    def _bell(self) -> bellmod.Bell | None:
        """The ringer's bell; None where it cannot be had (its name taken, no unix
        sockets): the waiters then poll, backing off."""
        try:
            return bellmod.Bell(bellmod.name_for(self.root)).start()
        except OSError:
            return None

    def _path(self, key: str) -> str:
        return os.path.join(self.root, *(urllib.parse.quote(p, safe="") for p in key.split("/")))

    def _key(self, path: str) -> str:
        rel = os.path.relpath(path, self.root)
        return "/".join(urllib.parse.unquote(p) for p in rel.split(os.sep))

    def put(self, key: str, value: str) -> None:
        path = self._path(key)
        folder, name = os.path.split(path)
        if folder not in self._made:
            os.makedirs(folder, exist_ok=True)
            self._made.add(folder)
        private.write_private(path, value.encode("utf-8"), self.mode)
        if self.bell is not None:
            self.bell.ring()

    def get(self, key: str) -> str | None:
        return self._read(self._path(key))

    @staticmethod
    def _read(path: str) -> str | None:
        try:
            with open(path, encoding="utf-8") as f:
                return f.read()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
            return None

    def beat(self, key: str, n: int) -> None:
        """A touch of the beat's file (its mtime is the token): a hundred times cheaper
        than a put, which at hundreds of launchers was most of an idle job's CPU."""
        try:
            os.utime(self._path(key))
        except FileNotFoundError:
            self.put(key, str(n))

    def beats(self, prefix: str) -> dict[str, str]:
        out = {}
        folder = self._path(prefix.rstrip("/"))
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return out
        for entry in entries:
            if entry.name.startswith("."):
                continue
            with contextlib.suppress(FileNotFoundError):
                out[self._key(entry.path)] = str(entry.stat().st_mtime_ns)
        return out

    def scan(self, prefix: str) -> dict[str, str]:
        """Every key under `prefix`; a file unchanged since the last scan (same inode,
        mtime, size: writes replace files) is not read again."""
        head = prefix.rpartition("/")[0]
        out: dict[str, str] = {}
        self._walk(self._path(head) if head else self.root, prefix, out)
        return out

    def _walk(self, folder: str, prefix: str, out: dict[str, str]) -> None:
        try:
            entries = list(os.scandir(folder))
        except (FileNotFoundError, NotADirectoryError):
            return
        for entry in entries:
            if entry.name.startswith("."):
                continue  # a put's temp file, or the bell
            if entry.is_dir(follow_symlinks=False):
                self._walk(entry.path, prefix, out)
                continue
            key = self._key(entry.path)
            if not key.startswith(prefix):
                continue
            value = self._cached(entry)
            if value is not None:
                out[key] = value

    def _cached(self, entry: os.DirEntry) -> str | None:
        try:
            st = entry.stat()
        except FileNotFoundError:
            return None
        stamp = (st.st_ino, st.st_mtime_ns, st.st_size)
        seen = self._seen.get(entry.path)
        if seen and seen[0] == stamp:
            return seen[1]
        value = self._read(entry.path)
        if value is not None:
            self._seen[entry.path] = (stamp, value)
        return value

    def wait(self, key: str, timeout: float | None = None,
             poll_s: float | None = None) -> str | None:
        deadline = None if timeout is None else time.monotonic() + timeout
        watch = inotify.DirWatch.open() if self.watcher else None
        if watch is not None:
            folder = os.path.dirname(self._path(key))
            os.makedirs(folder, exist_ok=True)
            if not watch.add(folder, inotify.MOVED_TO):
                watch.close()
                watch = None
        listener = None if watch is not None else self._listener()
        backoff = poll_s or self.poll_s
        try:
            while True:
                value = self.get(key)
                if value is not None:
                    return value
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                if watch is not None:
                    watch.wait(left)
                elif listener is not None and listener.wait(left):
                    continue
                else:  # no bell (yet): poll, less and less often
                    time.sleep(backoff if left is None else min(backoff, left))
                    backoff = min(backoff * 1.5, DIR_POLL_MAX_S)
        finally:
            if watch is not None:
                watch.close()

    def done_waiting(self) -> None:
        listener = getattr(self._local, "listener", None)
        if listener is not None:
            listener.close()
            self._local.listener = None

    def _listener(self) -> bellmod.Listener:
        """This thread's connection to the bell, kept between waits (a launcher waits
        again and again: a connection each time would keep the driver accepting)."""
        listener = getattr(self._local, "listener", None)
        if listener is None:
            listener = self._local.listener = bellmod.Listener(bellmod.name_for(self.root))
        return listener

    def feed(self, dirs: Sequence[str]) -> Feed:
        """Through this store's one inotify descriptor (every gang's feed shares it:
        the kernel allows few), else by polling."""
        if self.watcher and self._watch is None:
            self._watch = inotify.DirWatch.open()
        if self._watch is None:
            return PollFeed(self, dirs, DIR_FEED_POLL_S)
        return DirFeed(self, dirs, self._watch)


class DirFeed(Feed):
    """A DirKV's changes through inotify: only the files renamed in are read."""

    def __init__(self, store: DirKV, dirs: Sequence[str], watch: inotify.DirWatch) -> None:
        self.store, self.watch = store, watch
        self.dirs = {}
        for d in dirs:
            folder = store._path(d) if d else store.root
            os.makedirs(folder, exist_ok=True)
            watch.add(folder, inotify.MOVED_TO)
            self.dirs[folder] = d
        self.first = True

    def close(self) -> None:
        """Drop this feed's watches at once (the kernel frees them in the background, so
        the process's exit does not wait a grace period for them)."""
        self.watch.release(self.dirs)

    def next(self, timeout: float) -> dict[str, str]:
        if self.first:  # watches first, then what is there: nothing falls in between
            self.first = False
            return self._all()
        changed = self.watch.wait(timeout)
        if changed is None:  # the kernel dropped events
            return self._all()
        out = {}
        for folder, name in changed:
            d = self.dirs.get(folder)
            if d is None or name.startswith("."):
                continue
            key = (f"{d}/" if d else "") + urllib.parse.unquote(name)
            value = self.store._read(os.path.join(folder, name))
            if value is not None:
                out[key] = value
        return out

    def _all(self) -> dict[str, str]:
        """Every key in the followed dirs: each dir listed on its own (a scan of "" would
        walk the whole store, every gang's keys)."""
        out = {}
        for folder, d in self.dirs.items():
            try:
                entries = list(os.scandir(folder))
            except FileNotFoundError:
                continue
            for entry in entries:
                if entry.name.startswith(".") or entry.is_dir(follow_symlinks=False):
                    continue
                value = self.store._cached(entry)
                if value is not None:
                    out[(f"{d}/" if d else "") + urllib.parse.unquote(entry.name)] = value
        return out


class SkeinKV(KV):
    """skein's application key-value store, from inside a container or from the client;
    a call that cannot reach it raises StoreGone (see skeinlink)."""

    poll_s = SKEIN_POLL_S
    pushes = True  # skein's put events

    def __init__(self, app: App) -> None:
        self.app = app

    def feed(self, dirs: Sequence[str]) -> Feed:
        return SkeinFeed(self, dirs)

    def expect(self, keys: Sequence[str]) -> None:
        for key in keys:
            self.app.kv_expect(key)

    def expect_all(self) -> None:
        self.app.kv_subscribe([SkeinFeed.EVERY_KEY]).close()

    def put(self, key: str, value: str) -> None:
        self.app.kv_put(key, value.encode("utf-8"))

    def put_many(self, items: Mapping[str, str]) -> None:
        self.app.kv_put_many({k: v.encode("utf-8") for k, v in items.items()})

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


class SkeinFeed(Feed):
    """A SkeinKV's changes as skein's put events: one subscription to every key (the
    store's single watch in this process, see `KV.expect_all`), sifted here by dir, so
    only the followed dirs' keys come back (not heartbeats), and nothing is rescanned."""

    EVERY_KEY = ("", None)
    TOP = (("", "gang/"), ("gang0", None))  # every key outside gang/*/ ("0" > "/")

    def __init__(self, store: SkeinKV, dirs: Sequence[str]) -> None:
        self.store, self.dirs = store, list(dirs)
        self.ranges = {d: self.TOP if not d else (_prefix_range(d),) for d in self.dirs}
        self.puts = store.app.kv_subscribe([self.EVERY_KEY])
        self.first = True

    def next(self, timeout: float) -> dict[str, str]:
        if self.first:  # subscribed first, then what is there: nothing falls in between
            self.first = False
            return self._all()
        wanted = set(self.dirs)
        deadline = time.monotonic() + timeout
        while True:
            out = {k: v.decode("utf-8") for k, v in
                   self.puts.next(max(0.0, deadline - time.monotonic()))
                   if k.rpartition("/")[0] in wanted}
            if out or time.monotonic() >= deadline:
                return out

    def _all(self) -> dict[str, str]:
        out = {}
        for d, ranges in self.ranges.items():
            for start, end in ranges:
                out.update({k: v.decode("utf-8") for k, v in
                            self.store.app.kv_range(start, end).items()
                            if k.rpartition("/")[0] == d})
        return out

    def close(self) -> None:
        self.puts.close()


def _prefix_range(d: str) -> tuple[str, str]:
    """[start, end) of the keys under `d`/ (skein filters by range or prefix; a range is
    one filter type for every followed dir)."""
    return f"{d}/", f"{d}0"  # "0" is the character after "/"


class Scoped(KV):
    """One gang's view of a store: every key under `gang/<g>/`."""

    def __init__(self, store: KV, gang: int) -> None:
        self.store, self.gang = store, gang
        self.prefix = f"gang/{gang}/"
        self.poll_s = store.poll_s

    def put(self, key: str, value: str) -> None:
        self.store.put(self.prefix + key, value)

    def put_many(self, items: Mapping[str, str]) -> None:
        self.store.put_many({self.prefix + k: v for k, v in items.items()})

    def get(self, key: str) -> str | None:
        return self.store.get(self.prefix + key)

    def scan(self, prefix: str) -> dict[str, str]:
        n = len(self.prefix)
        return {k[n:]: v for k, v in self.store.scan(self.prefix + prefix).items()}

    def wait(self, key: str, timeout: float | None = None,
             poll_s: float | None = None) -> str | None:
        return self.store.wait(self.prefix + key, timeout, poll_s)

    def expect(self, keys: Sequence[str]) -> None:
        self.store.expect([self.prefix + k for k in keys])

    def done_waiting(self) -> None:
        self.store.done_waiting()

    def beat(self, key: str, n: int) -> None:
        self.store.beat(self.prefix + key, n)

    def beats(self, prefix: str) -> dict[str, str]:
        n = len(self.prefix)
        return {k[n:]: v for k, v in self.store.beats(self.prefix + prefix).items()}


def wanted(store: KV) -> Wanted:
    """The gang the driver last started (the first before it said)."""
    raw = store.get(ATTEMPT)
    return Wanted() if raw is None else Wanted.from_json(raw, ATTEMPT)


def open_kv(url: str, ringer: bool = False, watcher: bool = False) -> KV:
    """`dir:/path` for local mode, `skein:` inside a YARN container of the application.
    `ringer`, `watcher`: see DirKV (skein's store has events of its own)."""
    scheme, _, rest = url.partition(":")
    if scheme == "dir":
        return DirKV(rest, ringer, watcher)
    if scheme == "skein":
        return SkeinKV(App.current())
    raise ValueError(f"unknown key-value store {url!r}")
