"""The launcher (`python -m tfyarn.runtime.launcher`): per container on YARN, per group locally.

Owns a container's life: for each of its tasks (one, or k with -ppn/-wnpg) reserve a
port and register host:port, send heartbeats, wait for the driver's cluster spec (and
rank table for allreduce jobs), run the user command once per task as the launcher's
own direct child with that task's env (TF_CONFIG or ranks, GPU devices), stop them when
the driver, a signal or its parent's death says so, contain everything they started
(it is the child subreaper, and a watchdog ends the tree if the launcher itself is
SIGKILLed), and publish each task's exit record as soon as it ends. It exits 0 once
every record is out: the driver decides the job's outcome (and skein would end the
application at once on a failed service). Locally one process serves several containers
(`Hosted`: each its dir, log file and tag), as it serves -ppn's tasks on YARN: a process
per local container cost 14 ms of CPU a task (#46). Must not decide anything about the job.
Long because a container's life (register, run, contain, report) is one sequence, read
best in one file.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import functools
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import IO

from tfyarn.core import records
from tfyarn.core.errors import StoreGone
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.policy import (
    docker_gpu_end,
    memory_end,
    memory_flag_for,
    stderr_excerpt,
    token_end,
    token_expired,
)
from tfyarn.core.records import (
    Cause,
    Cluster,
    PreemptionNotice,
    RankTable,
    Started,
    StepReport,
    TaskEnd,
)
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import (
    Task,
    allreduce_env,
    checkpoint_dir,
    container_devices,
    device_env,
    identity_env,
    model_dir,
    run_env,
    tf_env,
    thread_env,
)
from tfyarn.core.timing import (
    CLUSTER_WAIT_SLACK_S,
    PARENT_CHECK_S,
    STOP_WAIT_S,
    WAKE_S,
    heartbeat_s,
)
from tfyarn.hdfs import plugin as hdfs
from tfyarn.hdfs.jni import TaskHadoop
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol.skeinlink import users_env
from tfyarn.runtime import docker, keytab, preemption, steps
from tfyarn.runtime.callfn import RESULT_VAR
from tfyarn.system import spawn, streams, tree

TAG_VAR = "TFYARN_TASK_TAG"  # marks every process of one launcher's tree, for the watchdog





def container_tag(job_id: str, first: Task, gang: int) -> str:
    """The tag (TAG_VAR's value, then `.<slot>`) on every process one launcher starts:
    by job (on YARN the application id), gang and first task, so local mode's client
    can end what a launcher that died left behind without asking it."""
    return f"{job_id}.{gang}.{first}"


def reserve_port() -> socket.socket:
    """Bind port 0 and keep the socket open until just before the user process starts,
    so no other task on the host can be handed the same port in between."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("", 0))
    return sock


def shell_argv(command: str, path: str | None = None) -> list[str]:
    """`-c` is one shell command line, run by bash where there is one (bash execs a lone
    simple command, so the user's process is the launcher's direct child)."""
    dirs = (path if path is not None else os.environ.get("PATH", "")).split(os.pathsep)
    bash = next((os.path.join(d, "bash") for d in dirs
                 if d and os.access(os.path.join(d, "bash"), os.X_OK)), None)
    return [bash or "/bin/sh", "-c", command]


@dataclass
class StopFlag:
    """Why the tasks must stop (None while they may run); set from signals and threads,
    `wake` cuts every wait short when it is set."""

    reason: str | None = None
    parent: int = field(default_factory=os.getppid)
    wake: threading.Event = field(default_factory=threading.Event)

    def set(self, reason: str) -> None:
        if self.reason is None:
            self.reason = reason
        self.wake.set()

    def check(self) -> str | None:
        if self.reason is None and os.getppid() != self.parent:
            self.set("the launcher's parent died")
        return self.reason


def install_signal_handlers(flag: StopFlag) -> None:
    """SIGTERM/SIGINT/SIGHUP stop the tasks. The handler takes no lock: Python runs it on
    the main thread between two bytecodes, possibly while that thread holds `flag.wake`'s
    lock (inside Event.wait or clear), and setting the event there would deadlock every
    thread of the launcher for good (seen: a launcher left running after its client was
    SIGKILLed). It records the reason and writes a byte; a relay thread sets the event."""
    rfd, wfd = os.pipe()
    os.set_blocking(wfd, False)

    def relay() -> None:
        while os.read(rfd, 64):
            flag.wake.set()

    def handler(signum: int, _frame: object) -> None:
        if flag.reason is None:
            flag.reason = f"launcher received {signal.Signals(signum).name}"
        with contextlib.suppress(OSError):  # a full pipe: a wake-up is pending anyway
            os.write(wfd, b"!")

    _daemon(relay)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, handler)


