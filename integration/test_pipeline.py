"""pl_submit on the sandbox's YARN: Spark on YARN writes what pre_train returns while
the training job (MultiWorkerMirroredStrategy workers in YARN containers) reads it; a
worker killed mid-epoch; the failures of either side ending the other."""

from __future__ import annotations

import gzip
import os
import re
import signal
import subprocess
import sys
import uuid

import pytest
from conftest import APP_ID, REPO, aggregated_logs, apps_by_name, final_state, hdfs_exists
from programs import TRAIN_FAILS  # tests/: the program the local test runs too
from streamlines import LinesRead

pytest.importorskip("pyspark")

SPARK = ["--spark-conf", "spark.ui.enabled=false", "--spark-conf",
         "spark.executor.instances=1", "--spark-conf", "spark.executor.memory=1g"]
COPIES = 30


def pl_submit(cwd, *args: str, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "from tfyarn.cli.main import "
                             "pl_submit_main; pl_submit_main()", *args, "--python",
                             sys.executable, *SPARK], cwd=cwd, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env={**os.environ, **(env or {})})


def said(err: str, pattern: str) -> list[str]:
    return re.findall(pattern, err.replace("\r", "\n"))


def adult_fnlwgt() -> int:
    path = REPO / "examples" / "census" / "adult.data.gz"
    with gzip.open(path, "rt") as f:
        return sum(int(r.split(",")[2]) for r in f if r.count(",") == 14)


def one_program_census(apps, fault, restarted: str) -> None:
    """The one-program census (pl_submit: Spark writes while two MWMS workers read), with
    `fault(app_id)` once both workers saved their first checkpoint; the training job restarts
    (`restarted`: el_submit's words) and resumes; every row is trained on once across
    the workers, none twice, none lost; the model is exported; nothing is left."""
    from conftest import node_processes, wait_until

    ckpt = f"hdfs:///tmp/tfyarn-program-{uuid.uuid4().hex[:8]}"
    program = REPO / "examples" / "census_spark"
    proc = pl_submit(program, "census_program.py", "-t", "tensorflow-worker", "-wn", "2",
                     "-wm", "2048", "-f", "../census/census_single.py,prepare.py",
                     "--env", "CENSUS_EPOCHS=1", "--env", "CENSUS_BATCH=1024",
                     "--max-restarts", "1", "--checkpoint-dir",
                     ckpt, env={"CENSUS_COPIES": str(COPIES), "CENSUS_SHARDS": "24"})
    app_id = proc.stdout.readline().strip()
    assert APP_ID.match(app_id), proc.communicate(timeout=60)[1][-5000:]
    apps.append(app_id)
    stderr = LinesRead(proc.stderr)  # pl_submit's, as it comes
    # both workers' first checkpoint: the job resumes from the newest step every worker
    # saved, and worker:0 may still be writing its own as worker:1's appears (a fault
    # then finds nothing to resume from and the job rightly starts over). And Spark's write
    # done, its executors given back, as it usually is by then: on a loaded CI machine it
    # once ended after the fault, Spark lost a container of its own with the killed node
    # (`killExecutors`: connection reset), and kept its executors (CI, 2026-11-30)
    wait_until(lambda: all(hdfs_exists(f"{ckpt}/worker-{i}/checkpoint") for i in (0, 1))
               and stderr.said("data: written"),
               600, "both workers' first checkpoint, and Spark's write done")
    fault(app_id)
    proc.wait(timeout=900)
    err = stderr.text()
    proc.stdout.close()
    assert proc.returncode == 0, err[-5000:]
    assert re.search(restarted, err), err[-5000:]
    logs = aggregated_logs(app_id)
    assert len(re.findall(r"resumed from step \d+", logs)) == 2, logs[-5000:]
    trained = [(int(a), int(b)) for a, b in
               re.findall(r"trained on (\d+) rows \(fnlwgt sum (\d+)\)", logs)]
    assert len(trained) == 2, logs[-5000:]
    # every row once across the workers, the killed one's included: none twice, none lost
    assert sum(a for a, _ in trained) == COPIES * 32561
    assert sum(b for _, b in trained) == COPIES * adult_fnlwgt()
    accuracies = [float(x) for x in re.findall(r"eval_accuracy=([0-9.]+)", logs)]
    assert len(accuracies) == 2 and min(accuracies) >= 0.84, accuracies
    # the training job was submitted at the first shard, before Spark had written its
    # last (pl_submit says both, in order). Its first step may come after the seal: the C
    # writer writes these 977,000 rows faster than YARN starts two TF workers, and the
    # local test shows, with gates, that the readers follow a manifest still growing
    committed = said(err, r"data train: (\d+) shards committed at ")
    lines = err.replace("\r", "\n")
    assert committed and int(committed[0]) < 24, committed
    assert lines.index("training job ") < lines.index("data train: sealed: "), err[-5000:]
    # written: Spark's idle executors went back to YARN (after a lost node, the room the
    # restarting gang needs), its driver kept for the removal below
    assert re.search(r"data: written; Spark's \d+ executor\(s\) given back to YARN", err), \
        err[-5000:]
    assert "model exported to hdfs://" in logs
    root = said(err, r"data: pre_train's train, test go to (\S+)")[0]
    assert not hdfs_exists(root)  # the run's datasets are removed
    assert final_state(app_id).endswith("/SUCCEEDED")
    wait_until(lambda: not node_processes(app_id), 60, "no process of the app")
    subprocess.run(["hdfs", "dfs", "-rm", "-r", "-f", ckpt], capture_output=True, timeout=120)


