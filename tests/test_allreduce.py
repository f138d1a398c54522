"""Several processes per container (-ppn, -wnpg), GPU placement and allreduce jobs
(-t tensorflow-mpi with Horovod, -t pytorch with DDP): the pure rules, the YARN spec, and
real local jobs whose processes report what they see.
"""

from __future__ import annotations

import json
import os

import pytest
import yaml
from conftest import REPO, job_processes, py

from tfyarn.api.options import ElSubmitArgs, from_el_submit
from tfyarn.client import appspec
from tfyarn.core.jobspec import JobSpec
from tfyarn.core.tfconfig import (
    Task,
    allreduce_env,
    allreduce_ranks,
    device_env,
)

W = Task("worker", 0)


def spec(tmp_path, **kw) -> JobSpec:
    return from_el_submit(ElSubmitArgs(command=("true",), **kw), str(tmp_path))


# ---------------------------------------------------------------- pure rules


def test_ranks_are_grouped_by_host():
    addrs = {Task("worker", i): f"{h}:{1000 + i}" for i, h in
             enumerate(["b", "a", "b", "a", "c"])}
    ranks = allreduce_ranks(addrs)
    by_rank = sorted(ranks.items(), key=lambda kv: kv[1].rank)
    # hosts in order of their lowest task index: b (0, 2), a (1, 3), c (4)
    assert [str(t) for t, _ in by_rank] == ["worker:0", "worker:2", "worker:1", "worker:3",
                                            "worker:4"]
    r = ranks[Task("worker", 3)]
    assert (r.rank, r.size, r.local_rank, r.local_size, r.host) == (3, 5, 1, 2, "a")
    assert (r.cross_rank, r.cross_size) == (1, 2)  # local rank 1 exists on b and a only
    c = ranks[Task("worker", 4)]
    assert (c.local_rank, c.local_size, c.cross_rank, c.cross_size) == (0, 1, 2, 3)


def test_allreduce_env_for_torch_and_horovod():
    r = allreduce_ranks({W: "h1:5000", Task("worker", 1): "h1:5001"})[Task("worker", 1)]
    torch_only = allreduce_env(r, "h1:5000", None)
    assert torch_only == {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1",
                          "LOCAL_WORLD_SIZE": "2", "GROUP_RANK": "0", "MASTER_ADDR": "h1",
                          "MASTER_PORT": "5000"}
    hvd = allreduce_env(r, "h1:5000", "am:7000")
    assert hvd["HOROVOD_GLOO_RENDEZVOUS_ADDR"] == "am" and hvd["HOROVOD_GLOO_RENDEZVOUS_PORT"] \
        == "7000"
    assert hvd["HOROVOD_CONTROLLER"] == "gloo" and hvd["HOROVOD_CPU_OPERATIONS"] == "gloo"
    assert int(hvd["HOROVOD_GLOO_TIMEOUT_SECONDS"]) > 30 and hvd["HOROVOD_HOSTNAME"] == "h1"
    assert (hvd["HOROVOD_RANK"], hvd["HOROVOD_LOCAL_SIZE"], hvd["HOROVOD_CROSS_SIZE"]) == \
        ("1", "2", "1")


def test_ranks_share_the_containers_vcores():
    from tfyarn.core.tfconfig import thread_env

    assert thread_env(8, 2, {}) == {"OMP_NUM_THREADS": "4", "TF_NUM_INTRAOP_THREADS": "4",
                                    "TF_NUM_INTEROP_THREADS": "4"}
    assert thread_env(1, 2, {}) == {"OMP_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
                                    "TF_NUM_INTEROP_THREADS": "2"}  # 1 could deadlock
    assert thread_env(8, 2, {"OMP_NUM_THREADS": "3"}) == {}  # the user's choice wins
    assert thread_env(8, 1, {"TF_NUM_INTEROP_THREADS": "3"}) == {}  # any of them


