"""Local backend (`el_submit --local`): the driver and one launcher per task as local processes.

Same driver, same launcher, same key-value protocol as on YARN, with a directory as the
store. Every process writes its own log file (a file never blocks a writer and outlives
the client); the client shows them on stderr, prefixed `[worker:1] `, while it can.
stdout carries only the job id. Whatever way the job ends (success, failure, Ctrl-C,
SIGTERM, SIGHUP, the client SIGKILLed), nothing carrying its TFYARN_JOB_ID survives:
the launchers contain their trees, the driver ends the job when the client dies, and the
client sweeps what is left when it can.
Must not decide the job's outcome: the driver does, and the client reads its status.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from tfyarn.client import common
from tfyarn.client.interrupts import Interrupts
from tfyarn.client.jobdir import (
    JobDir,
    assign_gpus,
    count_gpus,
    launcher_docker_options,
    new_job_id,
    preflight,
    stage,
    written_dir,
)
from tfyarn.client.liveline import LiveLine
from tfyarn.client.localprocs import (
    Procs,
    Wake,
    base_env,
    check_tensorboard,
    describe_rc,
    end_launchers,
    kill_all,
    report_dead_launchers,
    reported,
    start_all,
    start_launchers,
    wait_procs,
)
from tfyarn.core.appreport import FinalStatus
from tfyarn.core.errors import EXIT_TFYARN, JobFailed
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.policy import elapsed_words, goodput_lines, plural
from tfyarn.core.records import Outcome
from tfyarn.core.say import say
from tfyarn.core.settings import Settings
from tfyarn.core.tfconfig import Task
from tfyarn.core.timing import (
    CLIENT_TICK_S,
    LOCAL_DRIVER_SLACK_S,
    RESTART_EXIT_WAIT_S,
    STOP_REPORT_S,
    TENSORBOARD_DONE_SLACK_S,
    TENSORBOARD_START_S,
    TERMINAL_TAIL_S,
)
from tfyarn.protocol import kv as kvmod


@dataclass
class LocalJob:
    spec: JobSpec
    settings: Settings
    interrupts: Interrupts = field(default_factory=Interrupts)
    job_id: str = field(default_factory=new_job_id)
    started: float = field(default_factory=time.monotonic)
    signals_before_linger: int | None = None  # a signal during the linger only ends it
    line: LiveLine | None = None  # el_submit's live line on training (stderr)
    news: common.News = field(init=False)

    def __post_init__(self) -> None:
        self.news = common.News(self.spec)

    def run(self) -> Outcome:
        """Run the job to its end; returns the outcome, raises JobFailed when it did not
        succeed (with the exit code of the ending)."""
        root, inv = preflight(self.spec, self.settings)
        docker_options = launcher_docker_options(self.spec, self.settings)
        gpus = assign_gpus(self.spec, self.settings.gpu_count if self.settings.gpu_count
                           is not None else count_gpus())
        jd, prefix = stage(self.spec, root, inv, self.job_id, self.settings)
        env = base_env(self.settings, self.job_id, prefix)
        try:
            check_tensorboard(self.spec, env)
        except BaseException:
            jd.discard()
            raise
        with self.interrupts.deferred():
            common.emit_id(self.job_id)
            say(f"job {self.job_id}: {plural(len(self.spec.tasks()), 'task')}, dir {jd.root}")
            terminal = getattr(sys.stderr, "buffer", None)  # None when stderr is closed
            terminal = self.line.above(terminal) if self.line is not None else terminal
            procs = Procs(jd, docker=docker_options,
                          per_launcher=self.settings.launcher_tasks)
            wake = None
            try:
                start_all(self.spec, procs, env, self.interrupts, gpus, terminal)
                wake = Wake(jd.kv_root)  # after the forks: no child inherits its descriptors
                self._supervise(procs, wake, lambda: start_launchers(self.spec, procs, env,
                                                                     self.interrupts, gpus))
            finally:
                if self.line is not None:
                    self.line.end()
                for watching in (wake, procs.follower):  # freed in the background from now
                    if watching is not None:
                        watching.release()
                wait_procs(reported(procs), STOP_REPORT_S, cut=lambda: self.interrupts.count >= 2)
                self._linger(procs)
                if procs.forks is not None:
                    procs.forks.close()
                kill_all(procs.all(), self.job_id, self.spec.runtime.mode == "docker")
                if procs.follower is not None:
                    procs.follower.stop()
                if wake is not None:
                    wake.close()
        return self._finish(jd)

    def _supervise(self, procs: Procs, wake: Wake, relaunch: Callable[[], None]) -> None:
        """Until the driver ends: act on signals and deadlines, start the gang of each new
        attempt, say the job's news, report dead launchers."""
        store = kvmod.open_kv(procs.jd.kv_url)
        escalation = common.Escalation(self.interrupts, self.spec.stop_grace_s)
        wake.add([p for p in (procs.driver, *procs.launchers.values()) if p is not None])
        while procs.driver is not None and procs.driver.poll() is None:
            why = self._must_force(store, escalation)
            if why is not None:
                say(why)
                return
            if escalation.asked_at is None and self._next_attempt(procs, store, relaunch):
                wake.add(list(procs.launchers.values()))
            self.news.read(store)
            if self.line is not None:
                self.line.look(store, procs.gang, procs.attempt, self.spec.attempts)
            report_dead_launchers(procs, kvmod.Scoped(store, procs.gang), self.job_id,
                                  wake.wait(CLIENT_TICK_S))
        if procs.driver is not None and store.get(kvmod.STATUS) is None:
            say(f"the driver ended without a final status ({describe_rc(procs.driver)}); "
                "stopping every task")
            kvmod.Scoped(store, procs.gang).put(kvmod.STOP, "the driver died")

    def _must_force(self, store: kvmod.KV, escalation: common.Escalation) -> str | None:
        """The first signal asks the driver for an orderly stop; why every task must be
        killed now (a second signal, no stop in time, --timeout overrun), or None."""
        if self.interrupts.count and escalation.asked_at is None:
            say(f"{self.interrupts.words()}: stopping every task (send it again to kill "
                "at once)")
            escalation.ask(store, self.interrupts.words())
        why = escalation.forced()
        if why == "second signal":
            return "killing every task now"
        if why is not None:
            return "the driver did not stop the job in time; killing every task"
        limit = self.spec.timeout_s
        if limit is not None and time.monotonic() - self.started > limit + LOCAL_DRIVER_SLACK_S:
            return "the driver did not end the job after --timeout; killing every task"
        return None

    def _next_attempt(self, procs: Procs, store: kvmod.KV,
                      relaunch: Callable[[], None]) -> bool:
        """The driver restarts the gang (its log, on the terminal, says why): end the old
        launchers, start new ones. Whether it did."""
        wanted = kvmod.wanted(store)
        attempt, gang = wanted.attempt, wanted.gang
        if gang <= procs.gang:
            return False
        end_launchers(procs.launchers, self.job_id, procs.gang, RESTART_EXIT_WAIT_S,
                      bool(procs.docker))
        procs.gang, procs.attempt = gang, attempt
        relaunch()
        return True

    def _linger(self, procs: Procs) -> None:
        """--tensorboard-linger: a job that ended by itself keeps TensorBoard up (it
        lingers on its own, once it answers) until then, or until a signal cuts it short."""
        tb, store = procs.tensorboard, kvmod.open_kv(procs.jd.kv_url)
        if tb is None or tb.poll() is not None or self.interrupts.count \
                or not self.spec.tensorboard_linger_s or store.get(kvmod.STATUS) is None:
            return
        deadline = time.monotonic() + TENSORBOARD_START_S  # a short job ends before it is up
        while (info := self.news.tensorboard(store)) is None and tb.poll() is None \
                and not self.interrupts.count and time.monotonic() < deadline:
            time.sleep(TERMINAL_TAIL_S)
        if info is None or not info.url or self.interrupts.count:
            return
        self.signals_before_linger = self.interrupts.count
        say(f"TensorBoard stays up {self.spec.tensorboard_linger_s / 60:g} min at "
            f"{info.url} (--tensorboard-linger; Ctrl-C ends it)", secret_ok=True)
        wait_procs([tb], self.spec.tensorboard_linger_s + TENSORBOARD_DONE_SLACK_S,
                   cut=lambda: self.interrupts.count > 0)

    def _finish(self, jd: JobDir) -> Outcome:
        raw = kvmod.open_kv(jd.kv_url).get(kvmod.STATUS)
        took = elapsed_words(time.monotonic() - self.started)
        if self.interrupts.count and self.signals_before_linger is None:
            raise common.interrupted(f"job {self.job_id}", self.interrupts,
                                     f"every task was stopped after {took} (logs: "
                                     f"{jd.root}/logs)")
        if raw is None:
            raise JobFailed(f"job {self.job_id}: tfyarn's driver ended without a final status "
                            f"after {took}; every task was stopped. Read "
                            f"{jd.log_path('driver')}", EXIT_TFYARN)
        outcome = Outcome.from_json(raw, kvmod.STATUS)
        if outcome.state != FinalStatus.SUCCEEDED:
            where = task_log(self.spec, jd, outcome.task) if outcome.task else \
                os.path.join(jd.root, "logs")
            raise common.failed(outcome, f"job {self.job_id}", outcome.state,
                                f"ran {took}; full log: less {where}")
        model = written_dir(self.spec.model_dir or jd.model_dir)
        if self.settings.keep_job_dir:
            say(f"logs kept (TFYARN_KEEP_JOB_DIR): {jd.root}/logs")
        else:
            jd.remove()
        say(f"job {self.job_id} SUCCEEDED in {took}: {outcome.message}")
        for line in goodput_lines(outcome.goodput) if outcome.goodput else []:
            say(f"  {line}")
        if model:
            say(f"model (TFYARN_MODEL_DIR): {model}")
        return outcome


def task_log(spec: JobSpec, jd: JobDir, task: str) -> str:
    """The log file holding a task's output: its container's."""
    return jd.log_path(spec.container_of(Task.parse(task)).name)
