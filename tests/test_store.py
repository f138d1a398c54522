"""The local store's ways of waiting without polling (#19): the driver's bell that waiting
launchers listen on, the inotify feed the driver follows, and the process tree walked
through the kernel's children lists. Real files, sockets, threads and processes."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from tfyarn.protocol import kv as kvmod
from tfyarn.system import bell as bellmod
from tfyarn.system import tree


def _until(predicate, what: str, timeout: float = 10.0) -> None:
    """Wait for `predicate` on a condition variable of the test's own (no sleep)."""
    done = threading.Event()
    for _ in range(int(timeout / 0.01)):
        if predicate():
            return
        done.wait(0.01)
    raise AssertionError(f"never: {what}")


def test_a_waiter_sleeps_on_the_bell_until_the_ringer_puts(tmp_path):
    """A launcher-side wait connects to the driver's bell and blocks there; the
    driver's put of the key wakes it with the value. Other puts ring too and the waiter
    looks again, without returning early."""
    ringer = kvmod.DirKV(str(tmp_path), ringer=True)
    waiter = kvmod.DirKV(str(tmp_path))
    got: list[str | None] = []
    thread = threading.Thread(target=lambda: got.append(waiter.wait("gang/0/cluster",
                                                                    timeout=60)))
    thread.start()
    try:
        _until(lambda: len(ringer.bell.listeners) == 1, "the waiter listening on the bell")
        ringer.put("phase", "registering")  # another key: a ring, no answer yet
        ringer.put("gang/0/cluster", '{"worker": ["h:1"]}')
        thread.join(timeout=60)
        assert got == ['{"worker": ["h:1"]}']
    finally:
        ringer.bell.close()


def test_a_waiter_without_a_bell_polls_and_still_gets_the_value(tmp_path):
    writer = kvmod.DirKV(str(tmp_path))  # no ringer: as before the driver's bell is up
    got: list[str | None] = []
    thread = threading.Thread(target=lambda: got.append(kvmod.DirKV(str(tmp_path)).wait(
        "gang/0/stop", timeout=60)))
    thread.start()
    writer.put("gang/0/stop", "bye")
    thread.join(timeout=60)
    assert got == ["bye"]


def test_a_listener_beyond_the_bells_room_is_turned_away_and_polls(tmp_path):
    bell = bellmod.Bell(bellmod.name_for(str(tmp_path)))
    bell.room = 1
    bell.start()
    try:
        first, second = (bellmod.Listener(bell.name) for _ in range(2))
        assert first.wait(5) and first.sock is not None  # rung on arrival
        second.wait(5)
        assert second.sock is None  # hung up on: it polls
        assert len(bell.listeners) == 1
    finally:
        bell.close()


def test_the_feed_gives_what_is_there_then_only_what_changed(tmp_path):
    """The driver's feed: the first call gives every key under its dirs; then only the
    keys put since, by inotify (a heartbeat dir it does not follow never shows)."""
    driver = kvmod.DirKV(str(tmp_path), watcher=True)
    launcher = kvmod.DirKV(str(tmp_path))
    launcher.put("gang/0/addr/worker:0", "h:1")
    feed = driver.feed(["", "gang/0/addr", "gang/0/exit"])
    assert isinstance(feed, kvmod.DirFeed)
    assert feed.next(5) == {"gang/0/addr/worker:0": "h:1"}
    launcher.put("gang/0/beat/worker:0", "1")
    launcher.put("gang/0/addr/worker:1", "h:2")
    launcher.put("kill", "ctrl-c")
    changed: dict[str, str] = {}
    while len(changed) < 2:
        changed.update(feed.next(30))
    assert changed == {"gang/0/addr/worker:1": "h:2", "kill": "ctrl-c"}
    assert feed.next(0.05) == {}  # nothing more: the beat was never followed


def test_scan_reads_nested_keys_and_skips_temp_files(tmp_path):
    store = kvmod.DirKV(str(tmp_path))
    store.put("gang/0/exit/worker:1", "{}")
    store.put("gang/0/cluster", "{}")
    store.put("tasks", "[]")
    (tmp_path / "gang" / "0" / "exit" / ".worker%3A2.1.1.tmp").write_text("half")
    assert store.scan("gang/0/") == {"gang/0/exit/worker:1": "{}",
                                   "gang/0/cluster": "{}"}
    assert store.scan("gang/0/exit/") == {"gang/0/exit/worker:1": "{}"}
    assert kvmod.Scoped(store, 0).scan("exit/") == {"exit/worker:1": "{}"}


def test_a_gangs_puts_at_once_land_under_its_prefix_and_reach_the_feed(tmp_path):
    """`put_many` (a launcher's tasks registered at once) through a gang's view: each key
    under the gang's prefix, each one in the driver's feed."""
    driver = kvmod.DirKV(str(tmp_path), watcher=True)
    feed = driver.feed(["gang/3/addr"])
    assert feed.next(0) == {}
    kvmod.Scoped(kvmod.DirKV(str(tmp_path)), 3).put_many(
        {"addr/worker:0": "h:1", "addr/worker:1": "h:2"})
    changed: dict[str, str] = {}
    while len(changed) < 2:
        changed.update(feed.next(30))
    assert changed == {"gang/3/addr/worker:0": "h:1", "gang/3/addr/worker:1": "h:2"}
    assert driver.scan("gang/") == changed


def test_descendants_are_found_through_the_tree_even_when_orphaned(tmp_path):
    """A child that started a daemon (setsid, double fork) and exited: as the subreaper we
    inherit the daemon, and walking our children finds it."""
    script = ("import os, sys, time\n"
              "if os.fork() == 0:\n"
              "    os.setsid()\n"
              "    if os.fork() == 0:\n"
              "        open(sys.argv[1], 'w').write(str(os.getpid()))\n"
              "        time.sleep(300)\n"
              "    os._exit(0)\n"
              "os.wait()\n")
    marker = tmp_path / "daemon.pid"
    code = ("import sys, subprocess; from tfyarn.system import spawn, tree; spawn.set_subreaper(); "
            f"subprocess.run([sys.executable, '-c', {script!r}, {str(marker)!r}]); "
            "import os, time\n"
            f"while not os.path.exists({str(marker)!r}): time.sleep(0.01)\n"
            "print(tree.descendants(os.getpid())); tree.stop_tree(1.0); "
            "print(tree.descendants(os.getpid()))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout.splitlines()
    daemon = int(marker.read_text())
    assert out[0] == f"[{daemon}]" and out[1] == "[]"
    assert not os.path.exists(f"/proc/{daemon}") or tree.proc_state(daemon) in (None, "Z")


def test_a_process_start_is_read_from_the_kernel_on_the_wall_clock():
    """tree.started_at (the milestones' launcher and driver starts, #46): a child's start
    falls between the moments before and after it was spawned, to the kernel's tick, and
    a process that is gone has none."""
    import time

    tick = 1 / os.sysconf("SC_CLK_TCK")
    before = time.time()
    child = subprocess.Popen([sys.executable, "-c", "import sys; sys.stdin.read()"],
                             stdin=subprocess.PIPE)
    after = time.time()
    try:
        at = tree.started_at(child.pid)
        assert at is not None and before - tick <= at <= after + tick, (before, at, after)
    finally:
        child.communicate(b"")
    assert tree.started_at(child.pid) is None  # reaped
