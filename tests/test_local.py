"""Local mode end to end: real driver, launchers and user processes; real process table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tarfile
import time

from conftest import job_processes, py

from tfyarn.core.errors import EXIT_TFYARN

DUMP = ("import json, os; print('DUMP ' + json.dumps({'tf': json.loads(os.environ['TF_CONFIG']), "
        "'type': os.environ['TFYARN_TASK_TYPE'], 'index': os.environ['TFYARN_TASK_INDEX'], "
        "'job': os.environ['TFYARN_JOB_ID']}))")


def dumps(stderr: str) -> list[dict]:
    lines = [line for line in stderr.splitlines() if "DUMP " in line]
    return [json.loads(line.split("DUMP ", 1)[1]) for line in lines]


def check_cluster(out, expected: dict[str, int]) -> None:
    assert out.returncode == 0, out.stderr
    job_id = out.stdout.strip()
    seen = dumps(out.stderr)
    assert len(seen) == sum(expected.values())
    cluster = seen[0]["tf"]["cluster"]
    assert {k: len(v) for k, v in cluster.items()} == expected
    addrs = [a for v in cluster.values() for a in v]
    assert len(set(addrs)) == len(addrs)  # every port distinct
    mine = set()
    for d in seen:
        assert d["tf"]["cluster"] == cluster and d["job"] == job_id
        assert (d["tf"]["task"]["type"], str(d["tf"]["task"]["index"])) == (d["type"], d["index"])
        mine.add((d["type"], d["index"]))
    assert len(mine) == len(seen)
    assert job_processes(job_id) == []


def test_tensorflow_ps_cluster(el_submit):
    out = el_submit("-t", "tensorflow-ps", "-pn", "2", "-wn", "3", "-x", "False", "--local",
                    "-c", py(DUMP))
    check_cluster(out, {"ps": 2, "chief": 1, "worker": 2})
    assert "-x False" in out.stderr  # the up-front note


def test_tensorflow_worker_cluster(el_submit):
    out = el_submit("-t", "tensorflow-worker", "-wn", "3", "--local", "-c", py(DUMP))
    check_cluster(out, {"worker": 3})


def test_standalone_cluster(el_submit):
    out = el_submit("-t", "standalone", "--local", "-c", py(DUMP))
    check_cluster(out, {"worker": 1})
    assert "[worker:0] DUMP" in out.stderr and out.stdout.strip().startswith("local_")


FAIL_WORKER_1 = (
    'if [ "$TFYARN_TASK_TYPE:$TFYARN_TASK_INDEX" = worker:1 ]; then sleep 1; '
    'echo "worker one is broken" >&2; exit 3; fi; trap "" TERM; sleep 300'
)


def test_failing_worker_fails_fast_and_leaves_nothing(el_submit):
    # the others ignore SIGTERM and sleep 300 s: the job ends (within el_submit's 120 s)
    # only because they were killed after the grace
    out = el_submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "3", "-x", "True", "--local",
                    "-c", FAIL_WORKER_1)
    assert out.returncode == 1, out.stderr
    error = out.stderr[out.stderr.index("Error: "):]
    assert "worker:1 exited with code 3" in error and "worker one is broken" in error
    assert "full log: less " in error
    assert job_processes(out.stdout.strip()) == []


def test_ctrl_c_stops_everything(tmp_path):
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                             "-wn", "3", "--local", "-c", "sleep 300"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_id = proc.stdout.readline().strip()
    deadline = time.monotonic() + 30
    while len([p for p in job_processes(job_id) if "sleep 300" in p and ": tfyarn-" not in p]) < 3:
        assert time.monotonic() < deadline, "tasks never started"
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=30)
    assert proc.returncode == 130, err
    assert "interrupted" in err
    assert job_processes(job_id) == []


def test_without_x_the_job_ends_when_every_task_exits(el_submit):
    out = el_submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "2", "--local", "-c", "true")
    assert out.returncode == 0, out.stderr
    assert "all 3 tasks exited with code 0" in out.stderr


def test_timeout_stops_a_hanging_job(el_submit):
    out = el_submit("-t", "tensorflow-ps", "-wn", "2", "--timeout", "2", "--local",
                    "-c", "sleep 120")
    assert out.returncode == 1 and "--timeout 2 s" in out.stderr
    assert job_processes(out.stdout.strip()) == []


def test_files_env_and_quoted_command(el_submit, tmp_path):
    src = tmp_path / "project"
    (src / "pkg" / "deep").mkdir(parents=True)
    (src / "pkg" / "deep" / "data.txt").write_text("hello")
    (src / "top.txt").write_text("top")
    (src / "__pycache__").mkdir()
    (src / "__pycache__" / "junk.pyc").write_text("x")
    (tmp_path / "extra.cfg").write_text("cfg")
    probe = ("import os; print('SEEN', sorted(os.listdir('.')), open('pkg/deep/data.txt').read(), "
             "os.environ['MY_VAR'], os.environ['PATH'].split(':')[0])")
    out = el_submit("-t", "standalone", "-f", "./,../extra.cfg", "--env", "MY_VAR=a b=c",
                    "--local", "-c", f"python -c \"{probe}\"", cwd=src)
    assert out.returncode == 0, out.stderr
    line = next(x for x in out.stderr.splitlines() if "SEEN" in x)
    assert "['extra.cfg', 'pkg', 'top.txt'] hello a b=c" in line
    assert line.endswith(os.path.dirname(sys.executable))  # -m local: our python first


def test_virtual_env_archive(el_submit, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    archive = tmp_path / "env.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for name in os.listdir(venv):
            tar.add(venv / name, arcname=name)
    out = el_submit("-t", "standalone", "-m", "virtual-env", "-m_arg", "env.tar.gz", "--local",
                    "-c", py("import sys; print('PREFIX', sys.prefix)"))
    assert out.returncode == 0, out.stderr
    prefix = next(x for x in out.stderr.splitlines() if "PREFIX" in x).split("PREFIX ")[1]
    assert prefix.endswith("/env") and str(el_submit.tmpdir) in prefix


def test_docker_mode_without_daemon_is_a_clear_error(el_submit):
    out = el_submit("-t", "standalone", "-m", "docker", "-m_arg", "python:3.11", "--local",
                    "-c", "true", env={"DOCKER_HOST": "unix:///nonexistent.sock"})
    assert out.returncode == EXIT_TFYARN  # tfyarn cannot run it here
    assert out.stderr.startswith("Error: -m docker needs a reachable docker daemon")
    assert list(el_submit.tmpdir.iterdir()) == []


def test_user_process_killed_by_signal_is_named(el_submit):
    out = el_submit("-t", "tensorflow-worker", "-wn", "2", "--local", "-c",
                    'if [ "$TFYARN_TASK_INDEX" = 1 ]; then kill -9 $$; fi; sleep 30')
    assert out.returncode == 1
    assert "worker:1 was killed by SIGKILL" in out.stderr


def test_broken_env_archive_leaves_nothing(el_submit, tmp_path):
    (tmp_path / "env.tar.gz").write_text("not a tarball")
    out = el_submit("-t", "standalone", "-m", "virtual-env", "-m_arg", "env.tar.gz", "--local",
                    "-c", "true")
    assert out.returncode == 2 and out.stdout == ""
    assert out.stderr.startswith("Error: -m_arg: cannot unpack")
    assert list(el_submit.tmpdir.iterdir()) == []


def test_one_launcher_serves_the_gangs_containers_each_with_its_dir_and_log(el_submit):
    """#46: locally one launcher process serves a group of the gang's containers; each
    container still has its own working dir, its own log file (its task's output and
    what tfyarn says of that task, nothing of the others) and its own [task] prefix."""
    cmd = 'echo "OUT $TFYARN_TASK_INDEX $PPID $PWD"; echo "ERR $TFYARN_TASK_INDEX" >&2'
    out = el_submit("-t", "tensorflow-worker", "-wn", "3", "--local", "-c", cmd,
                    env={"TFYARN_KEEP_JOB_DIR": "1"})
    assert out.returncode == 0, out.stderr
    job = out.stdout.strip()
    root = next(el_submit.tmpdir.glob(f"tfyarn-*/{job}"))
    parents = set()
    for i in range(3):
        line = next(x for x in out.stderr.splitlines() if x.startswith(f"[worker:{i}] OUT"))
        _, _, index, parent, cwd = line.split(" ", 4)
        assert index == str(i) and cwd == str(root / "tasks" / f"worker-{i}"), line
        parents.add(parent)
        log = (root / "logs" / f"worker-{i}.log").read_text()
        assert f"OUT {i} " in log and f"ERR {i}\n" in log, log
        assert f"worker:{i}: registered at" in log and f"worker:{i}: exit code 0" in log, log
        others = [j for j in range(3) if j != i]
        assert not any(f"worker:{j}:" in log or f"OUT {j} " in log for j in others), log
    assert len(parents) == 1  # the same launcher process started all three


def test_launcher_groups_keep_to_their_tasks_and_open_files():
    from tfyarn.client.localprocs import hosting
    from tfyarn.core.jobspec import JobSpec, Resources, Role

    spec = JobSpec("t", "tensorflow-worker", (Role("worker", 10, Resources(1024, 1)),), "true")
    sizes = [len(g) for g in hosting(spec.containers(), 4, 1024)]
    assert sizes == [4, 4, 2]
    # 64 open files: half for the containers, 6 each (two for its log, four a task)
    assert [len(g) for g in hosting(spec.containers(), 64, 64)] == [5, 5]
    assert [len(g) for g in hosting(spec.containers(), 1, 1 << 20)] == [1] * 10
    big = JobSpec("t", "tensorflow-worker", (Role("worker", 8, Resources(1024, 1)),), "true",
                  tasks_per_container=4)
    assert [len(g) for g in hosting(big.containers(), 2, 1024)] == [1, 1]  # never empty