def _daemon(target: Callable[[], object]) -> threading.Thread:
    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    return thread


def heartbeat(store: kvmod.KV, tasks: Mapping[Task, str], flag: StopFlag,
              done: threading.Event, interval: float,
              reports: dict[Task, StepReport]) -> None:
    """Bump each task's beat every `interval` until `done`; the driver counts a task
    whose beat stops moving as lost. A step the task reported since (`tfyarn.progress`,
    in its container's dir, the value in `tasks`) goes with it."""
    n = 0
    while not done.is_set():
        n += 1
        try:
            for task, cwd in tasks.items():
                store.beat(kvmod.beat_key(task), n)
                forward_steps(store, task, cwd, reports)
        except (StoreGone, OSError) as exc:
            flag.set(f"the job's store is gone ({exc}); on YARN the ApplicationMaster ended")
            return
        done.wait(interval)


def forward_steps(store: kvmod.KV, task: Task, cwd: str,
                  reports: dict[Task, StepReport]) -> None:
    """A step the task reported since the last call (`tfyarn.progress`), to the store."""
    new = steps.read(steps.path_for(cwd, str(task)), reports.get(task))
    if new is not None:
        reports[task] = new
        store.put(kvmod.steps_key(task), new.to_json())


def watch_stop(store: kvmod.KV, flag: StopFlag, done: threading.Event,
               after: threading.Event) -> None:
    """Once the cluster spec is in (`after`; until then the main thread also looks for a
    stop), wait for the driver's stop request: its bell locally, skein's events on YARN."""
    after.wait()
    while not done.is_set():
        try:
            reason = store.wait(kvmod.STOP, timeout=STOP_WAIT_S)
        except (StoreGone, OSError) as exc:
            flag.set(f"the job's store is gone ({exc}); on YARN the ApplicationMaster ended")
            return
        if reason is not None:
            flag.set(f"stopped by the driver: {reason}")
            return


def watch_preemption(launcher: Launcher) -> None:
    """Once the tasks run, each preemption notice the driver passes to the gang is told
    to them (`preemption.tell`): the file `tfyarn.preempting()` looks at, and the job's
    signal if it named one."""
    store, done = launcher.store, launcher.done
    launcher.cluster_seen.wait()
    n = 1
    while not done.is_set():
        try:
            raw = store.wait(kvmod.preempting_key(n), timeout=STOP_WAIT_S)
            if raw is None:
                continue
            store.expect([kvmod.preempting_key(n + 1)])
        except (StoreGone, OSError):
            return  # the stop watch says why
        notice = PreemptionNotice.from_json(raw, kvmod.preempting_key(n))
        n += 1
        words = (f"YARN's preemption notice for {', '.join(notice.containers)} "
                 f"({'strict' if notice.strict else 'negotiable'})")
        for hosted in launcher.args.hosted:
            pids = [s.child.pid for s in launcher.slots
                    if s.child is not None and s.hosted is hosted]
            why = preemption.tell(preemption.path_for(hosted.cwd), words, pids,
                                  dict(launcher.args.job.env).get(preemption.SIGNAL_ENV))
            for task in hosted.tasks:
                say(f"{words}: told the task (tfyarn.preempting() is true"
                    + (f"; {why})" if why else ")"), task, to=hosted.err)


def wait_for_cluster(store: kvmod.KV, flag: StopFlag, deadline: float) -> Cluster | None:
    """The cluster spec, or None if the job is stopped (a signal, the driver's stop
    request) or the deadline passes first."""
    try:
        while time.monotonic() < deadline:
            raw = store.wait(kvmod.CLUSTER, timeout=WAKE_S)
            if raw is not None:
                return Cluster.from_json(raw, kvmod.CLUSTER)
            if (reason := store.get(kvmod.STOP)) is not None:
                flag.set(f"stopped by the driver: {reason}")
            if flag.check():
                return None
        flag.set("the driver never published the cluster spec")
        return None
    finally:
        store.done_waiting()  # one bell connection per launcher: watch_stop's, from now


