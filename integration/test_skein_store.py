"""skein's key-value store as tfyarn uses it, against a real ApplicationMaster: a
process that makes and drops subscriptions while other processes put keys (the driver
restarting a gang while launchers register) loses no confirmation and fails no put.

PyPI's skein 0.8.2 AM answered a watch's creation or cancellation on the stream's own
thread while a put's thread sent the same stream an event; the two sends raced and a
restart's driver died in about one job in ten (`never confirmed a watch on the store`,
CI), until tfyarn worked around it (a primer watch, bounded confirmations, retried
puts). tfyarn's build of skein sends both under the store's lock (scripts/skein-patches
0002, its own test in tests/test_skein_build.py); the workarounds are gone, and this
test is the proof in use.
"""

from __future__ import annotations

import subprocess
import sys
import threading
import time

import pytest

from tfyarn.core.tfconfig import Task
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol.skeinlink import App

pytestmark = pytest.mark.concurrent  # may share the cluster (integration/conftest.py)

ROUNDS = 1000  # gangs' feeds made and dropped while puts flow (before: failed by ~150)
FIRST_GANG = 1000  # far from the running job's own gang 0


@pytest.fixture
def running_app(apps, tmp_path):
    """A running application (a standalone task sleeping); its id."""
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "standalone",
                             "-wm", "1024", "--python", sys.executable, "-c", "sleep 600"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    app_id = proc.stdout.readline().strip()
    apps.append(app_id)
    yield app_id
    proc.kill()
    proc.communicate()


def _connect(app_id: str) -> App:
    """A client of its own (its own watch stream), as each container's process has."""
    import skein
    from conftest import wait_until

    client = skein.Client()
    apps: list[App] = []

    def connected() -> bool:
        try:
            apps.append(App(client.connect(app_id, wait=False)))
        except (skein.exceptions.ApplicationNotRunningError, ValueError):
            return False
        return True

    wait_until(connected, 300, f"{app_id} running")
    return apps[0]


def _comes(feed: kvmod.Feed, key: str, within: float) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if key in feed.next(deadline - time.monotonic()):
            return True
    return False


def test_gangs_feeds_made_and_dropped_while_puts_flow(running_app):
    """The driver's pattern, a gang after another: its own puts, a feed of the new gang's
    dirs, a drop; meanwhile launchers put addresses, exits and heartbeats. Before the
    fix a watch went unconfirmed within 150 rounds, every time."""
    putter, follower = _connect(running_app), _connect(running_app)
    stop, errors, gang = threading.Event(), [], [FIRST_GANG]

    def launchers() -> None:
        i = 0
        try:
            while not stop.is_set():
                i += 1
                g, value = gang[0], str(i).encode()
                putter.kv_put(f"gang/{g}/addr/worker:{i % 2}", value)
                putter.kv_put(f"gang/{g - 1}/exit/worker:{i % 2}", value)
                putter.kv_put(f"gang/{g}/beat/worker:{i % 2}", value)
                putter.kv_put("test-client", value)
        except Exception as exc:  # noqa: BLE001 - the assertion below reports it
            errors.append(exc)

    thread = threading.Thread(target=launchers, daemon=True)
    thread.start()
    store = kvmod.SkeinKV(follower)
    try:
        for g in range(FIRST_GANG, FIRST_GANG + ROUNDS):
            gang[0] = g
            store.put("test-phase", "registering")
            feed = store.feed(["", *(f"gang/{g}/{kind}" for kind in kvmod.EVENT_KINDS)])
            feed.next(0)
            for _ in range(3):  # a gang's few steps (the driver's tick is longer)
                feed.next(0.05)
            store.put("test-phase", "stopping")
            feed.close()
            store.put("test-phase", "restarting")
        feed = store.feed([f"gang/{g}/addr"])  # and a feed still brings what is put
        feed.next(0)
        assert _comes(feed, f"gang/{g}/addr/worker:1", 30)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors
    putter.kv_put("test-last", b"1")
    assert store.wait("test-last", timeout=5) == "1"


def test_a_launchers_puts_in_one_round_trip_reach_a_follower_key_by_key(running_app):
    """`KV.put_many` (a launcher registering its tasks, then saying they started): one
    skein transaction, and a follower's feed still gets each key as its own put, as the
    driver reads them; a plain get reads each back."""
    putter, follower = _connect(running_app), _connect(running_app)
    store = kvmod.Scoped(kvmod.SkeinKV(putter), FIRST_GANG)
    feed = kvmod.SkeinKV(follower).feed([f"gang/{FIRST_GANG}/addr"])
    assert feed.next(0) == {}
    addrs = {kvmod.addr_key(Task("worker", i)): f"127.0.0.1:{40000 + i}"
             for i in range(16)}
    store.put_many(addrs)
    seen: dict[str, str] = {}
    deadline = time.monotonic() + 30
    while len(seen) < len(addrs) and time.monotonic() < deadline:
        seen.update(feed.next(deadline - time.monotonic()))
    feed.close()
    assert seen == {f"gang/{FIRST_GANG}/{k}": v for k, v in addrs.items()}
    assert {k: store.get(k) for k in addrs} == addrs
