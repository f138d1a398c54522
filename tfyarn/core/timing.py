"""Every interval and timeout tfyarn uses, in one place, each with why it has its value.

Job-level knobs a user can set (-wait_time, --timeout, --heartbeat-timeout) have their
defaults here; the JobSpec carries the chosen values to every process. `Clock` is where
a loop reads the time, passed in so that a test can decide on a clock of its own.
Must not hold anything but numbers and the clock's type.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    """`now`: monotonic seconds (intervals, deadlines); `wall`: epoch seconds (what is
    shown and kept)."""

    now: Callable[[], float] = time.monotonic
    wall: Callable[[], float] = time.time


SYSTEM = Clock()  # the process's own

# --- defaults of job options
STOP_GRACE_S = 3.0  # SIGTERM -> SIGKILL for a task's processes (MWMS workers ignore SIGTERM)
HEARTBEAT_TIMEOUT_S = 30.0  # a launcher silent this long is "lost": dead, frozen or cut off
REGISTER_TIMEOUT_MIN = 10  # el_submit's -wait_time default
GANG_PATIENCE_S = 60.0  # YARN: a gang given part of its containers and nothing more for
# this long gives them back, so that another job's gang can complete (--gang-patience)

# --- launcher
HEARTBEAT_MAX_S = 5.0  # launcher -> store, at most this far apart (each beat of hundreds of
# launchers costs the machine CPU while a job idles), and 6 to the heartbeat timeout
HEARTBEAT_MIN_TIMEOUT_S = 2.0  # the shortest --heartbeat-timeout accepted


def heartbeat_s(timeout_s: float) -> float:
    """How often a launcher beats for a job whose heartbeat timeout is `timeout_s`: six
    beats to a timeout, so one slow put never counts as silence."""
    return min(HEARTBEAT_MAX_S, timeout_s / 6)


KEYTAB_RELOGIN_S = 3600.0  # a keytab job's tasks get a fresh ticket this often: well inside
# any realm's ticket lifetime (10 h or 24 h usually), one kinit an hour per container

WAKE_S = 0.5  # a launcher waiting for the cluster spec re-checks its flags this often
PARENT_CHECK_S = 5.0  # a running launcher's backstop look at its parent: its death comes
# as a signal (local mode: parent-death signal; YARN: the NodeManager's group kill)
CLUSTER_WAIT_SLACK_S = 60.0  # launcher waits -wait_time plus this for the cluster spec
STOP_WAIT_S = 60.0  # one blocking wait for the stop key (the driver's bell locally, skein's
# events on YARN: neither polls), then wait again

# --- job page
PAGE_REFRESH_S = 3.0  # the page reloads itself this often while the job runs

# --- TensorBoard (side task)
TENSORBOARD_START_S = 180.0  # until it must answer HTTP 200 (importing TF on a busy node)
TENSORBOARD_POLL_S = 0.5  # how often its URL is tried meanwhile
TENSORBOARD_DONE_SLACK_S = 30.0  # YARN: the driver waits linger plus this for it to end

# --- stores
DIR_POLL_S = 0.02  # local directory store, where neither its bell nor inotify serves a
# wait (the driver's bell not up yet): the first poll interval, then longer and longer
DIR_POLL_MAX_S = 0.25  # ... up to this (hundreds of launchers may be polling at once)
DIR_FEED_POLL_S = 0.1  # the driver's rescan of a local store where inotify is refused
SKEIN_POLL_S = 0.25  # skein store: a poll where its events are not used (one gRPC call each)

# --- driver
DRIVER_TICK_S = 1.0  # the driver acts on store changes as they come (inotify locally,
# skein's put events on YARN); with none it still wakes this often: signals, the
# client's death, deadlines (--timeout, -wait_time), heartbeats
STOP_REPORT_S = 5.0  # after the stop grace, how long to wait for launchers to report
CONTAINER_POLL_S = 1.0  # YARN: how often the driver asks skein which containers ended
CONTAINER_END_WAIT_S = 12.0  # YARN: how long a failure the launcher could not explain
# (stopped by a signal, lost) waits for YARN's word on its container (preempted, memory):
# the AM hears of an ended container within its allocate heartbeat (up to 5 s) plus the
# NodeManager's (1 s); the word decides whether the failure is retried
PAGE_DELAY_S = 0.5  # the job page starts this long into the job (its imports off the start)
PAGE_START_WAIT_S = 5.0  # a job that ended before its page was up waits this long for it
VERDICT_EXIT_S = 20.0  # the driver process ends this long after its verdict at the latest
ACK_WAIT_S = 5.0  # how long the AM stays for a watching client to read the final status
PREEMPTION_HOLD_S = 30.0  # a task told of YARN's preemption notice may hold training this long
# (tfyarn.preempting() is true meanwhile); the RM kills after max_wait_before_kill (15 s by
# default); a notice not followed by a kill within twice that: the RM changed its mind
PREEMPTION_HOLD_POLL_S = 0.2  # a training loop held at a notice looks again this often
COURSE_KEEP_S = 30.0  # YARN: the driver keeps the job's course so far for a later AM attempt
# this often (and at each attempt's start); a lost AM costs at most this much goodput record
COURSE_HOLD_S = 15.0  # YARN: a restart's cluster spec waits at most this for its course to be
# kept (WebHDFS calls of HISTORY_SAVE_S each), so a lost AM cannot give the job an extra restart
TRAINING_PUT_S = 5.0  # the driver puts the job's training (plots, Job.metrics()) at most this
# often while steps move: a put of a few hundred KB at most, bounded by policy.SERIES_POINTS
HISTORY_SAVE_S = 5.0  # keeping the final page (each WebHDFS call, and all of them: the
# AM's exit never waits longer for it; YARN has the verdict before it starts)
KEPT_PAGE_WAIT_S = HISTORY_SAVE_S + 5.0  # a job ended this recently may still be keeping
# its page (its driver does it after YARN has the verdict): `status --tasks` waits for it
KEPT_PAGE_POLL_S = 0.2  # ... looking this often

# --- clients
YARN_POLL_S = 1.0  # el_submit's application report interval (each is an RM call)
YARN_END_POLL_S = 0.1  # the same once the driver's final status is out (FINISHED is near)
LOCAL_DRIVER_SLACK_S = 30.0  # local client: driver must end within --timeout plus this
STOP_ASK_WAIT_S = 30.0  # both clients: after asking the driver for an orderly stop (Ctrl-C,
# `tfyarn kill`), beyond the job's stop grace, before forcing it (killing every process /
# the application): the driver's own stop takes the grace plus STOP_REPORT_S, and on YARN
# the ApplicationMaster then unregisters and the RM's report catches up (seconds)
TERMINAL_TAIL_S = 0.1  # local client: task log files are read for the terminal as they grow,
# at most this often (and this often where inotify is refused)
REAP_WAIT_S = 2.0  # local client: a launcher seen ending, until its fork server reports its
# exit code (it reaps at once: milliseconds)
LIVE_LINE_S = 1.0  # el_submit's live line on a terminal (or a notebook's cell): redrawn this often
LIVE_PLAIN_S = 30.0  # ... off a terminal: a plain line at most this often, when it changed
CLIENT_TICK_S = 1.0  # local client: its loop wakes on events (the store, signals, a process
# ending); with none, this often (deadlines: the stop escalation, --timeout)
RESTART_EXIT_WAIT_S = 2.0  # local restart: an old launcher has reported (the driver waited
# for it), so it is exiting; past this it is killed with its group
REST_TIMEOUT_S = 10.0  # one ResourceManager REST call
RM_AWAY_S = 10.0  # a report call unanswered this long: the ResourceManager is said to be
# away (restarting: Hadoop's client retries for up to 15 minutes meanwhile)
REPORT_RETRIES = 5  # consecutive failed report calls before a watcher gives up
KILL_GRACE_S = 3.0  # `tfyarn kill` of a YARN job: the tasks' stop grace (the job's own is
# not known to a client that did not submit it)
GANG_WAIT_LOOK_S = 10.0  # a gang YARN has not given whole: why, looked up this often
AGGREGATION_WAIT_S = 90.0  # -interact / logs --follow: for the rest of the output in `yarn logs`
LIVE_LOG_POLL_S = 2.0  # -interact / logs --follow: each poll asks every container's
# NodeManager for its log's new tail (one HTTP call per container)

STREAM_STALL_S = 900.0  # a task reading a streamed dataset (pl_submit) that has not grown
# for this long fails: its writer died (TFYARN_DATA_FOLLOW_S changes it)

# --- client progress lines
PROGRESS_S = 2.0  # a long copy/pack/upload/unpack says how far it is this often
PROGRESS_MIN_BYTES = 64 * 2**20  # smaller steps take well under a second: stay quiet

# --- gathered from the modules that use them, each under one name
ATTACHED_POLL_S = 0.2  # the API's local job: its files and store, looked at this often
ATTACHED_STOP_WAIT_S = 120.0  # an attached local job, asked to stop: its driver's answer, at most
PIPELINE_POLL_S = 0.5  # pl_submit: the training job and the writes, looked at this often
SHARD_CLAIM_POLL_S = 0.25  # a streamed write's Spark driver: newly claimed shards
STREAM_POLL_S = 0.25  # a streamed dataset's manifest, looked at this often while waiting
DOCKER_PROBE_TIMEOUT_S = 20.0  # `docker version` on a node: a daemon that does not answer is named
KINIT_TIMEOUT_S = 30.0  # one kinit (a KDC that hangs is named)
PEER_REQUEST_TIMEOUT_S = 10.0  # a peer (of a job page, a rendezvous) sending half a request
CLASSPATH_TIMEOUT_S = 60.0  # `yarn classpath` for skein's JVM: a shell script, milliseconds
ARCHIVE_WRITE_S = 60.0  # the first cold driver's orderly end, as its JVM writes its class archive
ARCHIVE_STALE_S = 86400  # a class archive half-written by a client killed meanwhile: removed after
WARM_STOP_S = 10.0  # `tfyarn skein-driver stop`: the JVM's own shutdown, before it is killed
VIEWER_TTL_S = 3600.0  # `tfyarn history`: a viewer's login is checked again (SPNEGO) after this
KLIST_TIMEOUT_S = 10.0  # one klist (the login check before a submit)
HOROVOD_GLOO_TIMEOUT_S = 600  # Horovod's gloo (default 30 s): containers start minutes apart

# --- process containment
KILL_ROUNDS = 50  # sweeps for processes still alive after SIGKILL (forks racing the sweep)
KILL_ROUND_S = 0.02
