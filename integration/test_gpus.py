"""GPUs on YARN (#43): the sandbox's NodeManagers advertise yarn.io/gpu (2, 1 and 0 cards
on its three nodes: `SANDBOX_GPUS`, YARN's GPU plugin with a fake nvidia-smi) and the
ResourceManager schedules them for real. Placement is read from the ResourceManager (each
node's and the application's used resources) while the jobs run.

Needs `SANDBOX_NODES=3 scripts/yarn-sandbox start` (its default GPUs, CI's shape).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest
from conftest import APP_ID, REPO, aggregated_logs, py, wait_until

pytestmark = pytest.mark.yarn
RM = "http://127.0.0.1:8088/ws/v1/cluster"
GPUS = {"127.0.0.1": 2, "127.0.0.2": 1, "127.0.0.3": 0}  # the sandbox's default, 3 nodes
SEED = ("el_submit -t tensorflow-ps -a wide_and_deep -m local -x True -f ./ -pn 1 -pc 1 "
        "-pm 2000 -wn 1 -wc 1 -wg 1 -wm 2000 -c python census_single.py")  # README's
SEE = ("import json, os; print('GPUSEE ' + json.dumps({k: os.environ.get(k) for k in "
       "('TFYARN_TASK_TYPE', 'TFYARN_TASK_INDEX', 'NM_HOST', 'CUDA_VISIBLE_DEVICES', "
       "'TFYARN_GPU_MEMORY_FRACTION', 'LOCAL_RANK')}))")


def get(path: str) -> dict:
    import pwd

    user = pwd.getpwuid(os.geteuid()).pw_name
    sep = "&" if "?" in path else "?"
    with urllib.request.urlopen(f"{RM}/{path}{sep}user.name={user}", timeout=10) as resp:
        return json.load(resp)


def gpus_of(resource: dict) -> int:
    infos = (resource.get("resourceInformations") or {}).get("resourceInformation") or []
    return next((int(r["value"]) for r in infos if r["name"] == "yarn.io/gpu"), 0)


def node_gpus(which: str = "usedResource") -> dict[str, int]:
    return {n["nodeHostName"]: gpus_of(n[which]) for n in get("nodes")["nodes"]["node"]
            if n["state"] == "RUNNING"}


def app_usage(app_id: str) -> tuple[int, int]:
    """(running containers, GPUs held) of a running application, as the RM reports."""
    app = get(f"apps/{app_id}")["app"]
    parts = (app.get("resourceInfo") or {}).get("resourceUsagesByPartition") or []
    return int(app.get("runningContainers") or 0), sum(gpus_of(p["used"]) for p in parts)


def app_count() -> int:
    return len((get("apps").get("apps") or {}).get("app") or [])


@pytest.fixture(autouse=True)
def gpu_sandbox():
    if node_gpus("totalResource") != GPUS:
        pytest.skip("needs the sandbox's 3 nodes with GPUs 2,1,0: SANDBOX_NODES=3 "
                    "scripts/yarn-sandbox start (its default SANDBOX_GPUS)")


def background(args: list[str], cwd: Path, apps: list[str], err: Path) -> tuple[
        subprocess.Popen, str]:
    """el_submit in the background, its stderr in a file; once it printed the app id."""
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=err.open("w"),
                            text=True)
    app_id = (proc.stdout.readline() if proc.stdout else "").strip()
    assert APP_ID.match(app_id), f"no application id: {app_id!r}\n{err.read_text()}"
    apps.append(app_id)
    return proc, app_id


def el_submit_cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "tfyarn.cli", *args[:args.index("-c")],
            "--python", sys.executable, *args[args.index("-c"):]]


def dumps(app_id: str) -> list[dict]:
    return [json.loads(x.split("GPUSEE ", 1)[1]) for x in aggregated_logs(app_id).splitlines()
            if "GPUSEE " in x]


def test_the_seed_command_verbatim_trains_with_one_gpu_for_its_worker(apps, tmp_path):
    """The README's command as a user types it, in the example's dir: its chief (worker 0)
    holds one GPU on a GPU node, its ps none, and it reaches the example's accuracy."""
    census = REPO / "examples" / "census"
    argv = [str(Path(sys.executable).parent / "el_submit"), *shlex.split(SEED)[1:]]
    proc, app_id = background(argv, census, apps, tmp_path / "err")
    seen: list[tuple[int, int, dict[str, int]]] = []

    def both_running() -> bool:  # the AM, the ps and the chief
        running, held = app_usage(app_id)
        seen.append((running, held, node_gpus()))
        return running == 3 or proc.poll() is not None
    wait_until(both_running, 300, "the job's three containers running")
    running, held, used = seen[-1]
    assert (running, held) == (3, 1), seen
    assert sum(used.values()) == 1 and used["127.0.0.3"] == 0, used  # not on the 0-GPU node
    assert proc.wait(timeout=600) == 0, (tmp_path / "err").read_text()
    logs = aggregated_logs(app_id)
    accuracy = [float(x.split("eval_accuracy=")[1].split()[0]) for x in logs.splitlines()
                if "eval_accuracy=" in x]
    assert accuracy and accuracy[-1] >= 0.84, logs[-3000:]
    assert "1 GPU asked, YARN did not say which: using CUDA_VISIBLE_DEVICES=0 (node " \
        "127.0.0.1 isolates no GPU" in logs or "(node 127.0.0.2 isolates no GPU" in logs