def test_device_placement():
    assert device_env([], 1, 0, shared=False) == {"CUDA_VISIBLE_DEVICES": ""}  # ps, -wg 0
    assert device_env(["3"], 1, 0, shared=False) == {"CUDA_VISIBLE_DEVICES": "3"}
    shared = device_env(["1"], 2, 1, shared=True)  # -wnpg 2: 0.9 of the card split in two
    assert shared == {"CUDA_VISIBLE_DEVICES": "1", "TFYARN_GPU_MEMORY_FRACTION": "0.45"}
    assert device_env(["1"], 3, 0, shared=True, card_mib=15360) == {
        "CUDA_VISIBLE_DEVICES": "1", "TFYARN_GPU_MEMORY_FRACTION": "0.3",
        "TFYARN_GPU_MEMORY_MB": "4608"}
    assert device_env(["1"], 2, 0, shared=True, fraction=1.0) == {  # no cap: growth
        "CUDA_VISIBLE_DEVICES": "1", "TF_FORCE_GPU_ALLOW_GROWTH": "true"}
    assert device_env(["0", "1", "2", "3"], 2, 1, shared=False) == {
        "CUDA_VISIBLE_DEVICES": "2,3"}  # -ppn 2 -wg 4: two each
    assert device_env(["0", "1"], 2, 1, shared=False, fraction=0.5)[
        "TFYARN_GPU_MEMORY_FRACTION"] == "0.5"  # -ppn, capped only when asked
    assert device_env(["5"], 2, 0, shared=False)["TFYARN_GPU_MEMORY_FRACTION"] == "0.45"


def test_containers_for_wnpg_and_ppn(tmp_path):
    s = spec(tmp_path, kind="tensorflow-worker", workers="4", workers_per_gpu="2",
             worker_gpus="1")
    assert [(c.name, [str(t) for t in c.tasks], c.resources.gpus) for c in s.containers()] == [
        ("workers-0", ["worker:0", "worker:1"], 1), ("workers-1", ["worker:2", "worker:3"], 1)]
    m = spec(tmp_path, kind="tensorflow-mpi", workers="3", procs_per_node="2")
    assert len(m.tasks()) == 6 and [len(c.tasks) for c in m.containers()] == [2, 2, 2]
    ps = spec(tmp_path, kind="tensorflow-ps", ps="2", workers="2")
    assert [c.name for c in ps.containers()] == ["ps-0", "ps-1", "chief-0", "worker-0"]


# ---------------------------------------------------------------- CLI and YARN spec


def test_dry_run_shows_containers_and_tasks(el_submit):
    out = el_submit("-t", "tensorflow-worker", "-wn", "4", "-wnpg", "2", "-wg", "1",
                    "--dry-run", "-c", "true")
    assert out.returncode == 0, out.stderr
    doc = yaml.safe_load(out.stdout)
    assert [(c["name"], c["gpus"], len(c["tasks"])) for c in doc["containers"]] == [
        ("workers-0", 1, 2), ("workers-1", 1, 2)]
    assert JobSpec.from_dict(doc).tasks_per_container == 2  # the view reads back


@pytest.mark.parametrize(("args", "flag"), [
    (["-t", "tensorflow-ps", "-ppn", "2"], "-ppn: applies to -t tensorflow-mpi or -t pytorch"),
    (["-t", "standalone", "-wnpg", "2", "-wg", "1"], "-wnpg: applies to -t tensorflow-ps"),
    (["-t", "tensorflow-mpi", "-wnpg", "2"], "-wnpg: applies to"),
    (["-t", "tensorflow-worker", "-wn", "3", "-wnpg", "2", "-wg", "1"], "-wnpg 2: -wn 3 is not"),
    (["-t", "tensorflow-worker", "-wn", "2", "-wnpg", "2"], "needs -wg 1 or more"),
    (["-t", "pytorch", "-ppn", "0"], "-ppn: must be at least 1"),
])
def test_ppn_and_wnpg_misuse_is_one_line(el_submit, args, flag):
    out = el_submit(*args, "--local", "-c", "true")
    assert out.returncode == 2, out.stderr
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and flag in lines[0], lines


def test_yarn_services_per_container(tmp_path):
    (tmp_path / "job.json").write_text("{}")
    staged = appspec.Staged(str(tmp_path / "job.json"))
    s = spec(tmp_path, kind="tensorflow-mpi", workers="2", procs_per_node="2",
             worker_gpus="2", worker_memory="4g")
    app = appspec.application_dict(s, staged, appspec.ClusterDefaults())
    assert set(app["services"]) == {"workers-0", "workers-1"}
    svc = app["services"]["workers-1"]
    assert svc["resources"] == {"memory": 4096, "vcores": 1, "gpus": 2}  # per container
    assert "--tasks worker:2,worker:3 --gpus auto --kv skein:" in svc["script"]
    one = appspec.application_dict(spec(tmp_path, kind="pytorch", workers="2"), staged,
                                   appspec.ClusterDefaults())
    assert set(one["services"]) == {"worker-0", "worker-1"}


# ---------------------------------------------------------------- real local jobs

