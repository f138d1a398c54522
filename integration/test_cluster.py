"""tfyarn on a cluster like the users' (#26): several nodes, two queues with preemption,
nodes that die or are decommissioned, a ResourceManager that restarts.

These need the sandbox with 3 or more nodes (`SANDBOX_NODES=3 scripts/yarn-sandbox start`;
CI's shape): a node is killed as a machine dies (`scripts/yarn-sandbox kill-node I`:
its NodeManager and every process of its containers SIGKILLed at once), and every test
leaves the cluster whole again (the `whole_cluster` fixture restarts what it took away).
"""

from __future__ import annotations

import getpass
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path

import pytest
from conftest import (
    REPO,
    aggregated_logs,
    final_state,
    hdfs_exists,
    node_processes,
    tfyarn_logs,
    wait_until,
    yarn_cli,
    yarn_site,
)
from programs import STEPPER  # tests/ (on the path: conftest), the bench's too
from streamlines import LinesRead

from tfyarn.core.tfconfig import course_path

pytestmark = pytest.mark.yarn
SANDBOX = REPO / "scripts" / "yarn-sandbox"
RM = "http://127.0.0.1:8088/ws/v1/cluster"
LOST = re.escape("[YARN: Container released on a *lost* node]")  # Hadoop 3.3.6's words
# Each attempt-0 task says where it runs (a file in the job's shared checkpoint dir: the
# sandbox's nodes share one disk, as a cluster shares HDFS) and waits to be ended; a later
# attempt reads that "checkpoint" back and exits 0.
RESUMABLE = """import os, pathlib, sys, time
ckpt = pathlib.Path(sys.argv[1]); task = os.environ["TFYARN_TASK_INDEX"]
attempt = os.environ["TFYARN_ATTEMPT"]
if attempt == "0":
    (ckpt / f"w{task}.tmp").write_text(os.environ["NM_HOST"])
    os.rename(ckpt / f"w{task}.tmp", ckpt / f"w{task}")
    time.sleep(600)
print(f"attempt {attempt} on {os.environ['NM_HOST']} resumed from "
      f"{sorted(p.name for p in ckpt.iterdir())}", flush=True)
"""


def get(path: str) -> dict:
    """The RM's REST answer as the jobs' owner (the sandbox enforces YARN ACLs: an
    anonymous caller is shown no application's details)."""
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    sep = "&" if "?" in path else "?"
    with urllib.request.urlopen(f"{RM}/{path}{sep}user.name={user}", timeout=10) as resp:
        return json.load(resp)


def running_nodes() -> list[str]:
    nodes = get("nodes").get("nodes") or {}
    return sorted(n["nodeHostName"] for n in nodes.get("node", []) if n["state"] == "RUNNING")


def sandbox_nodes() -> dict[str, int]:
    """Node address -> the sandbox's node index (kill-node's argument)."""
    out = subprocess.run([str(SANDBOX), "nodes"], capture_output=True, text=True, check=True)
    return {line.split()[1]: int(line.split()[0]) for line in out.stdout.splitlines()}


@pytest.fixture(autouse=True)
def three_nodes():
    if "127.0.0.1" not in yarn_site("yarn.resourcemanager.hostname", "") or \
            len(running_nodes()) < 3 or len(sandbox_nodes()) < 3:
        pytest.skip("needs the sandbox with 3 nodes: SANDBOX_NODES=3 scripts/yarn-sandbox start")


@pytest.fixture
def whole_cluster():
    """Whatever a test took away (a node killed or decommissioned) is back afterwards."""
    yield
    restore_cluster()