def holding(workers: int, apps: list[str], tmp_path: Path) -> tuple[
        subprocess.Popen, str, Path]:
    """Job A: `workers` one-GPU workers that hold their GPUs until the returned file is
    made; once the RM says they all run."""
    release = tmp_path / "release"
    hold = py(f"import os, time\nwhile not os.path.exists({str(release)!r}): time.sleep(0.2)")
    a_proc, a_id = background(el_submit_cli("-t", "tensorflow-worker", "-wn", str(workers),
                                            "-wg", "1", "-wm", "1000", "-c", hold),
                              tmp_path, apps, tmp_path / "a.err")
    wait_until(lambda: app_usage(a_id) == (workers + 1, workers), 300,
               f"A's {workers} GPU workers running")
    return a_proc, a_id, release


def test_three_workers_take_all_three_gpus_and_a_fourth_waits_saying_why(apps, tmp_path):
    a_proc, a_id, release = holding(3, apps, tmp_path)
    assert node_gpus() == GPUS  # every GPU of every node, none asked of the CPU node
    b_proc, b_id = background(el_submit_cli("-t", "tensorflow-worker", "-wn", "1", "-wg", "1",
                                            "-wm", "1000", "-c", "true"),
                              tmp_path, apps, tmp_path / "b.err")
    why = (f"worker:0 waits for 1 GPU: the cluster has 3, 0 free, 3 held by {a_id} (3)")
    wait_until(lambda: why in (tmp_path / "b.err").read_text(), 120,
               f"B saying {why!r}")
    status = subprocess.run([sys.executable, "-m", "tfyarn", "status", b_id, "--tasks"],
                            capture_output=True, text=True, timeout=120)
    assert f"waiting: {why}" in status.stdout, status.stdout + status.stderr
    release.write_text("")
    assert a_proc.wait(timeout=300) == 0, (tmp_path / "a.err").read_text()
    assert b_proc.wait(timeout=300) == 0, (tmp_path / "b.err").read_text()