THREADS = ("OMP_NUM_THREADS", "TF_NUM_INTRAOP_THREADS", "TF_NUM_INTEROP_THREADS")
SEEN_VARS = ("TFYARN_TASK_TYPE", "TFYARN_TASK_INDEX", "CUDA_VISIBLE_DEVICES",
             "TF_FORCE_GPU_ALLOW_GROWTH", "TFYARN_GPU_MEMORY_FRACTION", "RANK", "LOCAL_RANK",
             "WORLD_SIZE", "HOROVOD_RANK", "HOROVOD_GLOO_RENDEZVOUS_PORT", "TF_CONFIG",
             *THREADS)
SEE = ("import json, os; print('SEE ' + json.dumps({k: os.environ.get(k) for k in "
       f"{SEEN_VARS!r}}}))")


def seen(stderr: str) -> dict[str, dict]:
    out = {}
    for line in stderr.splitlines():
        if "SEE " in line:
            d = json.loads(line.split("SEE ", 1)[1])
            out[f"{d['TFYARN_TASK_TYPE']}:{d['TFYARN_TASK_INDEX']}"] = d
    return out


def test_wnpg_pairs_share_a_gpu_each_capped_at_about_half(el_submit):
    out = el_submit("-t", "tensorflow-ps", "-wn", "4", "-wnpg", "2", "-wg", "1", "-x", "False",
                    "--local", "-c", py(SEE), env={"TFYARN_GPU_COUNT": "2"})
    assert out.returncode == 0, out.stderr
    s = seen(out.stderr)
    assert s["ps:0"]["CUDA_VISIBLE_DEVICES"] == ""  # ps never get GPUs
    assert s["chief:0"]["CUDA_VISIBLE_DEVICES"] == s["worker:0"]["CUDA_VISIBLE_DEVICES"] == "0"
    assert s["worker:1"]["CUDA_VISIBLE_DEVICES"] == s["worker:2"]["CUDA_VISIBLE_DEVICES"] == "1"
    assert all(s[t]["TFYARN_GPU_MEMORY_FRACTION"] == "0.45"
               for t in ("chief:0", "worker:0", "worker:1", "worker:2"))
    assert s["ps:0"]["TFYARN_GPU_MEMORY_FRACTION"] is None
    cluster = json.loads(s["worker:2"]["TF_CONFIG"])["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == {"ps": 1, "chief": 1, "worker": 3}
    assert "[worker:0] SEE" in out.stderr  # each process's lines carry its task


def test_ppn_gives_each_local_rank_its_own_device(el_submit):
    out = el_submit("-t", "pytorch", "-wn", "2", "-ppn", "2", "-wg", "2", "--local",
                    "-c", py(SEE), env={"TFYARN_GPU_COUNT": "4"})
    assert out.returncode == 0, out.stderr
    s = seen(out.stderr)
    assert [s[f"worker:{i}"]["CUDA_VISIBLE_DEVICES"] for i in range(4)] == ["0", "1", "2", "3"]
    assert [s[f"worker:{i}"]["RANK"] for i in range(4)] == ["0", "1", "2", "3"]
    assert {d["WORLD_SIZE"] for d in s.values()} == {"4"}
    assert all(d["TF_CONFIG"] is None and d["HOROVOD_RANK"] is None for d in s.values())


def test_more_gpus_than_the_machine_has_runs_on_cpu_with_a_warning(el_submit):
    out = el_submit("-t", "tensorflow-worker", "-wn", "2", "-wg", "1", "--local", "-c", py(SEE),
                    env={"TFYARN_GPU_COUNT": "1"})
    assert out.returncode == 0, out.stderr
    assert "asks for 2 GPUs (-wg per container) and this machine has 1" in out.stderr
    assert {d["CUDA_VISIBLE_DEVICES"] for d in seen(out.stderr).values()} == {""}


def test_tensorflow_mpi_ranks_get_horovod_env(el_submit):
    out = el_submit("-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", "--local", "-c", py(SEE))
    assert out.returncode == 0, out.stderr
    s = seen(out.stderr)
    assert [s[f"worker:{i}"]["HOROVOD_RANK"] for i in range(4)] == ["0", "1", "2", "3"]
    assert len({d["HOROVOD_GLOO_RENDEZVOUS_PORT"] for d in s.values()}) == 1


def test_every_tasks_thread_pools_are_its_share_of_its_containers_vcores(el_submit):
    out = el_submit("-t", "tensorflow-ps", "-pn", "1", "-pc", "1", "-wn", "2", "-wc", "3",
                    "--local", "-c", py(SEE))
    assert out.returncode == 0, out.stderr
    s = seen(out.stderr)
    assert [s["ps:0"][k] for k in THREADS] == ["1", "1", "2"]  # 1 inter-op thread may deadlock
    assert [s["chief:0"][k] for k in THREADS] == [s["worker:0"][k] for k in THREADS] == ["3"] * 3
    out = el_submit("-t", "pytorch", "-wn", "1", "-wc", "4", "-ppn", "2", "--local", "-c", py(SEE))
    assert out.returncode == 0, out.stderr
    assert {tuple(d[k] for k in THREADS) for d in seen(out.stderr).values()} == {("2", "2", "2")}
    mine = el_submit("-t", "tensorflow-worker", "-wn", "1", "-wc", "3", "--local", "-c", py(SEE),
                     env={"TF_NUM_INTRAOP_THREADS": "7"})
    assert mine.returncode == 0, mine.stderr
    assert [seen(mine.stderr)["worker:0"][k] for k in THREADS] == [None, "7", None]


def test_a_failing_rank_fails_the_job_fast_naming_it(el_submit):

    cmd = 'if [ "$RANK" = 3 ]; then sleep 0.5; echo "rank three broke" >&2; exit 7; fi; ' \
          'setsid sleep 300 & sleep 300'
    # the other ranks sleep 300 s: the job ends (within el_submit's 120 s) only if the
    # failing rank's end stopped them
    out = el_submit("-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", "--local", "-c", cmd)
    assert out.returncode == 1
    assert "worker:3 (rank 3) exited with code 7" in out.stderr
    assert "rank three broke" in out.stderr
    assert job_processes(out.stdout.strip()) == []


@pytest.mark.tf
def test_pytorch_ddp_example(el_submit):
    example = REPO / "examples" / "pytorch" / "ddp.py"
    out = el_submit("-t", "pytorch", "-wn", "2", "-ppn", "2", "-f", str(example), "--local",
                    "-c", "python", "ddp.py", "--steps", "20", timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [x for x in out.stderr.splitlines() if "rank=" in x]
    assert sorted(x.split("] ", 1)[1] for x in lines if "allreduced" in x) == [
        f"rank={r} size=4 local_rank={r} allreduced=10" for r in range(4)]
    checksums = {x.rsplit("checksum=", 1)[1] for x in lines if "checksum=" in x}
    assert len(checksums) == 1  # DDP kept every rank's model identical
    assert job_processes(out.stdout.strip()) == []


def need_horovod() -> None:
    """Horovod comes from scripts/build-horovod (the README's test command builds it);
    CI sets TFYARN_REQUIRE_HOROVOD=1 so a missing build fails instead of skipping."""
    try:
        import horovod.tensorflow  # noqa: F401
        import horovod.torch  # noqa: F401
    except ImportError:
        if os.environ.get("TFYARN_REQUIRE_HOROVOD"):
            raise
        pytest.skip("Horovod is not installed: pip install \"$(scripts/build-horovod)\"")


def test_horovod_torch_allreduce(el_submit):
    need_horovod()
    code = ("import horovod.torch as hvd, torch; hvd.init(); "
            "t = hvd.allreduce(torch.tensor([float(hvd.rank() + 1)]), op=hvd.Sum); "
            "print(f'HVD rank={hvd.rank()} size={hvd.size()} local_rank={hvd.local_rank()} "
            "sum={t.item():g}')")
    out = el_submit("-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", "--local", "-c", py(code),
                    timeout=300)
    assert out.returncode == 0, out.stderr
    got = sorted(x.split("HVD ", 1)[1] for x in out.stderr.splitlines() if "HVD " in x)
    assert got == [f"rank={r} size=4 local_rank={r} sum=10" for r in range(4)]


@pytest.mark.tf
def test_horovod_tensorflow_example(el_submit):
    need_horovod()
    example = REPO / "examples" / "horovod" / "tf_horovod.py"
    out = el_submit("-t", "tensorflow-mpi", "-wn", "2", "-ppn", "2", "-f", str(example),
                    "--local", "-c", "python", "tf_horovod.py", "--steps", "20", timeout=300)
    assert out.returncode == 0, out.stderr
    lines = [x.split("] ", 1)[1] for x in out.stderr.splitlines() if "] rank=" in x]
    assert sorted(x for x in lines if "allreduced" in x) == [
        f"rank={r} size=4 local_rank={r} allreduced=10" for r in range(4)]
    finals = {x.split(" ", 1)[1] for x in lines if "checksum=" in x}
    assert len(finals) == 1  # the same averaged loss and weights on every rank
    assert job_processes(out.stdout.strip()) == []