@dataclass
class Hosted:
    """A container this launcher serves: on YARN (and with -m docker) the one it runs in,
    with the process's own working dir and output; locally each container of the gang
    (#46: a process per container cost 14 ms of CPU a task), with its dir and log file."""

    tasks: tuple[Task, ...]
    cwd: str
    gpus: str  # "auto" (YARN: ask the container), "none", or a list of device ids
    log: str | None = None  # its log file; None: this process's stdout and stderr
    tag: str = ""  # container_tag: every process of its tasks carries it (TAG_VAR)
    out: IO[bytes] | None = None  # its tasks' output goes here ...
    err: IO[str] | None = None  # ... and what tfyarn says of them here

    def open(self, job_id: str, gang: int) -> None:
        self.tag = container_tag(job_id, self.tasks[0], gang)
        if self.log is None:
            self.out, self.err = getattr(sys.stdout, "buffer", None), None
            return
        # unbuffered and appending: one write per line, whichever thread writes it
        self.out = open(self.log, "ab", buffering=0)  # noqa: SIM115 (the launcher's life)
        self.err = open(self.log, "a", buffering=1, encoding="utf-8")  # noqa: SIM115

    @property
    def task_err(self) -> IO[bytes] | None:
        """Where its tasks' stderr goes."""
        return self.out if self.log is not None else getattr(sys.stderr, "buffer", None)


@dataclass
class Slot:
    """One task of a container: its reserved port, its process and its output."""

    task: Task
    index: int  # position in the container: local slot, device slice
    sock: socket.socket
    addr: str
    tag: str
    hosted: Hosted
    child: subprocess.Popen | None = None
    pumps: tuple[streams.LinePump, ...] = ()
    rank: int | None = None
    container: str = ""  # -m docker: its docker container's name
    gpus: list[str] = field(default_factory=list)  # -m docker: the node's GPU ids it gets

    @property
    def result_file(self) -> str:
        """Where a `tfyarn.run` task leaves its result (the working dir: docker mounts it)."""
        return os.path.join(self.hosted.cwd, f".tfyarn-result-{self.task.type}-{self.task.index}")


def supervise(slots: Sequence[Slot], flag: StopFlag, grace: float, keep: set[int],
              report: Callable[[Slot, int], None]) -> None:
    """Wait for every slot's process, reporting each as it ends (and ending what it left
    behind); stop every tree when told to. Nothing any of them started outlives this."""
    running = {s.task: s for s in slots if s.child is not None}
    watch_ends([s.child for s in running.values()], flag.wake)
    while running:
        flag.wake.clear()
        for slot in [s for s in running.values() if s.child.returncode is not None]:
            del running[slot.task]
            # its daemons: not in the trees of the tasks still running (a launcher
            # serving many containers would read every process's environment each time)
            tree.stop_tagged(TAG_VAR, slot.tag, min(grace, 1.0),
                             keep | {s.child.pid for s in running.values()})
            report(slot, slot.child.returncode)
        if running and flag.check():
            tree.stop_tree(grace, keep, tracked={s.child.pid for s in running.values()})
            for slot in running.values():
                report(slot, slot.child.wait())
            break
        flag.wake.wait(PARENT_CHECK_S)  # a child's end, a signal or a stop wakes it at once
    tree.stop_tree(min(grace, 1.0), keep)
    tree.reap(keep)


def watch_ends(children: Sequence[subprocess.Popen], wake: threading.Event) -> None:
    """Reap each child as it ends and set `wake`: one thread over the children's pidfds
    (a launcher serving hundreds of local tasks held a thread for each, and each scan of
    its children read a file per thread), or a thread per child where pidfds are missing."""
    sel = selectors.DefaultSelector()
    alone = []
    for child in children:
        try:
            sel.register(os.pidfd_open(child.pid), selectors.EVENT_READ, child)
        except (OSError, AttributeError):  # too old a kernel, or out of descriptors
            alone.append(child)
    for child in alone:
        _daemon(lambda c=child: (c.wait(), wake.set()))

    def run() -> None:
        with sel:
            while sel.get_map():
                for key, _ in sel.select():
                    sel.unregister(key.fd)
                    os.close(key.fd)
                    key.data.wait()
                    wake.set()

    if sel.get_map():
        _daemon(run)
    else:
        sel.close()