def test_a_partial_gang_says_what_it_waits_for_and_gives_back(apps, tmp_path):
    """B is given one of its two GPU containers (A holds two of the three GPUs): it says
    which resource it waits for and who holds it, itself included, and gives back what it
    holds after --gang-patience (#26), asking again, until A ends."""
    a_proc, a_id, release = holding(2, apps, tmp_path)
    b_proc, b_id = background(el_submit_cli("-t", "tensorflow-worker", "-wn", "2", "-wg", "1",
                                            "-wm", "1000", "--gang-patience", "10", "-c",
                                            "true"),
                              tmp_path, apps, tmp_path / "b.err")
    why = re.compile(rf"worker:[01] waits for 1 GPU: the cluster has 3, 0 free, 3 held by "
                     rf"{a_id} \(2\), {b_id} \(1, this job\)")
    wait_until(lambda: why.search((tmp_path / "b.err").read_text()), 120, why.pattern)
    gave_back = re.compile(r"the gang was given 1 of 2 containers and nothing more for \d+ s "
                           r"\(another job or queue holds the rest\): giving them back")
    wait_until(lambda: gave_back.search((tmp_path / "b.err").read_text()), 120,
               gave_back.pattern)
    release.write_text("")
    assert a_proc.wait(timeout=300) == 0, (tmp_path / "a.err").read_text()
    assert b_proc.wait(timeout=300) == 0, (tmp_path / "b.err").read_text()


def test_yarn_lists_each_nodes_gpus_as_configured():
    out = subprocess.run(["yarn", "node", "-list", "-showDetails"], capture_output=True,
                         text=True, timeout=120).stdout
    blocks = {b.split()[0]: b for b in re.split(r"\n\s*(?=127\.0\.0\.\d:8041)", out)
              if b.strip().startswith("127.")}
    assert "Configured Resources : <memory:4096, vCores:4, yarn.io/gpu: 2>" in blocks[
        "127.0.0.1:8041"], out
    assert "yarn.io/gpu: 1>" in blocks["127.0.0.2:8041"], out
    assert "yarn.io/gpu" not in blocks["127.0.0.3:8041"], out


def test_wnpg_puts_two_workers_on_one_gpu_each_capped(el_submit):
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", "-wnpg", "2", "-wg", "1",
                            "-wm", "1000", "-c", py(SEE))
    assert out.returncode == 0, out.stderr
    d = dumps(app_id)
    assert sorted((x["TFYARN_TASK_INDEX"], x["CUDA_VISIBLE_DEVICES"],
                   x["TFYARN_GPU_MEMORY_FRACTION"]) for x in d) == [
        ("0", "0", "0.45"), ("1", "0", "0.45")]
    assert len({x["NM_HOST"] for x in d}) == 1 and d[0]["NM_HOST"] != "127.0.0.3"


def test_ppn_ranks_get_their_own_slice_on_the_two_gpu_node(el_submit):
    out, app_id = el_submit("-t", "pytorch", "-wn", "1", "-ppn", "2", "-wg", "2", "-wm", "1000",
                            "-c", py(SEE))
    assert out.returncode == 0, out.stderr
    d = dumps(app_id)
    assert sorted((x["LOCAL_RANK"], x["CUDA_VISIBLE_DEVICES"]) for x in d) == [
        ("0", "0"), ("1", "1")]
    assert {x["NM_HOST"] for x in d} == {"127.0.0.1"}  # the only node with 2 GPUs
    assert {x["TFYARN_GPU_MEMORY_FRACTION"] for x in d} == {None}  # a card each: no cap


@pytest.mark.parametrize(("flags", "line"), [
    (("-wg", "3"), "Error: -wg 3: no node of this cluster has more than 2 GPUs for queue "
                   "default (worker:0's container); use -wg 2 or less\n"),
    (("-wm", "900000"), "Error: -wm 900000: the largest container queue default can have on "
                        "this cluster is 4096 MB (worker:0's container); use -wm 4096 or "
                        "less\n"),
])
def test_a_request_no_node_can_hold_is_refused_before_submit(el_submit, flags, line):
    before = app_count()
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "1", *flags, "-c", "true")
    assert (out.returncode, app_id, out.stderr) == (2, "", line)
    assert app_count() == before  # nothing submitted