def restore_cluster() -> None:
    """Every node back: the exclude list emptied, killed daemons started again."""
    exclude = Path(yarn_site("yarn.resourcemanager.nodes.exclude-path", ""))
    if exclude.is_file() and exclude.read_text().strip():
        exclude.write_text("")
        yarn_cli("rmadmin", "-refreshNodes")
    out = subprocess.run([str(SANDBOX), "start"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    wait_until(lambda: len(running_nodes()) >= len(sandbox_nodes()), 120, "every node RUNNING")


def submit(tmp_path: Path, apps: list[str], *args: str) -> tuple[subprocess.Popen, str]:
    cmd = [sys.executable, "-m", "tfyarn.cli", *args[:args.index("-c")],
           "--python", sys.executable, *args[args.index("-c"):]]
    proc = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    app_id = proc.stdout.readline().strip()
    assert app_id.startswith("application_"), proc.communicate(timeout=60)
    apps.append(app_id)
    return proc, app_id


def resumable(tmp_path: Path, n: int, memory_mb: int, *extra: str) -> tuple[list[str], Path]:
    """A -t tensorflow-worker job of n RESUMABLE tasks, and its checkpoint dir."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (tmp_path / "resumable.py").write_text(RESUMABLE)
    return ["-t", "tensorflow-worker", "-wn", str(n), "-wm", str(memory_mb), "-f", "./",
            *extra, "-c", f"python resumable.py {ckpt}"], ckpt


def am_host(app_id: str) -> str:
    attempts = get(f"apps/{app_id}/appattempts")["appAttempts"]["appAttempt"]
    return attempts[-1]["nodeHttpAddress"].rsplit(":", 1)[0]


def kept_first(app_id: str) -> None:
    """The first AM attempt's course in HDFS, which names its node. A job's first attempt
    starts without waiting for it (a lost AM's next attempt counts that attempt anyway,
    as lost on a node it cannot name); a restart's waits (`Course.kept`). In CI a node
    killed as the task started once took the course with it, half written."""
    course = course_path(getpass.getuser(), app_id)
    wait_until(lambda: hdfs_exists(course), 60, f"the first AM attempt's course in {course}")


def placed(ckpt: Path, n: int) -> dict[str, str]:
    """Task index -> node, once every attempt-0 task runs."""
    wait_until(lambda: len([p for p in ckpt.iterdir() if not p.name.endswith(".tmp")]) >= n,
               300, f"{n} tasks running")
    return {p.name[1:]: p.read_text() for p in ckpt.iterdir() if not p.name.endswith(".tmp")}


def worker_node_without_the_am(app_id: str, where: dict[str, str]) -> tuple[str, str]:
    """A node that holds a task but not the ApplicationMaster, and one task on it."""
    am = am_host(app_id)
    task, node = next((t, h) for t, h in sorted(where.items()) if h != am)
    return node, f"worker:{task}"


def kill_node(node: str) -> float:
    out = subprocess.run([str(SANDBOX), "kill-node", str(sandbox_nodes()[node])],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return time.monotonic()


def resumed_on(app_id: str) -> list[str]:
    """The nodes where attempt 1's tasks read the checkpoint (YARN's aggregated logs, as
    far as uploaded: wait for the count wanted; a lost node never finishes aggregating)."""
    return re.findall(r"^attempt 1 on (\S+) resumed from \['w0', 'w1', 'w2'\]",
                      yarn_cli("logs", "-applicationId", app_id), re.M)


def expiry_s() -> float:
    return int(yarn_site("yarn.nm.liveness-monitor.expiry-interval-ms", "600000")) / 1000


def test_ranks_over_three_hosts_are_grouped_by_host_and_allreduce(tmp_path, apps):
    """6 torch ranks, 2 a container, one container a node (2.5 GB of a node's 4 GB)."""
    (tmp_path / "ranks.py").write_text(
        "import os, torch, torch.distributed as dist\n"
        "dist.init_process_group('gloo', init_method='env://')\n"
        "v = torch.tensor([float(dist.get_rank() + 1)]); dist.all_reduce(v)\n"
        "e = os.environ\n"
        "print('RANK', e['RANK'], e['LOCAL_RANK'], e['GROUP_RANK'], e['NM_HOST'],"
        " e['MASTER_ADDR'], int(v.item()), flush=True)\n"
        "dist.destroy_process_group()\n")
    proc, app_id = submit(tmp_path, apps, "-t", "pytorch", "-wn", "3", "-ppn", "2", "-wm",
                          "2500", "-f", "./", "-interact", "True", "-c", "python ranks.py")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    rows = [line.split()[2:] for line in err.splitlines() if "] RANK " in line]
    assert len(rows) == 6, err
    by_host: dict[str, list[tuple[int, int, int]]] = {}
    for rank, local, group, host, master, total in rows:
        assert int(total) == 21, rows  # 1 + 2 + ... + 6 on every rank
        by_host.setdefault(host, []).append((int(rank), int(local), int(group)))
        assert master == next(r for r in rows if r[0] == "0")[3]  # rank 0's own node
    assert len(by_host) == 3, by_host  # the nodes' own addresses, one container each
    assert sorted(group for ranks in by_host.values() for group in {g for _, _, g in ranks}) \
        == [0, 1, 2]
    for ranks in by_host.values():
        assert sorted(local for _, local, _ in ranks) == [0, 1]
        assert len({g for _, _, g in ranks}) == 1  # one cross rank per host


def test_tf_config_addresses_are_the_nodes_own(tmp_path, apps):
    code = ("import json, os; t = json.loads(os.environ['TF_CONFIG'])['task']; "
            "print('ADDR', os.environ['NM_HOST'], json.loads(os.environ['TF_CONFIG'])"
            "['cluster'][t['type']][t['index']], flush=True)")
    proc, _ = submit(tmp_path, apps, "-t", "tensorflow-worker", "-wn", "3", "-wm", "2500",
                     "-interact", "True", "-c", f"python -c \"{code}\"")
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    rows = [line.split()[2:] for line in err.splitlines() if "] ADDR " in line]
    assert len(rows) == 3 and len({host for host, _ in rows}) == 3, err
    for host, addr in rows:
        assert addr.rsplit(":", 1)[0] == host, rows


def test_a_lost_node_restarts_the_gang_on_the_survivors(tmp_path, apps, whole_cluster):
    """3 tasks of 1.5 GB fit on the 2 nodes left (with the AM); attempt 2 resumes."""
    args, ckpt = resumable(tmp_path, 3, 1500, "--max-restarts", "1")
    proc, app_id = submit(tmp_path, apps, *args)
    node, task = worker_node_without_the_am(app_id, placed(ckpt, 3))
    killed = kill_node(node)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert re.search(rf"attempt 2/2: restarting after worker:\d was lost with its node "
                     rf"{re.escape(node)} {LOST}", err), err
    assert task in err
    wait_until(lambda: len(resumed_on(app_id)) == 3, 120, "the 3 tasks' aggregated logs")
    assert node not in resumed_on(app_id)
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    assert time.monotonic() - killed < expiry_s() + 120
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")


def test_a_lost_node_without_restarts_fails_naming_task_and_node(tmp_path, apps, whole_cluster):
    args, ckpt = resumable(tmp_path, 3, 1500)
    proc, app_id = submit(tmp_path, apps, *args)
    node, _ = worker_node_without_the_am(app_id, placed(ckpt, 3))
    killed = kill_node(node)
    _, err = proc.communicate(timeout=600)
    took = time.monotonic() - killed
    assert proc.returncode == 1, err
    assert re.search(rf"Error: {app_id} FAILED: worker:\d was lost with its node "
                     rf"{re.escape(node)} {LOST}", err), err
    assert took < expiry_s() + 30, took
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app on the live nodes")


def skein_client():
    import skein

    return skein.Client()


def task_nodes(app_id: str) -> list[str]:
    """The nodes of the application's task containers YARN has given so far (the RM's
    containers of its current attempt, less the ApplicationMaster's, the first)."""
    attempt = get(f"apps/{app_id}/appattempts")["appAttempts"]["appAttempt"][-1]
    listed = get(f"apps/{app_id}/appattempts/{attempt['appAttemptId']}/containers")
    items = listed.get("container") or []
    items = [items] if isinstance(items, dict) else items  # one container: not a list
    found = sorted((c["containerId"], c["nodeId"].rsplit(":", 1)[0]) for c in items)
    return [node for _, node in found[1:]]


def test_the_node_holding_a_starting_gang_dies_and_the_job_succeeds_on_the_others(
        tmp_path, apps, whole_cluster):
    """The node given a starting gang's container killed as it starts (before the gang
    ran): its containers are given back without spending a restart and asked for again
    at once, and YARN gives them on the live nodes; SUCCEEDED within node expiry + 60 s.
    (Here the RM finds the node lost, after the sandbox's 10 s expiry, before a start to
    it fails: skein patch 0006's 20 s and 0009's keep-out serve a cluster whose expiry is
    YARN's 10 minutes; tests/java/KeepOutCheck.java checks the keep-out.)"""
    # 3 x 1.5 GB and the AM's 1 GB do not fit one 4 GB node: one task lands elsewhere
    proc, app_id = submit(tmp_path, apps, "-t", "tensorflow-worker", "-wn", "3", "-wm", "1500",
                          "--max-restarts", "1", "-c", "sleep 15")
    wait_until(lambda: any(get(f"apps/{app_id}")["app"]["state"] == "RUNNING" and
                           n != am_host(app_id) for n in task_nodes(app_id)), 120,
               "a task container given on a node without the ApplicationMaster")
    node = next(n for n in task_nodes(app_id) if n != am_host(app_id))
    killed = kill_node(node)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert time.monotonic() - killed < expiry_s() + 60, err
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    logs = tfyarn_logs(app_id)  # the driver's words on a gang given back
    driver = logs.stdout
    # the killed node never uploads its containers' logs: tfyarn logs says so once the RM
    # lists it LOST and every other node has uploaded, and shows what YARN has
    assert re.search(rf"YARN has {app_id}'s logs from every node but {re.escape(node)}:\d+, "
                     r"lost while the job ran", logs.stderr), logs.stderr
    assert re.search(rf"(was lost with its node|was never started: its node) "
                     rf"{re.escape(node)}.*; asking again at once, on other nodes \(no "
                     r"restart spent\)", driver) or \
        "attempt 2/2: restarting after" in err, err  # the gang had run: a restart then
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app on the live nodes")


def test_the_application_masters_node_lost_resumes_the_job_in_a_second_attempt(
        tmp_path, apps, whole_cluster):
    """YARN starts the ApplicationMaster again on a live node (--am-attempts 2, the
    default); its driver resumes the job as attempt 2 of the tasks (skein's gang from the
    spec, told its attempt by the cluster spec), which reads the checkpoint; el_submit
    says so once and follows the new attempt to SUCCEEDED."""
    args, ckpt = resumable(tmp_path, 2, 1500, "--max-restarts", "1")
    (tmp_path / "resumable.py").write_text(  # the resumed attempt runs a while: followed
        RESUMABLE + "time.sleep(10)\n")
    proc, app_id = submit(tmp_path, apps, *args)
    placed(ckpt, 2)
    follow = subprocess.Popen([sys.executable, "-m", "tfyarn", "logs", app_id, "--follow"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    with skein_client() as client:  # following the first AM before it is lost
        first = client.connect(app_id)
        wait_until(lambda: first.kv.get("client") == b"following", 120, "logs --follow on")
    kept_first(app_id)
    node = am_host(app_id)
    killed = kill_node(node)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    follow_out, follow_err = follow.communicate(timeout=300)
    assert follow.returncode == 0, follow_err
    assert "the ApplicationMaster was lost; YARN started its attempt 2: following the " \
           "resumed job's containers" in follow_err, follow_err
    assert re.search(r"attempt 1 on 127\.0\.0\.\d resumed from", follow_out), follow_out
    assert re.search(rf"the ApplicationMaster was lost on {re.escape(node)}; YARN started its "
                     r"attempt 2 on 127\.0\.0\.\d: the job resumes", err), err
    assert "attempt 2/2: restarting after the ApplicationMaster was lost (application " \
           f"attempt 1 on {node}" in err, err
    assert time.monotonic() - killed < expiry_s() + 60
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    assert am_host(app_id) != node
    # both tasks' own words, as `logs --follow` relayed them (the aggregated logs would
    # say the same after tfyarn logs' bounded wait for the lost node, which never uploads)
    resumed = re.findall(r"^\[worker:\d\] attempt 1 on (\S+) resumed from \['w0', 'w1'\]",
                         follow_out, re.M)
    assert len(resumed) == 2 and node not in resumed, follow_out
    status = subprocess.run([sys.executable, "-m", "tfyarn", "status", app_id, "--tasks"],
                            capture_output=True, text=True)
    assert "attempt 1: FAILED: the ApplicationMaster was lost" in status.stdout, \
        status.stdout + status.stderr
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app on the live nodes")


def test_the_application_masters_node_lost_without_restarts_fails_naming_the_loss(
        tmp_path, apps, whole_cluster):
    """--max-restarts 0: the second AM attempt's driver fails the job at once, naming
    where the first was lost and why it did not resume. (The first kept its course, which
    names its node, before the kill: `kept_first`.)"""
    args, ckpt = resumable(tmp_path, 1, 1500)
    proc, app_id = submit(tmp_path, apps, *args)
    placed(ckpt, 1)
    kept_first(app_id)
    node = am_host(app_id)
    killed = kill_node(node)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    assert f"FAILED: the ApplicationMaster was lost (application attempt 1 on {node}; " in err
    assert "(--max-restarts 0: no restart left to resume it)" in err, err
    assert time.monotonic() - killed < expiry_s() + 60
    assert final_state(app_id) == "FINISHED/FAILED"


def test_with_one_am_attempt_the_application_masters_node_lost_fails_the_job(
        tmp_path, apps, whole_cluster):
    """--am-attempts 1: YARN ends the application with its AM (never a hang, never
    SUCCEEDED); el_submit names the node and the flag."""
    args, ckpt = resumable(tmp_path, 1, 1500, "--max-restarts", "1", "--am-attempts", "1")
    proc, app_id = submit(tmp_path, apps, *args)
    placed(ckpt, 1)
    node = am_host(app_id)
    killed = kill_node(node)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    assert f"FAILED: the ApplicationMaster was lost with its node {node}, and every task " \
           "ended with it, with no ApplicationMaster attempt left (--am-attempts" in err, err
    assert time.monotonic() - killed < expiry_s() + 60
    assert final_state(app_id) in ("FINISHED/FAILED", "FAILED/FAILED")


def test_the_application_master_lost_twice_without_restarts_left_fails_naming_both(
        tmp_path, apps, whole_cluster):
    """A node loss never counts toward YARN's AM attempts (YARN-614: the second AM's node
    lost too, YARN starts a third); --max-restarts bounds the resumes: with 1, the third
    attempt's driver fails the job naming both losses, never a hang, never SUCCEEDED."""
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    (tmp_path / "runs.py").write_text(
        "import os, pathlib, sys, time\n"
        "a = os.environ['TFYARN_ATTEMPT']\n"
        "pathlib.Path(sys.argv[1], f'a{a}').write_text(os.environ['NM_HOST'])\n"
        "time.sleep(600)\n")
    proc, app_id = submit(tmp_path, apps, "-t", "tensorflow-worker", "-wn", "1", "-wm", "1500",
                          "-f", "./", "--max-restarts", "1", "-c", f"python runs.py {ckpt}")
    wait_until(lambda: (ckpt / "a0").exists(), 300, "attempt 1 running")
    kept_first(app_id)
    first = am_host(app_id)
    kill_node(first)
    wait_until(lambda: (ckpt / "a1").exists(), 300, "attempt 2 running, resumed by AM attempt 2")
    second = am_host(app_id)
    assert second != first
    killed = kill_node(second)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 1, err
    assert f"FAILED: the ApplicationMaster was lost (application attempt 2 on {second}; " in err
    assert "(--max-restarts 1: no restart left to resume it) [attempt 2/2; earlier: attempt " \
           f"1: the ApplicationMaster was lost (application attempt 1 on {first}; " in err, err
    assert time.monotonic() - killed < expiry_s() + 60
    assert final_state(app_id) == "FINISHED/FAILED"
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app on the live nodes")


def contend(tmp_path: Path, apps: list[str], *a_args: str, watch: bool = False):
    """Job A fills the cluster from `default` (one 3 GB task a node, the AM beside one);
    once it runs, job B asks for its share in `urgent`. Both running el_submits, their
    ids, and with `watch` A's PreemptionNotices, watching before B is submitted (a watch
    sees only later puts: started after B, it missed the notice in CI)."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir(), b_dir.mkdir()
    args, ckpt = resumable(a_dir, 3, 3000, "--queue", "default", *a_args)
    a, a_id = submit(a_dir, apps, *args)
    placed(ckpt, 3)
    notices = PreemptionNotices(a_id) if watch else None
    b, b_id = submit(b_dir, apps, "-t", "tensorflow-worker", "-wn", "2", "-wm", "1500",
                     "--queue", "urgent", "-c", "true")
    return a, a_id, b, b_id, notices


def test_preemption_restarts_the_gang_after_the_urgent_job(tmp_path, apps):
    """A fills the cluster from `default` (one 3 GB task a node); B in `urgent` is owed
    half of it and preempts A; A restarts as a gang once B is done, and succeeds."""
    a, a_id, b, b_id, _ = contend(tmp_path, apps, "--max-restarts", "2")
    _, b_err = b.communicate(timeout=600)
    assert b.returncode == 0, b_err
    _, a_err = a.communicate(timeout=600)
    assert a.returncode == 0, a_err
    assert re.search(r"attempt 2/3: restarting after worker:\d was preempted by YARN "
                     r"\[YARN: Container preempted by scheduler\]", a_err), a_err
    status = subprocess.run([sys.executable, "-m", "tfyarn", "status", a_id, "--tasks"],
                            capture_output=True, text=True)
    assert "attempt 1: FAILED" in status.stdout and "attempt 2: SUCCEEDED" in status.stdout, \
        status.stdout + status.stderr
    b_end = get(f"apps/{b_id}")["app"]["finishedTime"]
    assert get(f"apps/{a_id}")["app"]["finishedTime"] > b_end
    assert get(f"apps/{a_id}")["app"]["queue"] == "default"
    assert get(f"apps/{b_id}")["app"]["queue"] == "urgent"


def test_two_jobs_contending_for_the_cluster_neither_starves(tmp_path, apps):
    """A (3 x 3 GB, a node each) is preempted for B (`urgent`, 3 x 1.5 GB, within its
    guaranteed half, running 30 s). A asks for its new gang only after a backoff, so B
    gets what it is owed first; A's new gang is then given part of its containers while
    B runs, and gives them back after --gang-patience rather than sit on them (no
    restart spent), asks again, completes after B and resumes from its checkpoint."""
    patience = ("--gang-patience", "10", "-wait_time", "5")
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir(), b_dir.mkdir()
    args, ckpt = resumable(a_dir, 3, 3000, "--queue", "default", "--max-restarts", "2",
                           *patience)
    a, a_id = submit(a_dir, apps, *args)
    placed(ckpt, 3)
    b, b_id = submit(b_dir, apps, "-t", "tensorflow-worker", "-wn", "3", "-wm", "1500",
                     "--queue", "urgent", *patience, "-c", "sleep 30")
    _, b_err = b.communicate(timeout=600)
    _, a_err = a.communicate(timeout=600)
    assert b.returncode == 0, b_err
    assert a.returncode == 0, a_err
    assert "attempt 2/3: restarting after" in a_err and "attempt 3/3" not in a_err, a_err
    assert re.search(r"waiting for resources: the gang was given [12] of 3 containers and "
                     r"nothing more for \d+ s \(another job or queue holds the rest\): giving "
                     r"them back; asking again in \d+ s \(no restart spent\)", a_err), a_err
    assert get(f"apps/{a_id}")["app"]["finishedTime"] > get(f"apps/{b_id}")["app"]["finishedTime"]
    # every task of A's last gang read the checkpoint (each node uploads its logs itself)
    wait_until(lambda: len(resumed_on(a_id)) == 3, 120, "the 3 tasks' aggregated logs")


def test_a_gracefully_decommissioned_node_restarts_the_gang(tmp_path, apps, whole_cluster):
    """`yarn rmadmin -refreshNodes -g 5 -server`: the node takes no new containers; its
    running ones are ended after the 5 s timeout, as on a lost node, and the gang
    restarts on the other nodes."""
    args, ckpt = resumable(tmp_path, 3, 1500, "--max-restarts", "1")
    proc, app_id = submit(tmp_path, apps, *args)
    node, _ = worker_node_without_the_am(app_id, placed(ckpt, 3))
    Path(yarn_site("yarn.resourcemanager.nodes.exclude-path", "")).write_text(node + "\n")
    out = yarn_cli("rmadmin", "-refreshNodes", "-g", "5", "-server")
    assert "Exception" not in out, out
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert re.search(rf"attempt 2/2: restarting after worker:\d was lost with its node "
                     rf"{re.escape(node)} \[YARN: ", err), err
    states = {n["nodeHostName"]: n["state"] for n in get("nodes?states=DECOMMISSIONED")
              .get("nodes", {}).get("node", [])}
    assert states.get(node) == "DECOMMISSIONED", states
    assert final_state(app_id) == "FINISHED/SUCCEEDED"


def test_a_nodemanager_ending_while_the_sandbox_starts_is_started_again(whole_cluster):
    """A decommissioned node's NodeManager takes seconds to end (it waits for log
    aggregation), so the teardown's `yarn-sandbox start` found it alive and saw it end
    while waiting: CI's sandbox was stopped whole. Here a frozen NodeManager (alive, not
    answering) is killed once `start` says it waits for the nodes, after it looked at
    every daemon: it is started again and every node is RUNNING."""
    home = Path(os.environ["HADOOP_CONF_DIR"]).parent
    index = max(sandbox_nodes().values())
    pid_file = next((home / "nodes" / str(index) / "pids").glob("*-nodemanager.pid"))
    pid = int(pid_file.read_text())
    os.kill(pid, signal.SIGSTOP)
    said = []
    try:
        start = subprocess.Popen([str(SANDBOX), "start"], stdout=subprocess.PIPE,
                                 stderr=subprocess.PIPE, text=True)
        assert start.stderr is not None
        for line in start.stderr:  # until it waits (or ends: then the asserts below say why)
            said.append(line)
            if "waiting for HDFS and every node" in line:
                break
    finally:
        os.kill(pid, signal.SIGKILL)
    _, rest = start.communicate(timeout=300)
    err = "".join(said) + rest
    assert start.returncode == 0, err
    assert "waiting for HDFS and every node" in "".join(said), err
    assert "restarting the nodemanager" in err, err
    assert len(running_nodes()) == len(sandbox_nodes())


def test_a_resourcemanager_restart_mid_job_is_ridden_through(tmp_path, apps, whole_cluster):
    """Work-preserving recovery: the RM stopped for 15 s (and until `tfyarn status` and
    `logs --follow` have said it is away) and started again; the job goes on and succeeds;
    el_submit, `tfyarn logs --follow` (following before the stop) and `tfyarn status`
    (asked while the RM is away) each say once that the RM is away and once that it is
    back."""
    args, ckpt = resumable(tmp_path, 2, 1000)
    (tmp_path / "resumable.py").write_text(RESUMABLE.replace("time.sleep(600)",
                                                             "time.sleep(45)"))
    proc, app_id = submit(tmp_path, apps, *args)
    placed(ckpt, 2)
    tfyarn = [sys.executable, "-m", "tfyarn"]
    follow = subprocess.Popen([*tfyarn, "logs", app_id, "--follow"], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    conf = os.environ["HADOOP_CONF_DIR"]
    subprocess.run(["yarn", "--config", conf, "--daemon", "stop", "resourcemanager"], check=True)
    status = subprocess.Popen([*tfyarn, "status", app_id], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    told = {status: LinesRead(status.stderr), follow: LinesRead(follow.stderr)}  # as it comes
    time.sleep(15)  # the RM's absence itself, not a synchronisation
    # and until the two cold clients, started about the stop, have said it is away (a call
    # unanswered 10 s): on a loaded CI machine one once made its first call only as the RM
    # came back, and had nothing to say (CI, 2026-11-30)
    wait_until(lambda: all(said.said("does not answer") for said in told.values()),
               180, "tfyarn status and logs --follow saying the ResourceManager is away")
    subprocess.run(["yarn", "--config", conf, "--daemon", "start", "resourcemanager"], check=True)
    _, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err
    assert f"{app_id} SUCCEEDED" in err
    assert final_state(app_id) == "FINISHED/SUCCEEDED"
    assert status.stdout is not None and follow.stdout is not None
    status_out = status.stdout.read()
    status.wait(timeout=120)
    follow_out = follow.stdout.read()
    follow.wait(timeout=300)
    status_err, follow_err = told[status].text(), told[follow].text()
    # asked just as the RM came back, the app may not have resynced yet: a recovered app
    # is ACCEPTED until its AM's next heartbeat (what Hadoop 3.3.6 answered in CI)
    assert status.returncode == 0, status_out + status_err
    assert "state: RUNNING" in status_out or (
        "state: ACCEPTED" in status_out and "Attempt recovered after RM restart" in status_out
    ), status_out + status_err
    assert follow.returncode == 0, follow_err
    assert re.search(r"attempt 0 on 127\.0\.0\.\d resumed from", follow_out), follow_out
    for said in (err, status_err, follow_err):
        assert said.count("the ResourceManager does not answer") == 1, said
        assert said.count("the ResourceManager answers again") == 1, said


class PreemptionNotices:
    """The preemption notices A's ApplicationMaster puts in its store ("skein:preemption",
    tfyarn's skein patch 0005), each with the states of the containers it names as the
    notice arrives, read by a thread watching the store while A runs."""

    def __init__(self, app_id: str) -> None:
        import skein

        self.client = skein.Client()
        self.app = self.client.connect(app_id)
        self.seen: list[tuple[dict, dict[str, str]]] = []
        self.queue = self.app.kv.events(key="skein:preemption", event_type="put")
        self.thread = threading.Thread(target=self._watch, daemon=True)
        self.thread.start()

    def _watch(self) -> None:
        import grpc
        import skein

        try:
            while True:
                notice = json.loads(self.queue.get().result.value)
                ids = notice["strict"] + notice["negotiable"]
                states = {c.id: str(c.state) for c in self.app.get_containers()
                          if c.id in ids}
                self.seen.append((notice, states))
        except (skein.exceptions.SkeinError, grpc.RpcError, ConnectionError, OSError):
            return  # the application ended: its store with it

    def close(self) -> None:
        self.thread.join(timeout=60)
        self.client.close()


def stepper_and_urgent(tmp_path: Path, apps: list[str], stepper_args: str, urgent: str):
    """contend()'s A as a STEPPER job (`stepper.py CKPT STATE ` + `stepper_args`,
    --max-restarts 2, the whole cluster) and, once A runs, B in `urgent` running `urgent`:
    both running el_submits, their ids, and A's state dir."""
    a_dir, b_dir = tmp_path / "a", tmp_path / "b"
    a_dir.mkdir(), b_dir.mkdir()
    ckpt, state = a_dir / "ckpt", a_dir / "state"
    ckpt.mkdir(), state.mkdir()
    (a_dir / "stepper.py").write_text(STEPPER)
    a, a_id = submit(a_dir, apps, "-t", "tensorflow-worker", "-wn", "3", "-wm", "3000", "-f",
                     "./", "--queue", "default", "--max-restarts", "2", "-c",
                     f"python stepper.py {ckpt} {state} {stepper_args}")
    placed(ckpt, 3)
    b, b_id = submit(b_dir, apps, "-t", "tensorflow-worker", "-wn", "2", "-wm", "1500",
                     "--queue", "urgent", "-c", urgent)
    return a, a_id, b, b_id, state


def stepper_lines(logs: str) -> str:
    """What a STEPPER job's logs say of its steps, and tfyarn's words: a failed assertion's
    message (the whole logs are pages of YARN's)."""
    return "\n".join(line for line in logs.splitlines()
                     if "step" in line or line.startswith(("tfyarn:", "Container: ")))


def preempted_stepper(tmp_path: Path, apps: list[str], how: str, every: int = 0):
    """A preempted for B (stepper_and_urgent); both ended. A's stderr, its id, and the
    state dir."""
    a, a_id, b, _, state = stepper_and_urgent(tmp_path, apps, f"{every} {how}", "true")
    _, b_err = b.communicate(timeout=600)
    assert b.returncode == 0, b_err
    _, a_err = a.communicate(timeout=600)
    assert a.returncode == 0, a_err
    return a_err, a_id, state


def test_a_preemption_notice_becomes_a_checkpoint_and_the_restart_resumes_from_it(
        tmp_path, apps):
    """YARN's notice reaches the tasks before the kill (tfyarn.preempting()); task 0 saves
    at the step it is at and every task holds; the restart after the preemption resumes
    from that step: nothing done before the kill is lost."""
    a_err, a_id, state = preempted_stepper(tmp_path, apps, "notice")
    assert re.search(r"YARN's preemption notice for worker-\d.*: the tasks are told", a_err), a_err
    assert re.search(r"attempt 2/3: restarting after worker:\d was preempted by YARN", a_err)
    saved = int((state / "step").read_text().strip())  # attempt 2's 100 steps saved nothing
    logs = aggregated_logs(a_id)
    at = re.findall(r"^saved a checkpoint at step (\d+) after YARN's preemption notice", logs,
                    re.M)
    resumed = re.findall(r"^attempt 1 resumed from step (\d+)", logs, re.M)
    assert at and resumed and set(resumed) == {at[0]}, stepper_lines(logs)
    # no step lost to the preemption: every task held at the notice until the kill, at the
    # step it had reached (each task's own count: they started apart, so their counts
    # differ by their start skew, 0.2 s once in CI: compared across tasks, that was read
    # as steps lost), and task 0 saved the step it held at
    held = {t: (state / f"held{t}.0").read_text() for t in range(3)
            if (state / f"held{t}.0").exists()}
    last = {t: (state / f"last{t}.0").read_text() for t in range(3)}
    assert len(held) == 3 and held == last, (held, last)
    assert held[0] == at[0], (held, at)
    assert saved >= int(at[0])


def test_a_task_that_ends_at_the_notice_counts_as_preempted_and_resumes(tmp_path, apps):
    """Task 0 saves at the notice and exits 42 (as a checkpoint handler that ends its
    process): retryable, not the code's failure; the gang gives way to the queue owed the
    room, restarts from the saved step and SUCCEEDS."""
    a_err, a_id, state = preempted_stepper(tmp_path, apps, "exit")
    assert re.search(r"attempt 2/3: restarting after worker:0 .*42.* \(after YARN's "
                     r"preemption notice\)", a_err), a_err
    logs = aggregated_logs(a_id)
    at = re.findall(r"^saved a checkpoint at step (\d+) after YARN's preemption notice", logs,
                    re.M)
    resumed = re.findall(r"^attempt 1 resumed from step (\d+)", logs, re.M)
    assert at and set(resumed) == {at[0]}, stepper_lines(logs)


# Attempt 0: task 0 kills itself at once (a restart follows). Attempt 1: each task says it
# runs, notes whether tfyarn.preempting() was ever true, and exits once the test says so.
NOTICED = """import os, pathlib, signal, sys, time, tfyarn
state = pathlib.Path(sys.argv[1])
attempt, task = os.environ["TFYARN_ATTEMPT"], os.environ["TFYARN_TASK_INDEX"]
if attempt == "0":
    if task == "0":
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
(state / f"runs{task}").write_text("1")
while not (state / "done").exists():
    if tfyarn.preempting():
        (state / f"told{task}").write_text("1")
    time.sleep(0.1)
"""


def test_a_notice_for_the_gang_before_a_restart_never_reaches_the_new_one(tmp_path, apps):
    """A notice that names the containers of a gang already replaced (it came during the
    restart) is not passed to the new gang, whose tasks are not told; one naming the new
    gang's is. Both are put as the AM puts the RM's (skein patch 0005's key and JSON), by
    the job's owner; the driver says which notice it looked at last
    (`preemption_noticed`: the RM's time)."""
    import skein

    state = tmp_path / "state"
    state.mkdir()
    (tmp_path / "noticed.py").write_text(NOTICED)
    proc, app_id = submit(tmp_path, apps, "-t", "tensorflow-worker", "-wn", "2", "-wm", "1000",
                          "-f", "./", "--max-restarts", "1", "-c",
                          f"python noticed.py {state}")
    wait_until(lambda: (state / "runs0").exists() and (state / "runs1").exists(), 300,
               "attempt 2's gang running")
    with skein.Client() as client:
        app = client.connect(app_id)
        old = {"time": 1000, "strict": ["worker-0_0", "worker-1_0"], "negotiable": [],
               "yarn": {}}
        app.kv["skein:preemption"] = json.dumps(old).encode()
        wait_until(lambda: app.kv.get("preemption_noticed") == b"1.000", 60,
                   "the driver's look at the old gang's notice")
        assert app.kv.get("gang/1/preempting/1") is None  # not passed on
        new = {**old, "time": 2000, "strict": ["worker-0_1"]}
        app.kv["skein:preemption"] = json.dumps(new).encode()
        wait_until(lambda: (state / "told0").exists() and (state / "told1").exists(), 60,
                   "the new gang told of the notice naming its container")
        passed = [app.kv.get(f"gang/1/preempting/{n}") for n in (1, 2)]
    assert passed[1] is None, passed  # one notice passed on: the new gang's
    assert json.loads(passed[0])["at"] == 2.0 and json.loads(passed[0])["containers"] == \
        ["worker-0"], passed
    (state / "done").write_text("1")
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    assert "attempt 2/2: restarting after worker:0 was killed" in err, err


def test_a_notice_the_resourcemanager_takes_back_costs_the_hold_and_no_restart(tmp_path, apps):
    """B, which A was to be preempted for, is killed once A holds at the notice: the RM
    takes nothing, A's tasks train on once the notice lapses (PREEMPTION_HOLD_S), and A
    SUCCEEDS in its first attempt. (Each task runs 30 steps past the notice's lapse and
    ends: not a fixed count, which had to outlast the notice's coming and the hold.)"""
    a, a_id, b, b_id, state = stepper_and_urgent(tmp_path, apps, "0 notice +30", "sleep 300")
    wait_until(lambda: (state / "held").exists(), 120, "A's task 0 holding at the notice")
    yarn_cli("application", "-kill", b_id)
    b.communicate(timeout=120)
    _, a_err = a.communicate(timeout=600)
    assert a.returncode == 0, a_err
    assert "YARN's preemption notice for worker-" in a_err and "restarting" not in a_err, a_err
    # every task held at the notice, and trained 30 steps once it lapsed
    held = [int((state / f"held{t}.0").read_text()) for t in range(3)]
    assert [int((state / f"last{t}.0").read_text()) for t in range(3)] == \
        [h + 30 for h in held], held


def test_preemption_without_restarts_fails_saying_preempted(tmp_path, apps):
    """...and the RM's notice reached A's store while the containers it names still ran
    (the sandbox's RM waits 8 s between its notice and the kill)."""
    a, a_id, b, _, notices = contend(tmp_path, apps, watch=True)
    _, a_err = a.communicate(timeout=600)
    notices.close()
    assert a.returncode == 1, a_err
    assert notices.seen, "no preemption notice in A's store"
    notice, states = notices.seen[0]
    named = notice["strict"] + notice["negotiable"]
    assert named and all(n.startswith("worker-") for n in named), notice
    assert set(notice["yarn"]) == set(named) and all(
        y.startswith("container_") for y in notice["yarn"].values()), notice
    assert "RUNNING" in " ".join(states.values()), (notice, states)
    assert re.search(rf"Error: {a_id} FAILED: worker:\d was preempted by YARN "
                     r"\[YARN: Container preempted by scheduler\]", a_err), a_err
    _, b_err = b.communicate(timeout=600)
    assert b.returncode == 0, b_err
    wait_until(lambda: not node_processes(a_id), 60, "no process of A")
