"""pl_submit / tfyarn.spark.fit, locally: Spark (local[*], real pyspark) writes what
pre_train returns while the training tasks (real processes) read it; the failures of
either end the other. The same on YARN: integration/test_pipeline.py."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("pyspark")

from programs import COUNT, NO_INPUT, NOT_A_FRAME, SPARK_FAILS, TRAIN_FAILS  # noqa: E402


def pl_submit(tmp_path: Path, source: str, *args: str, timeout: float = 300):
    program = tmp_path / "program.py"
    program.write_text(source)
    env = {**os.environ, "TEST_GATE": str(tmp_path / "gate"), "TMPDIR": str(tmp_path)}
    env.pop("PYSPARK_PYTHON", None)
    return subprocess.run([sys.executable, "-c", "from tfyarn.cli.main import pl_submit_main; "
                           "pl_submit_main()", str(program), "--local", "--spark-conf",
                           "spark.ui.enabled=false", *args], cwd=tmp_path, capture_output=True,
                          text=True, timeout=timeout, env=env)


def no_process_left(tmp_path: Path) -> None:
    """No process of the run (pl_submit's Spark JVM and python workers, the tasks) lives:
    each carries the run's TEST_GATE in its environment."""
    from proctable import carrying

    deadline = time.monotonic() + 30
    while alive := carrying(f"TEST_GATE={tmp_path / 'gate'}"):
        assert time.monotonic() < deadline, alive
        time.sleep(0.2)  # polling the process table while the last ones exit


def leftovers(tmp_path: Path, what: str = "tfyarn-data-") -> list[str]:
    """The run's datasets left in its temp dir (a failed job's own dir, with its logs,
    is kept as el_submit keeps it)."""
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(what))


def test_one_program_trains_two_workers_on_what_pre_train_returned(tmp_path):
    out = pl_submit(tmp_path, COUNT, "-t", "tensorflow-worker", "-wn", "2")
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.startswith("local_") and len(out.stdout.split()) == 1  # the job id
    reads = [line.split("] ", 1)[1] for line in out.stderr.splitlines() if " read " in line]
    counts = sorted(int(r.split()[2]) for r in reads)
    assert counts == [500, 500] and sum(int(r.split()[4]) for r in reads) == sum(range(1000))
    assert all(r.endswith("extra 1") for r in reads)  # Program.extra, through the manifest
    assert "data train: sealed: 1000 rows in 4 shards" in out.stderr
    assert leftovers(tmp_path, "tfyarn-") == []  # the datasets and the job dir are gone


def test_a_spark_failure_in_pre_train_submits_nothing(tmp_path):
    out = pl_submit(tmp_path, NO_INPUT, "-t", "standalone")
    assert out.returncode == 1 and not out.stdout, out.stderr[-3000:]
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: pre_train failed: ") and "no training job was submitted" \
        in last and "tfyarn-test-input.csv" in last, last
    assert "Traceback" not in out.stderr and leftovers(tmp_path) == []
    no_process_left(tmp_path)


def test_pre_train_returning_no_dataframe_is_refused_in_one_line(tmp_path):
    out = pl_submit(tmp_path, NOT_A_FRAME, "-t", "standalone")
    assert out.returncode == 2 and not out.stdout, out.stderr[-3000:]
    assert out.stderr.strip().splitlines()[-1] == ("Error: pre_train returned {'train': "
                                                   "'int'} where DataFrames go: return a "
                                                   "Spark DataFrame, or a dict of them by name")
    assert leftovers(tmp_path) == []


def test_a_spark_failure_after_training_started_stops_the_training(tmp_path):
    out = pl_submit(tmp_path, SPARK_FAILS, "-t", "standalone")
    assert out.returncode == 1, out.stderr[-3000:]
    assert out.stdout.startswith("local_")  # training was submitted: the first shard came
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("Error: Spark failed writing pre_train's data: ") and \
        "ValueError: injected: partition 1 is malformed" in last and "was stopped" in last, \
        out.stderr[-3000:]
    assert leftovers(tmp_path) == []
    no_process_left(tmp_path)


def test_a_training_failure_stops_spark(tmp_path):
    """Spark would write forever; the training fails: pl_submit cancels Spark's job,
    stops its session and exits with the training's failure, leaving no process."""
    out = pl_submit(tmp_path, TRAIN_FAILS, "-t", "standalone", timeout=240)  # Spark: never
    assert out.returncode == 1, out.stderr[-3000:]
    assert "training failed; stopping Spark" in out.stderr
    assert "RuntimeError: injected: training crashed" in out.stderr
    assert leftovers(tmp_path) == []
    no_process_left(tmp_path)


@pytest.mark.parametrize("args, words", [
    (("--data", "/tmp/x"), "Error: data: a one-program job runs the program's train()"),
    (("--class", "Nope"), "Error: --class Nope: "),
    (("-wn", "zero"), "Error: -wn"),
])
def test_bad_input_is_one_line_and_starts_nothing(tmp_path, args, words):
    out = pl_submit(tmp_path, COUNT, *args, timeout=120)
    assert out.returncode == 2 and not out.stdout, out.stderr
    assert out.stderr.startswith(words) and len(out.stderr.strip().splitlines()) == 1, \
        out.stderr
    assert leftovers(tmp_path) == []


def test_a_tasks_context_names_the_datasets_by_their_last_path_part():
    from tfyarn.spark import Context, Program, fit  # the names users import

    assert callable(fit) and issubclass(Program, object)
    ctx = Context.from_environ({
        "TFYARN_DATA": "hdfs:///u/me/.tfyarn/data/r1/train,hdfs:///u/me/.tfyarn/data/r1/test",
        "TF_CONFIG": '{"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", '
                     '"index": 1}}', "TFYARN_MODEL_DIR": "hdfs:///m", "TFYARN_ATTEMPT": "2"})
    assert (ctx.task_type, ctx.task_index, ctx.attempt, ctx.model_dir) == \
        ("worker", 1, 2, "hdfs:///m")
    assert list(ctx.data) == ["train", "test"] and ctx.path() == ctx.data["train"]
    from tfyarn.core.errors import SpecError

    with pytest.raises(SpecError, match="no dataset 'eval': pre_train wrote train, test"):
        ctx.path("eval")