@pytest.mark.concurrent  # its own app's worker; the next kills a node
def test_one_program_census_trains_while_spark_writes_and_a_killed_worker_loses_no_row(apps):
    from conftest import launcher_pid

    one_program_census(apps, lambda app_id: os.kill(launcher_pid(app_id, "worker:1"),
                                                    signal.SIGKILL),
                       r"attempt 2/2: restarting after worker:1 was ")


def test_one_program_census_resumes_after_its_application_masters_node_dies(apps):
    """The AM's node killed as a machine dies (the 3-node sandbox): a second AM attempt
    resumes the training job from the workers' checkpoints, every row still once."""
    import test_cluster

    if len(test_cluster.running_nodes()) < 3 or len(test_cluster.sandbox_nodes()) < 3:
        pytest.skip("needs the sandbox with 3 nodes: SANDBOX_NODES=3 scripts/yarn-sandbox start")
    try:
        one_program_census(apps, lambda app_id: test_cluster.kill_node(
            test_cluster.am_host(app_id)),
            r"attempt 2/2: restarting after the ApplicationMaster was lost")
    finally:
        test_cluster.restore_cluster()


FAILS_IN_PRE_TRAIN = """
from tfyarn.data.program import Program
class Missing(Program):
    def pre_train(self, spark):
        return spark.read.csv("hdfs:///tmp/tfyarn-no-such-input/adult.csv")
    def train(self, ctx):
        pass
"""

@pytest.mark.concurrent  # its own applications, by name
def test_spark_and_training_failures_end_each_other_on_yarn(tmp_path, apps):
    """pre_train's Spark failure: its reason, and no training application at all; a
    training that fails while Spark writes: the Spark application is stopped. Its own
    applications only, by name (other tests' run beside it)."""
    training = f"fails-{uuid.uuid4().hex[:8]}"
    (tmp_path / "missing.py").write_text(FAILS_IN_PRE_TRAIN)
    proc = pl_submit(tmp_path, "missing.py", "-t", "standalone", "-a", training)
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 1 and not out, err[-3000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("Error: pre_train failed: ") and "tfyarn-no-such-input" in last
    named = apps_by_name()
    assert named.get("tfyarn-pre_train-Missing") and training not in named

    before = named.get("tfyarn-pre_train-Crash", set())
    (tmp_path / "crash.py").write_text(TRAIN_FAILS)
    proc = pl_submit(tmp_path, "crash.py", "-t", "standalone", "-a", training)
    out, err = proc.communicate(timeout=600)
    apps.append(out.strip())
    assert proc.returncode == 1, err[-3000:]
    assert "training failed; stopping Spark" in err and "injected: training crashed" in err
    named = apps_by_name()
    assert named.get(training) == {out.strip()}
    spark_app = sorted(named.get("tfyarn-pre_train-Crash", set()) - before)[-1]
    assert final_state(spark_app).startswith("FINISHED"), final_state(spark_app)