@dataclass(frozen=True)
class LaunchArgs:
    job: JobSpec
    hosted: tuple[Hosted, ...]  # the containers served: one, or locally a gang's
    store_url: str
    docker: docker.DockerRun | None  # -m docker: how this container's tasks run in the image
    attempt: int = 0  # which run of the user command this is (restarts; TFYARN_ATTEMPT)
    gang: int = 0  # which gang of containers: keys are read and written under it
    watchdog: bool = True  # fork one (YARN); local mode's client does its work instead
    memory_mb: int = 0  # this container's memory when grown (--memory-growth); 0: the job's
    hadoop_env: bool = False  # on YARN: the tasks get the node's Hadoop client env

    @property
    def tasks(self) -> tuple[Task, ...]:
        return tuple(t for h in self.hosted for t in h.tasks)

    def memory_of(self, task: Task) -> int:
        """The container's memory: grown after a memory kill, else what the job asked."""
        return self.memory_mb or self.job.container_of(task).resources.memory_mb


def warm() -> None:
    """What every launcher works out the same way, done once in local mode's fork server
    before it forks them (#46: each of 256 launchers built its parser, compiling argparse's
    patterns, and evaluated the records' annotations, ~2 ms of CPU apiece)."""
    _parser().parse_args(["--job", "-", "--tasks", "-", "--kv", "-"])  # compiles its patterns
    records.warm(Cluster, RankTable, Started, StepReport, TaskEnd, PreemptionNotice)


@functools.cache
def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m tfyarn.runtime.launcher")
    p.add_argument("--job", required=True, help="path of the job JSON")
    one = p.add_mutually_exclusive_group(required=True)
    one.add_argument("--tasks", help="this container's tasks, e.g. worker:0,worker:1 (never "
                     "derived)")
    one.add_argument("--container", action="append", nargs=4,
                     metavar=("TASKS", "DIR", "LOG", "GPUS"), help="local mode: a container "
                     "served (repeatable): its tasks (as --tasks), working dir, log file and "
                     "GPUs (as --gpus)")
    p.add_argument("--kv", required=True, help="dir:/path or skein:")
    p.add_argument("--gpus", default="auto", help="GPU ids of this container, none, or auto")
    p.add_argument("--docker-image", help="-m docker: run the command in this image")
    p.add_argument("--docker-runtime", choices=docker.RUNTIMES[1:], default="tfyarn",
                   help="tfyarn: `docker run` from here; yarn: YARN's runtime put us in it")
    p.add_argument("--docker-network", default="host", help="-m docker: the site's network")
    p.add_argument("--docker-mount", action="append", default=[],
                   help="-m docker: a site mount, src:dst[:ro|rw] (repeatable)")
    p.add_argument("--attempt", type=int, default=0, help="the gang's attempt number (0 first; "
                   "restarts count up; the tasks' TFYARN_ATTEMPT)")
    p.add_argument("--gang", type=int, help="the gang's number (default: --attempt; never "
                   "derived: keys are read and written under it)")
    p.add_argument("--memory-mb", type=int, default=0, help="the container's memory when "
                   "the driver grew it after a memory kill (0: the job's own size)")
    p.add_argument("--no-watchdog", action="store_true", help="local mode: the client ends "
                   "what a dead launcher leaves behind, so no watchdog process is forked")
    p.add_argument("--hadoop-env", action="store_true", help="on YARN: give the tasks the "
                   "node's Hadoop client env (CLASSPATH and the rest: jni.TaskHadoop)")
    return p


