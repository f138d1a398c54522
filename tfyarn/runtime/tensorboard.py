"""TensorBoard beside the tasks (`python -m tfyarn.runtime.tensorboard`), one per job with
-enable_tensorboard True: its own container on YARN, its own process locally.

Runs TensorBoard from the job's environment behind a token of this run's (`tbgate`:
TensorBoard itself has no login), publishes its URL with the token once it answers HTTP
200 (or why it did not start), and stops it once the job has its final status, after
--tensorboard-linger. It is not part of
TF_CONFIG and never decides the job's outcome. Contained like a launcher: it is the child
subreaper, and a watchdog ends TensorBoard if this process is SIGKILLed.
Must not hold the job up: TensorBoard that fails to start is told, and the job goes on.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Sequence

from tfyarn.core.errors import StoreGone
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.records import TensorBoard
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.timing import TENSORBOARD_POLL_S, TENSORBOARD_START_S, WAKE_S
from tfyarn.hdfs import plugin as hdfs
from tfyarn.hdfs.jni import TaskHadoop
from tfyarn.protocol import kv as kvmod
from tfyarn.runtime import tbgate
from tfyarn.runtime.launcher import TAG_VAR, StopFlag, install_signal_handlers, reserve_port
from tfyarn.system import spawn, streams, tree
from tfyarn.system.serving import with_secret

MISSING_HINT = ("install tensorboard into the job's environment (pip install tensorboard; "
                "for -m virtual-env: into the packed env)")





def answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as resp:
            return resp.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def wait_until_up(url: str, child: subprocess.Popen, pump: streams.LinePump,
                  flag: StopFlag) -> TensorBoard:
    """Its URL once it answers, else why not (it exited, or took too long)."""
    deadline = time.monotonic() + TENSORBOARD_START_S
    while time.monotonic() < deadline and not flag.check():
        if child.poll() is not None:
            pump.join(timeout=2.0)
            tail = " | ".join(list(pump.tail)[-3:])
            hint = f"; {MISSING_HINT}" if "No module named" in tail else ""
            return TensorBoard(error=f"exit code {child.returncode}: {tail}{hint}")
        if answers(url):
            return TensorBoard(url=url)
        time.sleep(TENSORBOARD_POLL_S)
    return TensorBoard(error=f"no answer from {url} within {TENSORBOARD_START_S:g} s")


def wait_for_job_end(store: kvmod.KV, flag: StopFlag, linger_s: float) -> None:
    """Until the job has its final status (then `linger_s` more, unless it is killed), a
    signal comes, or the store is gone (on YARN: the ApplicationMaster ended)."""
    try:
        store.expect([kvmod.STATUS, kvmod.KILL])  # both now: no watch is made as puts come
        while store.wait(kvmod.STATUS, timeout=WAKE_S) is None:
            if flag.check():
                return
        if linger_s > 0:
            say(f"the job ended; staying up {linger_s / 60:g} min (--tensorboard-linger)",
                "tensorboard")
        deadline = time.monotonic() + linger_s
        while time.monotonic() < deadline and not flag.check():
            if store.wait(kvmod.KILL, timeout=min(WAKE_S, deadline - time.monotonic())):
                return
    except (StoreGone, OSError) as exc:
        say(f"the job's store is gone ({exc})", "tensorboard")


def run(spec: JobSpec, store: kvmod.KV, python: str, settings: Settings, flag: StopFlag,
        keep: set[int], tag: str, hadoop_env: bool = False) -> None:
    host = settings.advertise_host or socket.getfqdn()
    sock = reserve_port()
    port = sock.getsockname()[1]
    sock.close()  # TensorBoard binds it itself, right after
    token = secrets.token_urlsafe(24)
    added = TaskHadoop(os.environ).env() if hadoop_env else {}  # an hdfs:// logdir's libhdfs
    env = {**os.environ, **added, TAG_VAR: tag, tbgate.TOKEN_VAR: token}
    env.update(hdfs.plugin_env(env))  # an hdfs:// logdir: the same plugin as the tasks
    argv = [python, "-m", "tfyarn.runtime.tbgate", "--logdir", spec.tensorboard_dir or ".",
            "--host", host, "--port", str(port)]  # the advertised host's address only
    child = spawn.start(argv, env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       parent_death=signal.SIGKILL)
    assert child.stdout is not None
    pump = streams.LinePump(child.stdout, getattr(sys.stderr, "buffer", None))
    info = wait_until_up(with_secret(f"http://{host}:{port}/", token), child, pump, flag)
    store.put(kvmod.TENSORBOARD, info.to_json())
    say(info.announce(), "tensorboard")
    if info.url:
        wait_for_job_end(store, flag, spec.tensorboard_linger_s)
    tree.stop_tree(spec.stop_grace_s, keep, tracked={child.pid})
    tree.reap(keep)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tfyarn.runtime.tensorboard")
    p.add_argument("--job", required=True, help="path of the job JSON")
    p.add_argument("--kv", required=True, help="dir:/path or skein:")
    p.add_argument("--python", default=sys.executable, help="the job environment's python")
    p.add_argument("--hadoop-env", action="store_true", help="on YARN: the node's Hadoop "
                   "client env for TensorBoard (jni.TaskHadoop)")
    ns = p.parse_args(argv)
    with open(ns.job, encoding="utf-8") as f:
        spec = JobSpec.from_json(f.read())
    tag = os.urandom(12).hex()
    watchdog = tree.start_watchdog(TAG_VAR, tag)  # before any thread exists
    spawn.set_subreaper()
    flag = StopFlag()
    install_signal_handlers(flag)
    store = kvmod.open_kv(ns.kv)
    try:
        run(spec, store, ns.python, Settings.from_environ(), flag, {watchdog}, tag,
            ns.hadoop_env)
    finally:
        with contextlib.suppress(StoreGone, OSError):
            store.put(kvmod.TENSORBOARD_DONE, "1")
    return 0


if __name__ == "__main__":
    sys.exit(main())
