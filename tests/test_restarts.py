"""Gang restarts (--max-restarts, --restart-on) with real local processes: the driver
classifies each failure, stops every task and starts a new gang whose keys, addresses and
TF_CONFIG belong to the new attempt only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

from conftest import job_processes, real_memory_kill_message

from tfyarn.core import policy
from tfyarn.core.jobspec import JobSpec, Resources, Role
from tfyarn.core.records import Cause, Outcome, TaskEnd
from tfyarn.core.tfconfig import Task

# worker:1 kills itself with SIGKILL in attempt 0 only; everyone else sleeps a moment
KILL_ONCE = ('if [ "$TFYARN_ATTEMPT" = 0 ] && [ "$TFYARN_TASK_INDEX" = 1 ]; then kill -9 $$; '
             'fi; sleep 1')
WORKERS = ("-t", "tensorflow-worker", "-wn", "2", "--local")


def test_sigkill_in_attempt_0_restarts_the_gang_and_succeeds(el_submit):
    out = el_submit(*WORKERS, "--max-restarts", "2", "-c", KILL_ONCE)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "attempt 2/3: restarting after worker:1 was killed by SIGKILL" in out.stderr
    assert "SUCCEEDED" in out.stderr and "earlier: attempt 1: worker:1 was killed" in out.stderr
    # every task was restarted, the one that was fine too: 2 registrations each
    assert len(re.findall(r"worker:0: registered at", out.stderr)) == 2
    assert job_processes(out.stdout.strip()) == []


def test_the_kept_page_says_where_each_gangs_time_went(el_submit, tmp_path):
    """The milestones (#46): the driver's start, each gang asked, its launchers started,
    registered, reading the cluster spec, its user code started, the gang ended, and the
    verdict, in that order for each gang, on the job's own clocks; the restart's gang
    after the first one's end."""
    from tfyarn.core.records import JobView

    kept = tmp_path / "kept"
    out = el_submit(*WORKERS, "--max-restarts", "1", "-c", KILL_ONCE,
                    env={"TFYARN_HISTORY_DIR": str(kept)})
    assert out.returncode == 0, out.stderr[-3000:]
    job_id = out.stdout.strip()
    view = JobView.from_json((kept / f"{job_id}.json").read_text())
    at = {m.name: m.at for m in view.milestones}
    assert [m.at for m in view.milestones] == sorted(m.at for m in view.milestones)
    for gang in (0, 1):
        steps = [f"gang {gang} {w}" for w in ("launchers started", "registered",
                                              "cluster spec read", "user code started")]
        assert [at[s] for s in steps] == sorted(at[s] for s in steps), view.milestones
    # (locally gang 0's launchers start with the driver, not when it asks; and its last
    # task may start its code after worker:1's death ended the gang: no order there)
    assert at["driver"] <= at["gang 0 asked"] <= at["gang 0 cluster spec read"]
    # a launcher's start is the kernel's, to its tick (`tree.started_at`): a launcher
    # forked within a tick of the ask may read as up to a tick before it (1 run in 40)
    tick = 1 / os.sysconf("SC_CLK_TCK")
    assert at["gang 0 ended"] <= at["gang 1 asked"] <= at["gang 1 launchers started"] + tick
    assert at["gang 1 user code started"] <= at["gang 1 ended"]
    assert at["gang 1 ended"] <= at["verdict"] <= view.ended


def test_a_stalled_worker_is_restarted_by_stall_timeout_and_resumes(el_submit):
    """worker:1 deadlocks after step 50 (its process alive, its launcher heartbeating);
    --stall-timeout 5 fails the attempt naming it and its step, the gang restarts, and
    both resume from their checkpoints to the end."""
    from programs import STALLS

    (el_submit.tmpdir / "train.py").write_text(STALLS)
    out = el_submit(*WORKERS, "--max-restarts", "1", "--stall-timeout", "5",
                    "-f", str(el_submit.tmpdir / "train.py"), "-c", "python train.py",
                    cwd=el_submit.tmpdir)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "attempt 2/2: restarting after training stalled: worker:1 at step 50: no " \
        "progress for " in out.stderr, out.stderr[-3000:]
    assert "(--stall-timeout 5) while the processes lived" in out.stderr
    # the summary: attempt 1 trained from step 0, attempt 2 resumed from the checkpoints
    # (worker:1's at step 40: it hung at 50 before saving it)
    assert re.search(r"goodput \d+%: ", out.stderr), out.stderr[-3000:]
    assert re.search(r" 1\. \S+-\S+ FAILED \(retryable\): steps 0-79, lost ", out.stderr)
    assert re.search(r" 2\. \S+-\S+ SUCCEEDED: steps 40-79", out.stderr), out.stderr
    assert job_processes(out.stdout.strip()) == []


def test_without_restarts_the_same_failure_fails_naming_it(el_submit):
    out = el_submit(*WORKERS, "-c", KILL_ONCE)
    assert out.returncode == 1
    assert "FAILED: worker:1 was killed by SIGKILL" in out.stderr
    assert "restarting" not in out.stderr
    assert job_processes(out.stdout.strip()) == []


def test_exit_1_is_permanent_unless_restart_on_any(el_submit):
    fail = 'if [ "$TFYARN_TASK_INDEX" = 1 ]; then echo bad input >&2; exit 1; fi; sleep 5'
    out = el_submit(*WORKERS, "--max-restarts", "2", "-c", fail)
    assert out.returncode == 1
    assert "restarting" not in out.stderr
    assert "not restarted: exit codes 1-127" in out.stderr and "--restart-on any" in out.stderr
    out = el_submit(*WORKERS, "--max-restarts", "2", "--restart-on", "any", "-c", fail)
    assert out.returncode == 1
    assert out.stderr.count("restarting after worker:1 exited with code 1") == 2
    # exhausted: every attempt's failing task is named
    assert ("[attempt 3/3; earlier: attempt 1: worker:1 exited with code 1; attempt 2: "
            "worker:1 exited with code 1]") in out.stderr
    assert "bad input" in out.stderr
    assert job_processes(out.stdout.strip()) == []
    # the kept job dir's status lists every attempt with its task table
    status = subprocess.run([sys.executable, "-m", "tfyarn", "status", out.stdout.strip()],
                            env={**os.environ, "TMPDIR": str(el_submit.tmpdir)},
                            capture_output=True, text=True, timeout=60)
    lines = status.stdout.splitlines()
    assert [x.strip() for x in lines if x.strip().startswith("attempt ")] == [
        "attempt 1: FAILED: worker:1 exited with code 1",
        "attempt 2: FAILED: worker:1 exited with code 1", "attempt 3: FAILED"], status.stdout
    assert sum(x.split()[:1] == ["worker:1"] for x in lines) == 3


def test_a_new_attempt_sees_nothing_of_the_old_one(el_submit, tmp_path):
    """Attempt 0: worker:0 exits 0 at once, then worker:1 dies. Had attempt 1 read attempt
    0's exit record, worker:0 would count as done and be stopped before it wrote `done`;
    had it read attempt 0's addresses, its TF_CONFIG would name dead ports."""
    seen = tmp_path / "seen"
    seen.mkdir()
    # each step waits for the store's record of the one before (the job dir's kv/)
    until = 'until [ -e "$(dirname "$TFYARN_CHECKPOINT_DIR")/kv/gang/{}/exit/' \
            'worker%3A{}" ]; do sleep 0.05; done'
    cmd = (f'echo "$TF_CONFIG" > {seen}/$TFYARN_ATTEMPT-$TFYARN_TASK_INDEX; '
           'case "$TFYARN_ATTEMPT-$TFYARN_TASK_INDEX" in '
           f'0-0) exit 0;; 0-1) {until.format(0, 0)}; kill -9 $$;; '
           # after worker:1's exit, a window in which a driver that took attempt 0's
           # exit for this one's would find the job done and stop this task
           f'1-0) {until.format(1, 1)}; sleep 1; touch {seen}/done;; esac')
    out = el_submit(*WORKERS, "--max-restarts", "1", "-c", cmd)
    assert out.returncode == 0, out.stderr[-3000:]
    assert (seen / "done").exists(), "attempt 1's worker:0 was cut short by a stale exit"
    clusters = {name: json.loads((seen / name).read_text())["cluster"]["worker"]
                for name in ("0-0", "0-1", "1-0", "1-1")}
    assert clusters["1-0"] == clusters["1-1"]
    assert not set(clusters["1-0"]) & set(clusters["0-0"])
    # each log file is shown in order, files side by side: the second of each worker's
    # registrations is attempt 1's
    second = [re.findall(rf"worker:{i}: registered at (\S+)", out.stderr)[1] for i in (0, 1)]
    assert clusters["1-0"] == second


def test_checkpoint_dir_and_attempt_reach_every_task(el_submit, tmp_path):
    ckpt = tmp_path / "ckpt"
    out = el_submit(*WORKERS, "--checkpoint-dir", str(ckpt), "--model-dir", "hdfs:///m/1", "-c",
                    'echo "attempt=$TFYARN_ATTEMPT dir=$TFYARN_CHECKPOINT_DIR '
                    'model=$TFYARN_MODEL_DIR"')
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stderr.count(f"attempt=0 dir={ckpt} model=hdfs:///m/1") == 2
    default = el_submit(*WORKERS, "-c", 'echo "dir=$TFYARN_CHECKPOINT_DIR model=$TFYARN_MODEL_DIR"')
    dirs = set(re.findall(r"dir=(\S+)", default.stderr))
    assert len(dirs) == 1 and dirs.pop().startswith(str(el_submit.tmpdir))
    models = set(re.findall(r"model=(\S+)", default.stderr))
    assert len(models) == 1 and models.pop().endswith("/model")
    assert "TFYARN_MODEL_DIR" not in default.stderr.split("SUCCEEDED", 1)[1]  # nothing written


def test_a_model_dir_is_relative_to_the_cwd_and_refused_empty(el_submit, tmp_path):
    out = el_submit(*WORKERS, "--model-dir", "out/m", "-c",
                    'mkdir -p "$TFYARN_MODEL_DIR" && echo "$TFYARN_TASK_INDEX" > '
                    '"$TFYARN_MODEL_DIR/w$TFYARN_TASK_INDEX"', cwd=tmp_path)
    assert out.returncode == 0, out.stderr[-3000:]
    assert sorted(os.listdir(tmp_path / "out" / "m")) == ["w0", "w1"]
    assert f"tfyarn: model (TFYARN_MODEL_DIR): {tmp_path / 'out' / 'm'}" in out.stderr
    empty = el_submit(*WORKERS, "--model-dir", " ", "-c", "true")
    assert empty.returncode == 2 and "Error: --model-dir: empty value" in empty.stderr
    assert "Traceback" not in empty.stderr


def test_bad_restart_flags_are_refused(el_submit):
    for args, words in ((("--max-restarts", "-1"), "--max-restarts: must be at least 0"),
                        (("--max-restarts", "1000"), "--max-restarts: at most 100"),
                        (("--restart-on", "sometimes"), "--restart-on: use retryable or any")):
        out = el_submit(*WORKERS, *args, "-c", "true")
        assert out.returncode == 2 and words in out.stderr, out.stderr
        assert "Traceback" not in out.stderr


# ---------------------------------------------------------------- the pure rules

SPEC = JobSpec("t", "tensorflow-worker", (Role("worker", 2, Resources(256, 1)),), "true",
               max_restarts=2)


def test_exit_causes():
    retry, perm = Cause.RETRYABLE, Cause.PERMANENT
    cases = [(TaskEnd(-9), retry), (TaskEnd(137), retry), (TaskEnd(255), retry),
             (TaskEnd(1), perm), (TaskEnd(127), perm), (TaskEnd(None, lost=True), retry),
             (TaskEnd(-15, "launcher received SIGTERM", stopped=True), retry)]
    for rec, cause in cases:
        assert policy.cause_of(rec) == cause, rec


REAL_MEMORY_KILL = real_memory_kill_message()


def test_yarn_container_ends():
    """skein's exit messages for YARN's exit statuses (-104/-103 memory, -102
    preemption, -100 lost node, -101 disks, a killed container process)."""
    memory_kill = (Cause.PERMANENT, "container killed for exceeding its memory: raise -wm "
                   "(now 256 MB)")
    cases = {
        REAL_MEMORY_KILL: memory_kill,  # what Hadoop 3.3.6 + skein 0.8.2 really say
        "Container preempted by scheduler": (Cause.RETRYABLE, "was preempted by YARN"),
        # a lost node, and a gracefully decommissioned one after its timeout (captured)
        "Container released on a *lost* node": (Cause.RETRYABLE, "was lost with its node"),
        # -101: the NodeManager's ContainerLaunch wording (Hadoop 3.3.6 source; bad disks
        # between allocation and launch cannot be staged on the sandbox)
        "Most of the disks failed. 1/1 local-dirs usable space is below configured "
        "utilization percentage/no more usable space": (Cause.RETRYABLE, "disk failure"),
        "Container failed during execution, see logs for more information.":
            (Cause.RETRYABLE, "its container's process died"),
    }
    for message, (cause, words) in cases.items():
        rec = policy.yarn_end(message, 256, "-wm", 1.0)
        assert policy.cause_of(rec) == cause, message
        assert words in policy.describe_exit(Task("worker", 1), rec), message


def test_yarn_word_wins_over_a_stopped_record():
    stopped = TaskEnd(-15, "launcher received SIGTERM", stopped=True, time=5.0)
    memory = policy.yarn_end(REAL_MEMORY_KILL, 256, "-wm", 9.0)
    t = Task("worker", 1)
    merged = policy.merge_records({t: stopped}, {}, {t: memory})
    assert merged[t].yarn and merged[t].time == 5.0
    out = policy.decide(SPEC, merged)
    assert out.cause == Cause.PERMANENT and not policy.restart_after(SPEC, out, 0)
    # YARN's SIGTERM may reach the task before the launcher knows it is stopping
    killed = TaskEnd(-15, time=5.0)
    assert policy.merge_records({t: killed}, {}, {t: memory})[t].cause == Cause.PERMANENT
    exited = TaskEnd(3, time=5.0)  # the task's own exit code is what counts
    assert policy.merge_records({t: exited}, {}, {t: memory})[t] == exited


def test_restart_rules():
    failed = Outcome("FAILED", "worker:1 was killed by SIGKILL", "worker:1",
                            cause=Cause.RETRYABLE)
    assert policy.restart_after(SPEC, failed, 0) and policy.restart_after(SPEC, failed, 1)
    assert not policy.restart_after(SPEC, failed, 2)  # 3 attempts used
    for ending in (Outcome("KILLED", "killed: test"),
                   Outcome("FAILED", "the job ran past --timeout 5 s")):
        assert not policy.restart_after(SPEC, ending, 0)


def test_yarn_words_captured_on_the_three_node_sandbox_are_classified():
    """The `[YARN: ...]` exit messages el_submit printed on the 3-node sandbox (a node
    SIGKILLed, a container preempted for the `urgent` queue) are retryable, and a lost
    node is named."""
    from conftest import REPO

    fixtures = REPO / "tests" / "fixtures" / "hadoop-3.3.6-nodes"
    words = {}
    for name in ("el_submit-node-lost-no-restart", "el_submit-preempted-restarted"):
        text = (fixtures / f"{name}.stderr").read_text()
        words[name] = re.search(r"\[YARN: ([^\]]+)\]", text).group(1)
    lost = policy.yarn_end(words["el_submit-node-lost-no-restart"], 256, "-wm", 1.0, "127.0.0.3")
    assert policy.cause_of(lost) == Cause.RETRYABLE
    assert policy.describe_exit(Task("worker", 0), lost).startswith(
        "worker:0 was lost with its node 127.0.0.3 [YARN: Container released on a *lost* node]")
    preempted = policy.yarn_end(words["el_submit-preempted-restarted"], 256, "-wm", 1.0)
    assert policy.cause_of(preempted) == Cause.RETRYABLE
    assert "was preempted by YARN [YARN: Container preempted by scheduler]" in \
        policy.describe_exit(Task("worker", 0), preempted)


def test_goodput_counts_the_work_a_restart_did_again_as_lost():
    """Attempt 1 trains steps 0-50 (t 100-150) and fails at 170; attempt 2 resumes from
    its checkpoint at step 40 (reached at t 140 before) and ends at 200: attempt 1 lost
    170 - 140 = 30 s; useful: 40 s of attempt 1 and 19 s of attempt 2, of 100 s."""
    from tfyarn.core.records import StepReport

    first, second = policy.StepLog(), policy.StepLog()
    for t, step in ((100.0, 0), (140.0, 40), (150.0, 50)):
        first.observe({Task("worker", 0): StepReport(step, t, 1.0, {}, 0, 100.0)})
    for t, step in ((180.0, 40), (199.0, 79)):
        second.observe({Task("worker", 0): StepReport(step, t, 2.0, {}, 40, 180.0)})
    failed = Outcome("FAILED", "stalled", "worker:0", cause=Cause.RETRYABLE)
    spans = [(policy.attempt_time(0, 95.0, 170.0, failed, first), first),
             (policy.attempt_time(1, 172.0, 200.0, Outcome("SUCCEEDED", "ok"), second), second)]
    g = policy.goodput(spans, 105.0)
    assert [(a.first_step, a.last_step, a.lost_s) for a in g.attempts] == [(0, 50, 30.0),
                                                                           (40, 79, 0.0)]
    assert g.useful_s == 59.0 and round(g.ratio, 3) == round(59 / 105, 3)
    lines = policy.goodput_lines(g)
    assert lines[0] == "goodput 56%: 59.0 s of useful training in 1m45s, by attempt:"
    assert "FAILED (retryable): steps 0-50, lost 30.0 s; steps/s worker:0 1.0/s" in lines[1]
    # a job whose tasks never reported: no ratio, and nothing said
    quiet = policy.goodput([(policy.attempt_time(0, 0.0, 9.0, failed, policy.StepLog()),
                             policy.StepLog())], 9.0)
    assert quiet.useful_s is None and policy.goodput_lines(quiet) == []


# worker:0's stderr when worker:1's launcher was killed -9 mid-step (sandbox YARN, the
# one-program census: MultiWorkerMirroredStrategy), and YARN's word on worker:1's container
PEER_DIED = ("    tensors = pywrap_tfe.TFE_Py_Execute(ctx._handle, device_name, op_name,",
             "tensorflow.python.framework.errors_impl.UnavailableError: Graph execution "
             "error:", "Detected at node adam/CollectiveReduceV2 defined at (most recent "
             "call last):")
CONTAINER_FAILED = "Container failed during execution, see logs for more information."


def test_a_failure_on_losing_a_peer_is_decided_by_the_peer():
    """worker:0 exits 1 on losing worker:1 before YARN's word on worker:1 arrives: once it
    does, worker:1's end decides (retryable, so the gang restarts), naming both."""
    w0, w1 = Task("worker", 0), Task("worker", 1)
    first = TaskEnd(1, tail=PEER_DIED, time=5.0)
    assert policy.lost_a_peer(first)
    assert policy.blame_the_peer(w0, first, {}) is None  # no word yet: it waits
    peer = policy.yarn_end(CONTAINER_FAILED, 2048, "-wm", 7.0)
    blamed = policy.blame_the_peer(w0, first, {w1: peer, w0: first})
    assert blamed.task == "worker:1" and blamed.cause == Cause.RETRYABLE
    assert blamed.message.startswith("worker:1 was killed: its container's process died")
    assert blamed.message.endswith("(worker:0 then failed on losing it)")
    # the code's own failure is not a peer's doing, whatever else ended
    own = TaskEnd(1, tail=("ValueError: bad input",), time=5.0)
    assert not policy.lost_a_peer(own) and policy.blame_the_peer(w0, own, {w1: peer}) is None