def parse_args(argv: Sequence[str] | None) -> LaunchArgs:
    ns = _parser().parse_args(argv)
    with open(ns.job, encoding="utf-8") as f:
        job = JobSpec.from_json(f.read())
    gang = ns.attempt if ns.gang is None else ns.gang
    run = docker.DockerRun(ns.docker_image, ns.docker_network, tuple(ns.docker_mount),
                           ns.docker_runtime) if ns.docker_image else None
    hosted = (Hosted(_tasks(ns.tasks), os.getcwd(), ns.gpus),) if ns.tasks else \
        tuple(Hosted(_tasks(tasks), cwd, gpus, log) for tasks, cwd, log, gpus in ns.container)
    if run is not None and len(hosted) > 1:
        raise ValueError("-m docker: a launcher serves one container")
    return LaunchArgs(job, hosted, ns.kv, run, ns.attempt, gang, not ns.no_watchdog,
                      ns.memory_mb, ns.hadoop_env)


def _tasks(words: str) -> tuple[Task, ...]:
    return tuple(Task.parse(t) for t in words.split(","))


@dataclass
class Launcher:
    """The launcher of one container (or locally of several): its arguments, store and
    stop flag."""

    args: LaunchArgs
    settings: Settings
    store: kvmod.KV
    flag: StopFlag
    watchdog: int
    reported: set[Task] = field(default_factory=set)
    cluster_seen: threading.Event = field(default_factory=threading.Event)
    done: threading.Event = field(default_factory=threading.Event)  # the launcher ends
    reports: dict[Task, StepReport] = field(default_factory=dict)  # steps forwarded
    card_mib: int | None = None  # the GPU's memory, for --gpu-memory-fraction's cap in MB
    slots: list[Slot] = field(default_factory=list)  # the tasks, once they start
    pumps: streams.PumpHub = field(default_factory=streams.PumpHub)  # their output
    # when this launcher's process started, registered and read the cluster spec
    # (each task's Started record carries them: the gang's start, phase by phase)
    milestones: dict[str, float | None] = field(default_factory=dict)
    hadoop: TaskHadoop | None = None  # on YARN: the Hadoop client env, worked out meanwhile

    def run(self) -> None:
        """Register every task, wait for the cluster, run and supervise the processes."""
        host = self.settings.advertise_host or socket.getfqdn()
        # before the driver can put them
        self.store.expect([kvmod.CLUSTER, kvmod.STOP, kvmod.preempting_key(1)])
        for hosted in self.args.hosted:
            preemption.forget(preemption.path_for(hosted.cwd))
        unfit = self.docker_problem(host) or self.login_problem()
        if unfit:
            for hosted in self.args.hosted:
                for task in hosted.tasks:
                    say(unfit, task, to=hosted.err)
                    self.publish(hosted, task, "-:0", None,
                                 TaskEnd(1, unfit, cause=Cause.PERMANENT, explained=True))
            return
        slots = []
        for hosted in self.args.hosted:
            for j, task in enumerate(hosted.tasks):
                sock = reserve_port()
                slots.append(Slot(task, j, sock, f"{host}:{sock.getsockname()[1]}",
                                  f"{hosted.tag}.{j}", hosted))
        # every task's address in one put: one round trip however many tasks it hosts
        self.store.put_many({kvmod.addr_key(slot.task): slot.addr for slot in slots})
        for slot in slots:
            say(f"registered at {slot.addr}", slot.task, to=slot.hosted.err)
        self.milestones.update(launched=tree.started_at(), registered=time.time())
        deadline = time.monotonic() + self.args.job.register_timeout_s + CLUSTER_WAIT_SLACK_S
        cluster = wait_for_cluster(self.store, self.flag, deadline)
        self.milestones["cluster"] = time.time()
        self.cluster_seen.set()
        for slot in slots:
            slot.sock.close()
        if cluster is None:
            for slot in slots:
                self.publish(slot.hosted, slot.task, slot.addr, slot.rank,
                             TaskEnd(None, self.flag.reason or "", stopped=True))
            return
        raw = self.store.get(kvmod.RANKS)
        ranks = None if raw is None else RankTable.from_json(raw, kvmod.RANKS)
        if self.hadoop is not None:  # every task's env starts from node_env
            self.node_env.update(self.hadoop.env())
        devices = {id(h): self.devices(h) for h in self.args.hosted}
        self.slots = slots
        started: dict[str, str] = {}
        try:
            for slot in slots:
                started[kvmod.start_key(slot.task)] = self.start(
                    slot, self.env_for(slot, cluster, ranks, devices[id(slot.hosted)]))
        finally:  # what did start is said, in one put, even if a later start failed
            if started:
                self.store.put_many(started)
        supervise(slots, self.flag, self.args.job.stop_grace_s, {self.watchdog}, self.ended)

    def docker_problem(self, host: str) -> str | None:
        """Why this node cannot run the tasks in their image (-m docker), else None:
        checked before registering, so the job fails at once, saying what to ask for."""
        run = self.args.docker
        if run is None:
            return None
        if run.runtime == "yarn":
            return None if docker.started_in_image(tree.ancestors()) \
                else docker.outside_image(host, run.image)
        why = docker.unusable()
        return None if why is None else docker.node_problem(host, self.settings.user, why)

    def login_problem(self) -> str | None:
        """A keytab job: the tasks' own Kerberos login (kept fresh from here on), or why
        this node cannot make it; checked before registering, as docker is."""
        login = self.login
        if login is None:
            return None
        problem = login.login(os.environ)
        if problem is None:
            _daemon(lambda: login.keep(os.environ, self.done, say))
        return problem

    @functools.cached_property
    def command_argv(self) -> list[str]:
        """The tasks' command line (bash found on PATH once, not once a task)."""
        return shell_argv(self.args.job.command)

    @functools.cached_property
    def node_env(self) -> dict[str, str]:
        """The container's environment as this launcher got it, read once: each task's
        env starts from it, and `os.environ` decodes every item each time it is copied."""
        return dict(os.environ)

    @functools.cached_property
    def login(self) -> keytab.KeytabLogin | None:
        return keytab.KeytabLogin.of_job(dict(self.args.job.env), os.getcwd())

    def devices(self, hosted: Hosted) -> list[str]:
        """A container's GPU ids: on YARN ("auto") the ones its NodeManager assigned
        (asked once; under YARN's docker runtime the runtime's numbering), said in the
        task's log where YARN did not say; locally the ones given. `nodegpus` (and with it
        urllib's HTTP client, 25 ms of a launcher's start: #46) is imported only where a
        container has GPUs."""
        if hosted.gpus != "auto":
            devices = [] if hosted.gpus == "none" else hosted.gpus.split(",")
            if devices and self.card_mib is None:
                from tfyarn.runtime import nodegpus

                self.card_mib = nodegpus.local_card_mib()
            return devices
        gpus = self.args.job.container_of(hosted.tasks[0]).resources.gpus
        assigned: tuple[str, ...] | None = None
        why = ""
        self.card_mib = None
        if gpus > 0:
            from tfyarn.runtime import nodegpus

            assignment = nodegpus.Assignment(None)
            if not os.environ.get("NVIDIA_VISIBLE_DEVICES"):
                from tfyarn.hdfs.spnego import Negotiator

                login = self.login
                assignment = nodegpus.ask_node(
                    os.environ, None if login is None else Negotiator(ccache=login.ccache))
            assigned, why = assignment.devices, assignment.why
            self.card_mib = assignment.card_mib or nodegpus.local_card_mib()
        devices, guess = container_devices(gpus, os.environ, assigned)
        if guess is not None:
            say(f"{guess}" + (f" ({why})" if why else ""), str(hosted.tasks[0]), to=hosted.err)
        return devices

    def env_for(self, slot: Slot, cluster: Cluster, ranks: RankTable | None,
                devices: list[str]) -> dict[str, str]:
        job, job_id = self.args.job, self.settings.job_id or "unknown"
        env = dict(job.env)
        if ranks is None:
            env.update(tf_env(cluster.roles, slot.task, job_id))
        else:
            rank = ranks.ranks[str(slot.task)]
            slot.rank = rank.rank
            env.update(identity_env(slot.task, job_id, rank.size))
            env.update(allreduce_env(rank, ranks.master, ranks.rendezvous))
        vcores = job.container_of(slot.task).resources.vcores
        env.update(thread_env(vcores, len(slot.hosted.tasks), {**self.node_env, **env}))
        user = self.settings.user
        attempt = self.args.attempt if cluster.attempt is None else cluster.attempt
        env.update(run_env(attempt, checkpoint_dir(job.checkpoint_dir, job_id, user),
                           model_dir(job.model_dir, job_id, user), job.tensorboard_dir))
        env[RESULT_VAR] = slot.result_file
        env[steps.ENV] = steps.path_for(slot.hosted.cwd, str(slot.task))
        env[preemption.ENV] = preemption.path_for(slot.hosted.cwd)
        with contextlib.suppress(FileNotFoundError):  # an earlier run's, in this dir
            os.remove(env[steps.ENV])
        if job.runtime.mode == "local":  # `tfyarn.run`'s tasks: the launcher's own python
            env.setdefault("TFYARN_PYTHON", sys.executable)  # (else the env's, on PATH)
        k = len(slot.hosted.tasks)
        env.update(device_env(devices, k, slot.index, shared=not job.allreduce,
                              fraction=job.gpu_memory_fraction, card_mib=self.card_mib))
        if self.in_docker:  # docker numbers the slot's GPUs from 0; no host paths in there
            slot.gpus = [d for d in env["CUDA_VISIBLE_DEVICES"].split(",") if d]
            env.update(docker.gpu_options(slot.gpus)[1])
        else:
            env.update(hdfs.plugin_env({**self.node_env, **env}))  # `import tensorflow`: hdfs://
        return env

    @property
    def in_docker(self) -> bool:
        """Whether this launcher starts its tasks with `docker run` (-m docker, tfyarn's
        runtime); under YARN's runtime it already runs in the image."""
        return self.args.docker is not None and self.args.docker.runtime == "tfyarn"

    def docker_argv(self, slot: Slot, env_vars: Mapping[str, str]) -> list[str]:
        a, job_id = self.args, self.settings.job_id or "unknown"
        assert a.docker is not None
        cwd = slot.hosted.cwd
        extra = [env_vars.get(k, "") for k in ("TFYARN_CHECKPOINT_DIR", "TFYARN_MODEL_DIR",
                                                 "TFYARN_TENSORBOARD_DIR")]
        for d in extra:
            if os.path.isabs(d):
                os.makedirs(d, exist_ok=True)
        labels = {docker.LABEL_JOB: job_id, docker.LABEL_LAUNCHER: slot.hosted.tag,
                  docker.LABEL_HOST: slot.addr.rsplit(":", 1)[0]}
        return docker.run_argv(
            a.docker, a.job.command, name=slot.container, labels=labels,
            env_keys=sorted(env_vars), mounts=docker.workdir_mounts(cwd, extra), cwd=cwd,
            user=f"{os.getuid()}:{os.getgid()}", memory_mb=a.memory_of(slot.task) // len(a.tasks),
            gpus=slot.gpus)

    def start(self, slot: Slot, env_vars: dict[str, str]) -> str:
        """Start the task's process; its Started record, for the caller to put (a
        container's tasks' records go in one put)."""
        a, job_id = self.args, self.settings.job_id or "unknown"
        login = self.login
        if login is not None:  # docker forwards env_vars by name: the cache's too
            env_vars = {**env_vars, "KRB5CCNAME": login.ccache}
        env = users_env({**self.node_env, **env_vars, TAG_VAR: slot.tag})
        if login is not None:
            env = login.task_env(env)
        if self.in_docker:
            slot.container = docker.container_name(job_id, a.gang, str(slot.task))
            argv = self.docker_argv(slot, env_vars)
        else:
            argv = self.command_argv
        slot.child = spawn.start(argv, env, cwd=slot.hosted.cwd, stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, parent_death=signal.SIGKILL)
        record = Started(slot.child.pid, time.time(), **self.milestones).to_json()
        prefix = f"[{slot.task}] ".encode() if len(slot.hosted.tasks) > 1 else b""
        assert slot.child.stdout is not None and slot.child.stderr is not None
        slot.pumps = (streams.LinePump(slot.child.stdout, slot.hosted.out, prefix=prefix,
                                       hub=self.pumps),
                      streams.LinePump(slot.child.stderr, slot.hosted.task_err, prefix=prefix,
                                       notice=token_expired, hub=self.pumps))
        return record

    def ended(self, slot: Slot, code: int) -> None:
        for pump in slot.pumps:
            pump.join(timeout=2.0)
        with contextlib.suppress(StoreGone, OSError):  # its last steps, before its exit
            forward_steps(self.store, slot.task, slot.hosted.cwd, self.reports)
        tail = list(stderr_excerpt(list(slot.pumps[1].tail))) if slot.pumps else []
        hide = self.args.job.redactor()  # the tail is shown by clients, pages, diagnostics
        record = TaskEnd(code, hide(self.flag.reason or ""),
                         stopped=self.flag.reason is not None, tail=hide.lines(tail),
                         result=_result(slot.result_file))
        if code and slot.pumps and slot.pumps[1].noticed and self.login is None:
            record = token_end(record)
        if slot.container:  # the daemon's child, not ours: removed here, whatever ended it
            no_gpu = docker_gpu_end(record, len(slot.gpus), slot.addr.rsplit(":", 1)[0])
            if no_gpu is not None:
                record = no_gpu
            elif code and docker.oom_killed(slot.container):
                mb = self.args.memory_of(slot.task)
                record = memory_end(record, memory_flag_for(slot.task.type), mb,
                                    mb // len(slot.hosted.tasks))
            tree.remove_containers(f"name=^{slot.container}$")
        self.publish(slot.hosted, slot.task, slot.addr, slot.rank, record)

    def publish(self, hosted: Hosted, task: Task, addr: str, rank: int | None,
                record: TaskEnd) -> None:
        """The task's exit record, once: the driver's input, sent as soon as it is known."""
        full = replace(record, host=addr.rsplit(":", 1)[0], addr=addr, rank=rank,
                       time=time.time())
        try:
            self.store.put(kvmod.exit_key(task), full.to_json())
        except (StoreGone, OSError) as exc:
            say(f"could not report the exit ({exc}); the driver will see it as lost", task,
                to=hosted.err)
        self.reported.add(task)
        say(f"exit code {full.code}" + (" (stopped)" if full.stopped else ""), task,
            to=hosted.err)

    def report_error(self, exc: BaseException) -> None:
        """A broken launcher still tells the driver why, for every task not yet reported."""
        for hosted in self.args.hosted:
            for task in hosted.tasks:
                if task not in self.reported:
                    say(f"launcher error: {exc!r}", task, to=hosted.err)
                    self.publish(hosted, task, "-:0", None,
                                 TaskEnd(1, tail=(f"tfyarn launcher error: {exc!r}",)))


def _result(path: str) -> str:
    """A `tfyarn.run` task's pickled result, base64 (empty for a command's task)."""
    try:
        with open(path, "rb") as f:
            return base64.b64encode(f.read()).decode()
    except FileNotFoundError:
        return ""


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    settings = Settings.from_environ()
    job_id = settings.job_id or "unknown"
    watchdog = -1
    if args.watchdog:  # YARN and -m docker: one container, its tag's processes to end
        tag = container_tag(job_id, args.tasks[0], args.gang)
        containers = f"label={docker.LABEL_LAUNCHER}={tag}" \
            if args.docker and args.docker.runtime == "tfyarn" else None  # `docker run`s
        watchdog = tree.start_watchdog(TAG_VAR, f"{tag}.", containers)
    spawn.set_subreaper()
    flag = StopFlag()
    install_signal_handlers(flag)
    # `hadoop classpath` runs while this process connects and registers (no thread yet)
    hadoop = TaskHadoop(os.environ) if args.hadoop_env else None
    store = kvmod.Scoped(kvmod.open_kv(args.store_url), args.gang)
    launcher = Launcher(args, settings, store, flag, watchdog, hadoop=hadoop)
    done = launcher.done
    try:
        for hosted in args.hosted:
            hosted.open(job_id, args.gang)
        interval = heartbeat_s(args.job.heartbeat_timeout_s)
        cwds = {t: h.cwd for h in args.hosted for t in h.tasks}
        _daemon(lambda: heartbeat(store, cwds, flag, done, interval, launcher.reports))
        _daemon(lambda: watch_stop(store, flag, done, launcher.cluster_seen))
        _daemon(lambda: watch_preemption(launcher))  # (locally none comes: it just waits)
        launcher.run()
    except Exception as exc:  # the launcher's last resort, never silent: whatever broke is
        # reported as this task's exit (the driver then decides), and its tree is stopped
        tree.stop_tree(0.0, {watchdog})
        launcher.report_error(exc)
    if hadoop is not None:
        hadoop.close()
    done.set()
    return 0


if __name__ == "__main__":
    sys.exit(main())
