#!/usr/bin/env python3
"""Benchmarks the user-facing latencies tfyarn promises; prints one JSON object.

- help_s: whole-process time of `el_submit --help` (target <= 0.15 s), skein_help_s:
  `skein --help`'s, interleaved, and help_over_skein_help (target <= 0.25); api_import_s:
  importing the Python API (`tfyarn.submit`, `run`, `attach`), and api_import_ratio, that
  over help_s (target <= 1.5);
- local_to_tf_config_s: `el_submit --local` with 4 no-op tasks, from launch until every
  task's process has TF_CONFIG (each task stamps the time it started);
- bare_spawn_s: the same 4 commands spawned directly, launch until all stamped;
- overhead_s: the difference (target <= 0.5 s);
- idle_cores_32_tasks: CPU cores used by tfyarn's own processes (driver, launchers,
  client) while 32 local tasks sleep, over a 10 s window (anchor: 0 for bare sleeps);
- restart_s: `el_submit --local --max-restarts 1` with 4 tasks, one of which kills itself
  with SIGKILL in attempt 0: from that kill until every task of the new gang has its
  TF_CONFIG; restart_over_launch_s: that minus local_to_tf_config_s (the process start
  both pay), i.e. what a restart adds (target <= 5 s);
- staging_20k_files_s: local launch of 4 tasks with `-f` of 20,000 small files, and
  staging_ratio: that over the same launch without -f (one copy, hard links per task);
- with --allreduce: allreduce bandwidth (scripts/allreduce_workload.py, 2 ranks, 16 MB
  sums) started through tfyarn (-t pytorch, -t tensorflow-mpi for Horovod) against the
  same ranks started by torchrun / horovodrun here, and their ratios (target >= 0.95);
- with --data [ROWS]: tfyarn.data's rows/s (pyspark local[2], census-shaped rows): the
  TFRecord and Parquet writes against Spark's own `df.write.parquet` of the same frame,
  and `tfyarn.data.dataset` reading TFRecord against a bare `TFRecordDataset` + parse of
  the same files (ratios: ours / theirs; writes one run each, the frame cached first;
  reads the median of three alternated passes);
- with --scale [N,N,...] (#19; default 4,64,256,512): launch_4_tasks_s, a whole
  `el_submit --local` of 4 no-op tasks, against popen_anchor_s, a Python script that
  Popens the same 4 commands (interpreter start on both sides), interleaved, and
  exit_after_verdict_s (the driver's final status until el_submit exits); then for each
  N one `el_submit -t tensorflow-worker -wn N --local` of 5 s tasks, the whole tree
  measured: wall_s, start_s (launch until every task runs), teardown_s (the last task's
  end until el_submit exits), cpu_s (every process, reaped: getrusage), tfyarn's own PSS,
  idle cores while the tasks sleep (scheduler nanoseconds, not ticks), and beside it
  (n{N}_popen) the floor: the same N commands Popen'ed by a bare Python script with the
  launchers' death signal, its wall_s, start_s and cpu_s (on 2 cores, 256 of these
  commands' own starts take about a second); n{N}_sleep_5 (the largest N, 3 interleaved
  pairs): the issue's own case, N tasks of plain `sleep 5`, wall and CPU of el_submit's
  whole tree against the bare Popen script's; and
  idle_cores_256_tasks over 10 s of a settled 256-task job; cpu_split_N (the largest
  N): that job's CPU by process (client, driver, fork server, launchers, the tasks'
  commands) beside the same commands Popen'ed alone and a fork server's N do-nothing
  children (the floor of a process per task);
- with --yarn (on the cluster HADOOP_CONF_DIR names, e.g. the sandbox): a trivial
  el_submit job cold and with a warm skein driver (`tfyarn skein-driver start`) against
  bare skein (PyPI's 0.8.2 as shipped, whose wheel scripts/build-skein keeps) submitting a
  trivial app: seconds to the application id and to the client's exit, and ratios;
  yarn_gang_restart_s: a worker's SIGKILL until every task of the new gang runs;
  yarn_64_tasks_running_s: a 64-rank job (4 containers x 16) from el_submit's start until
  every rank runs, and _warm_s the same with a warm driver, beside yarn_64_floor_s and
  _floor_warm_s, its floor on this YARN: the same el_submit (client, staging, AM,
  containers) with each container's script replaced by 16 shell commands and the driver's
  by a sleep, no tfyarn process in the application (yarn_64_warm_over_floor_s: what
  tfyarn's driver, launchers and cluster spec add); and `phases`, a table for each
  (printed on stderr too): every milestone's median offset and the phase that ends there,
  from the client's clock (the id printed, its exit), the ResourceManager's (accepted, AM
  launched, FINISHED) and the job's own (its kept page: the driver's start, each gang
  asked and ended, the last launcher started, registered, reading the cluster spec,
  starting the user code, the verdict); bare skein's beside where it has them;
- with --pipeline [yarn|local] (#31): the one-program census (examples/census_spark/
  census_program.py, CENSUS_COPIES=60: about two million rows; Spark with one executor
  core) run by pl_submit twice, pipelined (training submitted at Spark's first shard) and
  with --no-pipeline (write everything, then submit): seconds from pl_submit's start to
  the first training step, and pipelined_ratio (target <= 0.7), one run each;
- with --preemption (#45; the 3-node sandbox): tests/programs.py's STEPPER as a job
  filling the cluster with periodic checkpoints every 300 steps, preempted for an urgent
  job, once ignoring YARN's notice and once saving at it: steps lost (the last step
  before the kill, less the step the restart resumed from) and goodput, each; target:
  with the notice <= 1% of the steps between checkpoints;
- with --app APP and HADOOP_CONF_DIR set: status_s (`tfyarn status APP`) against
  yarn_cli_status_s (`yarn application -status APP`) measured side by side, and their
  ratio (target <= 0.5).
Medians over --repeat runs. Run: python scripts/bench.py [--repeat 5] [--app APP]
`--compare scripts/bench-baseline.json` prints each figure beside the saved baseline of
the same mode (stderr); `--save FILE` keeps the run as that mode's baseline: a change that
moves a figure updates it, so the next regression shows against it.
"""

from __future__ import annotations

import argparse
import contextlib
import glob
import json
import math
import os
import random
import re
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
STAMP = 'date +%s.%N > "$STAMPS/${TFYARN_TASK_TYPE:-bare}${TFYARN_TASK_INDEX:-$I}"'
TASKS = 4


def help_time() -> float:
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-m", "tfyarn.cli", "--help"], check=True,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def help_pairs(n: int = 7) -> dict[str, float]:
    """`el_submit --help` and `skein --help` (the same interpreter), interleaved n pairs:
    medians and their ratio (target <= 0.25)."""
    skein = [sys.executable, "-c", "import sys; from skein.cli import main; "
             "sys.argv = ['skein', '--help']; main()"]
    ours, theirs = [], []
    for _ in range(n):
        ours.append(help_time())
        t0 = time.perf_counter()
        subprocess.run(skein, check=True, stdout=subprocess.DEVNULL)
        theirs.append(time.perf_counter() - t0)
    mine, other = statistics.median(ours), statistics.median(theirs)
    return {"help_s": round(mine, 3), "skein_help_s": round(other, 3),
            "help_over_skein_help": round(mine / other, 2)}


def api_import_time() -> float:
    """Whole-process time of importing the Python API (`tfyarn.submit`, `run`, `attach`),
    as a notebook does; the anchor is `el_submit --help` in the same run."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "import tfyarn; tfyarn.submit; tfyarn.run; "
                    "tfyarn.attach"], check=True)
    return time.perf_counter() - t0


def last_stamp(stamps: str, start: float) -> float:
    values = []
    for name in os.listdir(stamps):
        with open(os.path.join(stamps, name)) as f:
            values.append(float(f.read()))
    assert len(values) == TASKS, f"expected {TASKS} stamps, got {len(values)}"
    return max(values) - start


def local_time(stamps: str) -> float:
    env = {**os.environ, "STAMPS": stamps}
    start = time.time()
    subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                    str(TASKS), "--local", "-c", STAMP], env=env, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return last_stamp(stamps, start)


RESTART = ('if [ "$TFYARN_ATTEMPT" = 0 ]; then if [ "$TFYARN_TASK_INDEX" = 1 ]; then '
           'date +%s.%N > "$STAMPS/failed"; kill -9 $$; fi; sleep 60; fi; ' + STAMP)


def restart_time(stamps: str) -> float:
    env = {**os.environ, "STAMPS": stamps}
    subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                    str(TASKS), "--max-restarts", "1", "--local", "-c", RESTART], env=env,
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    with open(os.path.join(stamps, "failed")) as f:
        failed = float(f.read())
    os.remove(os.path.join(stamps, "failed"))
    return last_stamp(stamps, failed)


def bare_time(stamps: str) -> float:
    start = time.time()
    procs = [subprocess.Popen(["/bin/sh", "-c", STAMP], env={**os.environ, "STAMPS": stamps,
                                                              "I": str(i)})
             for i in range(TASKS)]
    for p in procs:
        p.wait()
    return last_stamp(stamps, start)


def idle_cores(tasks: int = 32, window: float = 10.0, settle: float = 8.0) -> float:
    """Cores used by tfyarn's own processes (client, driver, launchers) while `tasks`
    local tasks sleep, over `window` seconds once `settle` seconds passed."""
    with tempfile.TemporaryDirectory() as tmp:
        proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                                 "-wn", str(tasks), "--local", "-c", "sleep 300"],
                                env={**os.environ, "TMPDIR": tmp}, stdout=subprocess.PIPE,
                                stderr=subprocess.DEVNULL, text=True)
        job = proc.stdout.readline().strip()
        time.sleep(settle)  # every task started and idle
        pids = _tfyarn_pids(job, proc.pid)
        before, t0 = _cpu_of(pids), time.monotonic()
        time.sleep(window)
        used = _cpu_of(pids) - before
        took = time.monotonic() - t0
        proc.send_signal(2)
        proc.wait()
    return used / took


def staging_times(files: int = 20_000) -> tuple[float, float]:
    with tempfile.TemporaryDirectory() as tmp:
        src = os.path.join(tmp, "proj")
        for i in range(files):
            d = os.path.join(src, f"d{i // 1000}")
            os.makedirs(d, exist_ok=True)
            with open(os.path.join(d, f"f{i}.txt"), "w") as f:
                f.write("x" * 64)
        env = {**os.environ, "TMPDIR": tmp}
        base = [sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn", "4",
                "--local"]
        t0 = time.perf_counter()
        subprocess.run([*base, "-f", "./", "-c", "true"], cwd=src, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with_files = time.perf_counter() - t0
        t0 = time.perf_counter()
        subprocess.run([*base, "-c", "true"], cwd=src, env=env, check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        return with_files, time.perf_counter() - t0


def status_times(app: str, repeat: int) -> tuple[float, float]:
    """Side by side, alternating, so both see the same cluster load."""
    ours, theirs = [], []
    for _ in range(repeat):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "tfyarn", "status", app], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        ours.append(time.perf_counter() - t0)
        t0 = time.perf_counter()
        subprocess.run(["yarn", "application", "-status", app], check=True,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        theirs.append(time.perf_counter() - t0)
    return statistics.median(ours), statistics.median(theirs)


WORKLOAD = os.path.join(os.path.dirname(os.path.abspath(__file__)), "allreduce_workload.py")


def _gbps(text: str) -> float:
    return float(next(line.rsplit(" ", 1)[1] for line in text.splitlines()
                      if "ALLREDUCE_GBPS" in line))


def allreduce_gbps(launcher: str, mode: str) -> float:
    """Bandwidth of the workload with 2 ranks, started by tfyarn or by the anchor."""
    bindir = os.path.dirname(sys.executable)
    if launcher == "tfyarn":
        app = "pytorch" if mode == "torch" else "tensorflow-mpi"
        argv = [sys.executable, "-m", "tfyarn.cli", "-t", app, "-wn", "1", "-ppn", "2",
                "--local", "-c", sys.executable, WORKLOAD, mode]
    elif mode == "torch":
        argv = [os.path.join(bindir, "torchrun"), "--standalone", "--nproc_per_node", "2",
                WORKLOAD, mode]
    else:
        argv = [os.path.join(bindir, "horovodrun"), "--gloo", "-np", "2", "-H", "localhost:2",
                sys.executable, WORKLOAD, mode]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {out.returncode}:\n{out.stderr[-3000:]}")
    return _gbps(out.stdout + out.stderr)


def allreduce_ratios(repeat: int) -> dict[str, float]:
    """Alternating runs, so both launchers see the same machine state."""
    out = {}
    for mode, anchor in (("torch", "torchrun"), ("horovod", "horovodrun")):
        ours, theirs = [], []
        for _ in range(repeat):
            ours.append(allreduce_gbps("tfyarn", mode))
            theirs.append(allreduce_gbps(anchor, mode))
        out[f"{mode}_tfyarn_gbps"] = round(statistics.median(ours), 3)
        out[f"{mode}_{anchor}_gbps"] = round(statistics.median(theirs), 3)
        out[f"{mode}_ratio"] = round(statistics.median(ours) / statistics.median(theirs), 3)
    return out


def data_rates(rows: int) -> dict[str, float]:
    """Write and read throughput of tfyarn.data against the plain baselines."""
    import shutil

    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    from pyspark.sql import SparkSession
    from pyspark.sql import functions as F

    from tfyarn.data import read
    from tfyarn.data import spark as tds

    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(rows).select(
        *[((F.col("id") * (i + 7)) % 1000).alias(f"n{i}") for i in range(6)],
        *[F.concat(F.lit(f"v{i}-"), (F.col("id") % 40).cast("string")).alias(f"s{i}")
          for i in range(8)], (F.col("id") % 100 / 7).alias("x")).repartition(2).cache()
    df.count()
    out, tmp = {}, tempfile.mkdtemp(prefix="tfyarn-bench-data-")
    try:
        writes = (("spark_parquet", lambda p: df.write.parquet(p)),
                  ("tfyarn_parquet", lambda p: tds.write(df, p, format="parquet")),
                  ("tfyarn_tfrecord", lambda p: tds.write(df, p)))
        best: dict[str, float] = {}
        for rep in range(5):  # interleaved, best of 5: the first write also warms the JVM
            for name, fn in writes:
                path = os.path.join(tmp, f"{name}{rep}")
                t0 = time.monotonic()
                fn(path)
                best[name] = min(best.get(name, math.inf), time.monotonic() - t0)
                if rep < 4:  # the last ones are read below
                    shutil.rmtree(path, ignore_errors=True)
        for name, seconds in best.items():
            out[f"write_{name}_rows_s"] = round(rows / seconds)
        out["write_tfrecord_ratio"] = round(out["write_tfyarn_tfrecord_rows_s"]
                                            / out["write_spark_parquet_rows_s"], 2)
        out["write_parquet_ratio"] = round(out["write_tfyarn_parquet_rows_s"]
                                           / out["write_spark_parquet_rows_s"], 2)
        out.update(_read_rates(read, os.path.join(tmp, "tfyarn_tfrecord4"), rows))
        out.update(_batch_rates(read, os.path.join(tmp, "tfyarn_parquet4"),
                                os.path.join(tmp, "tfyarn_tfrecord4"), rows,
                                out["read_bare_tfrecord_rows_s"]))
    finally:
        spark.stop()
        shutil.rmtree(tmp, ignore_errors=True)
    return out


def _read_rates(read, path: str, rows: int) -> dict[str, float]:
    import tensorflow as tf

    def drain(ds) -> float:
        t0 = time.monotonic()
        n = sum(int(tf.shape(b["n0"])[0]) for b in ds)
        assert n == rows, n
        return rows / (time.monotonic() - t0)

    m = read.manifest(path)
    spec = {c.name: tf.io.FixedLenFeature([], {"int64": tf.int64, "float": tf.float32,
                                                "bytes": tf.string}[c.kind]) for c in m.columns}
    files = [f"{path}/{s.file}" for s in m.shards]
    bares, ours_runs = [], []
    for _ in range(3):  # alternated, medians: one pass of each swings by half on 2 cores
        bares.append(drain(tf.data.TFRecordDataset(files).batch(1024).map(
            lambda b: tf.io.parse_example(b, spec))))
        ours_runs.append(drain(read.dataset(path, 1024)))
    bare, ours = statistics.median(bares), statistics.median(ours_runs)
    t0 = time.monotonic()
    n = sum(1 for _ in read.rows(path))
    plain = n / (time.monotonic() - t0)
    return {"read_bare_tfrecord_rows_s": round(bare), "read_tfyarn_dataset_rows_s": round(ours),
            "read_ratio": round(ours / bare, 2), "read_tfyarn_rows_rows_s": round(plain)}


def _batch_rates(read, path: str, tfrecord: str, rows: int,
                 tf_data_rows_s: float) -> dict[str, float]:
    """tfyarn.data.batches() of the Parquet dataset (pyarrow, no TensorFlow) and of the
    TFRecord one (tfyarn's C decoder), and the Parquet one's tf.data form
    (checkpointable), against the bare tf.data TFRecord read of the same rows (target:
    batches >= 0.5x)."""
    import tensorflow as tf

    def rate(sizes) -> float:  # sizes: each batch's row count, as it is read
        t0 = time.monotonic()
        n = sum(sizes)
        assert n == rows, n
        return rows / (time.monotonic() - t0)

    ours = statistics.median(rate(len(b["n0"]) for b in read.batches(path, 1024))
                             for _ in range(3))
    ours_tfrecord = statistics.median(rate(len(b["n0"]) for b in read.batches(tfrecord, 1024))
                                      for _ in range(3))
    tf_parquet = statistics.median(rate(int(tf.shape(b["n0"])[0]) for b in
                                        read.dataset(path, 1024)) for _ in range(3))
    return {"read_tfyarn_batches_parquet_rows_s": round(ours),
            "batches_over_tf_data": round(ours / tf_data_rows_s, 2),
            "read_tfyarn_batches_tfrecord_rows_s": round(ours_tfrecord),
            "batches_tfrecord_over_tf_data": round(ours_tfrecord / tf_data_rows_s, 2),
            "read_tfyarn_dataset_parquet_rows_s": round(tf_parquet),
            "target_batches_over_tf_data": 0.5}


# ---------------------------------------------------------------- scale (#19)

SCALE_CMD = ('date +%s.%N > "$STAMPS/s$TFYARN_TASK_INDEX"; sleep 5; '
             'date +%s.%N > "$STAMPS/e$TFYARN_TASK_INDEX"')


def _stamps(stamps: str, kind: str) -> list[float]:
    out = []
    for name in os.listdir(stamps):
        if name.startswith(kind):
            with open(os.path.join(stamps, name)) as f:
                text = f.read().strip()
            if text:
                out.append(float(text))
    return out


def _tfyarn_pids(job_id: str, client: int) -> list[int]:
    """The client and every process below it whose command line is tfyarn's (what it
    forks, the driver, fork server and launchers, shows el_submit's), not the tasks."""
    pids, todo = [client], [client]
    while todo:
        pid = todo.pop()
        for kid in _kids(pid):
            todo.append(kid)
            try:
                with open(f"/proc/{kid}/cmdline", "rb") as f:
                    if b"tfyarn" in f.read():
                        pids.append(kid)
            except OSError:
                continue
    return pids


def _kids(pid: int) -> list[int]:
    out = []
    try:
        for tid in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out.extend(int(k) for k in f.read().split())
    except OSError:
        pass
    return out


def _cpu_of(pids: list[int]) -> float:
    """CPU seconds of `pids` (all their threads) from the scheduler's own nanosecond
    counts: /proc's tick-sampled utime/stime charge a whole tick to whatever runs when it
    fires, too coarse for hundreds of nearly idle processes."""
    total = 0
    for pid in pids:
        try:
            for tid in os.listdir(f"/proc/{pid}/task"):
                with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                    total += int(f.read().split()[0])
        except (OSError, ValueError):
            continue
    return total / 1e9


def _pss_mib(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/smaps_rollup") as f:
                total += next(int(line.split()[1]) for line in f if line.startswith("Pss:"))
        except (OSError, StopIteration):
            continue
    return total / 1024


def scale_run(n: int) -> dict[str, float]:
    """One `el_submit -t tensorflow-worker -wn N --local` of 5 s tasks, the whole tree
    measured: wall, start -> every task running, last task end -> el_submit exit, CPU of
    everything (getrusage of reaped children), tfyarn's own PSS and idle cores while the
    tasks sleep (a 2.5 s window once all run)."""
    with tempfile.TemporaryDirectory() as tmp:
        stamps = os.path.join(tmp, "stamps")
        os.mkdir(stamps)
        env = {**os.environ, "STAMPS": stamps, "TMPDIR": tmp}
        before = _children_cpu()
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                                 "-wn", str(n), "--local", "-c", SCALE_CMD], env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        job_id = proc.stdout.readline().strip()
        # names only while waiting: reading 256 stamps every 50 ms took CPU from the job
        while sum(f.startswith("s") for f in os.listdir(stamps)) < n and proc.poll() is None:
            time.sleep(0.05)
        time.sleep(0.3)
        pids = _tfyarn_pids(job_id, proc.pid)
        pss = _pss_mib(pids)
        window = min(2.5, min(_stamps(stamps, "s")) + 5 - 0.3 - time.time())  # all still run
        idle = None
        if window >= 0.5:
            cpu0, w0 = _cpu_of(pids), time.monotonic()
            time.sleep(window)
            idle = (_cpu_of(pids) - cpu0) / (time.monotonic() - w0)
        rc = proc.wait()
        end = time.time()
        cpu = _children_cpu() - before
        ends = _stamps(stamps, "e")
        assert rc == 0 and len(ends) == n, (rc, len(ends))
        return {"wall_s": end - t0, "start_s": max(_stamps(stamps, "s")) - t0,
                "teardown_s": end - max(ends), "cpu_s": cpu, "cpu_per_task_ms": 1000 * cpu / n,
                "pss_mib": pss, "pss_per_task_mib": pss / n, "idle_cores": idle}


def popen_run(n: int) -> dict[str, float]:
    """The floor of `scale_run`: the same n commands Popen'ed by a bare Python script
    (TASK_ANCHOR, the launchers' death signal too), timed the same way."""
    with tempfile.TemporaryDirectory() as stamps:
        before, t0 = _children_cpu(), time.time()
        subprocess.run([sys.executable, "-c", TASK_ANCHOR, SCALE_CMD, str(n)], check=True,
                       env={**os.environ, "STAMPS": stamps}, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        end = time.time()
        return {"wall_s": end - t0, "start_s": max(_stamps(stamps, "s")) - t0,
                "cpu_s": _children_cpu() - before}


def sleep_pair(n: int) -> dict[str, float]:
    """The issue's own case (#46): n tasks of `sleep 5` and nothing else (no stamps, so no
    start or teardown split), el_submit --local against the bare Popen script
    (TASK_ANCHOR): wall and CPU of each whole tree."""
    out = {}
    for name, argv in (("tfyarn", [sys.executable, "-m", "tfyarn.cli", "-t",
                                   "tensorflow-worker", "-wn", str(n), "--local", "-c",
                                   "sleep 5"]),
                       ("popen", [sys.executable, "-c", TASK_ANCHOR, "sleep 5", str(n)])):
        with tempfile.TemporaryDirectory() as tmp:
            before, t0 = _children_cpu(), time.perf_counter()
            subprocess.run(argv, env={**os.environ, "TMPDIR": tmp}, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            out[f"{name}_wall_s"] = time.perf_counter() - t0
            out[f"{name}_cpu_s"] = _children_cpu() - before
    return out


ROLES = {"tfyarn-forks": "fork_server", "tfyarn-driver": "driver"}  # their ps -o comm names
TASK_ANCHOR = """
import os, subprocess, sys
procs = [subprocess.Popen(["setpriv", "--pdeathsig", "KILL", "--", "bash", "-c", sys.argv[1]],
                          env={**os.environ, "TFYARN_TASK_INDEX": str(i)})
         for i in range(int(sys.argv[2]))]
sys.exit(max(p.wait() for p in procs))
"""
FORK_FLOOR = """
import os, sys, tempfile
from tfyarn.system import forks
def entry():
    from tfyarn.runtime import launcher  # the launchers' imports, shared as theirs are
    return lambda argv: 0
with tempfile.TemporaryDirectory() as d:
    server = forks.ForkServer(entry, dict(os.environ), d)
    kids = [server.spawn([], d, os.path.join(d, "log")) for _ in range(int(sys.argv[1]))]
    server.close()
    code = max(k.wait() for k in kids)
    server.proc.wait()  # reaped here, so its children's CPU is counted
    sys.exit(code)
"""


def _children_cpu() -> float:
    """CPU seconds of every child this process has reaped so far, and theirs (getrusage)."""
    import resource

    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def _reaped_cpu(argv: list[str], env: dict[str, str]) -> float:
    """CPU seconds of `argv` and everything below it, reaped."""
    before = _children_cpu()
    subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    return _children_cpu() - before


def _cpu_and_reaped(pid: int) -> tuple[float, float]:
    """A process's own CPU seconds (the scheduler's nanoseconds) and its reaped
    children's (cutime + cstime: the kernel adds each child's exact total when it is
    reaped; 10 ms units)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    hz = os.sysconf("SC_CLK_TCK")
    return _cpu_of([pid]), (int(fields[13]) + int(fields[14])) / hz


def cpu_split(n: int) -> dict[str, float]:
    """Where a local N-task job's CPU goes (#46). The client, the driver (with what it
    reaped) and the fork server (without the launchers it reaped) are sampled every 0.1 s
    while the job runs, each process living to the job's end. The launchers' CPU is the
    job's whole reaped CPU less theirs and less the same N commands Popen'ed alone with
    the launchers' death signal (`tasks_alone_s`). (The fork server's reaped total was
    the first way: it exits right after its last child, often between two samples, and
    small jobs came out negative.) The floor of a process per task: a fork server's N
    children that do nothing (`fork_floor_s`: a fork of the launchers' imports, its exit,
    its reaping)."""
    import threading

    with tempfile.TemporaryDirectory() as tmp:
        stamps = os.path.join(tmp, "stamps")
        os.mkdir(stamps)
        env = {**os.environ, "STAMPS": stamps, "TMPDIR": tmp}
        seen: dict[int, tuple[str, float, float]] = {}
        before = _children_cpu()
        proc = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                                 "-wn", str(n), "--local", "-c", SCALE_CMD], env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        done = threading.Event()

        def sample() -> None:
            while not done.is_set():
                with contextlib.suppress(OSError, IndexError, ValueError):
                    seen[proc.pid] = ("client", _cpu_of([proc.pid]), 0.0)
                todo = _kids(proc.pid)
                while todo:
                    pid = todo.pop()
                    try:
                        with open(f"/proc/{pid}/comm") as f:
                            role = ROLES.get(f.read().strip())
                        if role is not None:
                            seen[pid] = (role, *_cpu_and_reaped(pid))
                    except (OSError, IndexError, ValueError):
                        continue
                done.wait(0.1)

        sampler = threading.Thread(target=sample, daemon=True)
        sampler.start()
        proc.wait()
        done.set()
        sampler.join()
        total = _children_cpu() - before
    own = {role: sum(o + reaped for r, o, reaped in seen.values() if r == role)
           for role in ("client", "driver")}
    own["fork_server"] = sum(o for r, o, _ in seen.values() if r == "fork_server")
    with tempfile.TemporaryDirectory() as stamps:
        tasks = _reaped_cpu([sys.executable, "-c", TASK_ANCHOR, SCALE_CMD, str(n)],
                            {**os.environ, "STAMPS": stamps})
    out = {"total": total, **own, "launchers": total - sum(own.values()) - tasks,
           "tasks_alone_s": tasks}
    out["fork_floor_s"] = _reaped_cpu([sys.executable, "-c", FORK_FLOOR, str(n)],
                                      dict(os.environ))
    return {k: round(v, 3) for k, v in out.items()}


POPEN_ANCHOR = """
import os, subprocess, sys
procs = [subprocess.Popen(["/bin/sh", "-c", sys.argv[1]], env={**os.environ, "I": str(i),
         "TFYARN_TASK_INDEX": str(i)}) for i in range(int(sys.argv[2]))]
sys.exit(max(p.wait() for p in procs))
"""
LAUNCH_CMD = 'date +%s.%N > "$STAMPS/s$TFYARN_TASK_INDEX"'


def launch_pair(n: int = TASKS) -> tuple[float, float, float]:
    """Whole-process times of an `el_submit --local` of n no-op tasks and of a Python
    script that Popens the same n commands (interpreter start on both sides); and how
    long el_submit ran after its verdict (the driver's final status, kv/status)."""
    times, after_verdict = [], 0.0
    for argv in ([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn", str(n),
                  "--local", "-c", LAUNCH_CMD],
                 [sys.executable, "-c", POPEN_ANCHOR, LAUNCH_CMD, str(n)]):
        with tempfile.TemporaryDirectory() as stamps, tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            subprocess.run(argv, env={**os.environ, "STAMPS": stamps, "TMPDIR": tmp,
                                      "TFYARN_KEEP_JOB_DIR": "1"}, check=True,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append(time.perf_counter() - t0)
            ended = time.time()
            assert len(os.listdir(stamps)) == n
            # job dirs are TMPDIR/tfyarn-UID/JOB_ID (docs/security.md G1)
            status = glob.glob(os.path.join(tmp, "tfyarn-*", "*", "kv", "status"))
            if status:
                after_verdict = ended - os.stat(status[0]).st_mtime
    return times[0], times[1], after_verdict


def compiled() -> None:
    """Byte-compile tfyarn first (PYTHONDONTWRITEBYTECODE may be set): an install has its
    .pyc files, so a launch measured here should too."""
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tfyarn")
    subprocess.run([sys.executable, "-m", "compileall", "-q", package], check=True,
                   stdout=subprocess.DEVNULL)


def scale_table(sizes: list[int], repeat: int) -> dict:
    """Medians per size, interleaved with the Popen anchor (launch overhead)."""
    out: dict = {}
    pairs = [launch_pair() for _ in range(repeat)]
    ours, anchor, after = (statistics.median(p[i] for p in pairs) for i in (0, 1, 2))
    out["launch_4_tasks_s"], out["popen_anchor_s"] = round(ours, 3), round(anchor, 3)
    out["launch_overhead_s"] = round(ours - anchor, 3)
    out["exit_after_verdict_s"] = round(after, 3)
    for n in sizes:
        times = repeat if n <= 64 else 1
        for name, run in ((f"n{n}", scale_run), (f"n{n}_popen", popen_run)):
            runs = [run(n) for _ in range(times)]
            out[name] = {k: None if any(r[k] is None for r in runs) else
                         round(statistics.median(r[k] for r in runs), 3) for k in runs[0]}
    pairs = [sleep_pair(max(sizes)) for _ in range(3)]
    out[f"n{max(sizes)}_sleep_5"] = {k: round(statistics.median(p[k] for p in pairs), 3)
                                     for k in pairs[0]}
    out[f"cpu_split_{max(sizes)}"] = cpu_split(max(sizes))
    out["idle_cores_256_tasks"] = round(idle_cores(256, window=10.0, settle=15.0), 4)
    return out



# ---------------------------------------------------------------- YARN (#19), on the sandbox

BARE_SKEIN = """
import skein, sys
spec = skein.ApplicationSpec.from_dict({"name": "bare", "queue": "default", "master": {
    "resources": {"memory": 512, "vcores": 1}, "script": "true"}})
with skein.Client() as client:
    app = client.submit(spec)
    print(app, flush=True)
    while client.application_report(app).state not in ("FINISHED", "FAILED", "KILLED"):
        pass
"""


def stock_skein(into: str) -> dict[str, str]:
    """The environment that runs skein 0.8.2 as PyPI ships it (its wheel, which
    scripts/build-skein keeps, unpacked into `into`): the anchor stays skein's own cost,
    not one that tfyarn's AM patches (heartbeats, the verdict, the JVM's start) move too."""
    import zipfile

    cache = os.environ.get("TFYARN_WHEEL_CACHE", os.path.expanduser("~/.cache/tfyarn/wheels"))
    wheel = Path(cache) / "skein-0.8.2-pypi" / "skein-0.8.2-py3-none-any.whl"
    if not wheel.exists():
        sys.exit(f"bench: {wheel} is missing: run scripts/build-skein (it keeps PyPI's wheel)")
    with zipfile.ZipFile(wheel) as z:
        z.extractall(into)
    return {**os.environ, "PYTHONPATH": into}


def _timed_submit(argv: list[str], env: dict[str, str] | None = None
                  ) -> tuple[float, float, str, float]:
    """(seconds to the application id on stdout, seconds to the whole client's exit, the
    id, the wall clock at the client's start)."""
    t0, wall = time.perf_counter(), time.time()
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    app_id = proc.stdout.readline().strip()
    first = time.perf_counter() - t0
    proc.wait()
    return first, time.perf_counter() - t0, app_id, wall


# --------------------------------------------------- where a YARN job's seconds go (#46)

def _yarn_opts():
    from tfyarn.client import cluster
    from tfyarn.core.settings import Settings

    return cluster.ClientOptions(settings=Settings.from_environ())


def _rm_times(app_id: str) -> dict[str, float]:
    """The ResourceManager's own clock for an application: accepted (submitted), its AM
    container launched, and FINISHED (its final status set), epoch seconds."""
    from tfyarn.client.cluster import rest_client

    client, until = rest_client(_yarn_opts()), time.monotonic() + 60
    # finishedTime: 0 until the RM has the final status
    while (app := client.get(f"apps/{app_id}")["app"])["finishedTime"] == 0:
        assert time.monotonic() < until, f"{app_id}'s AM never ended"
        time.sleep(0.2)
    return {"RM accepted": app["startedTime"] / 1000, "AM launched": app["launchTime"] / 1000,
            "RM finished": app["finishedTime"] / 1000}


def _kept_milestones(app_id: str) -> dict[str, float]:
    """The milestones in the job's kept page (the driver's and the launchers' clocks)."""
    from tfyarn.client import cluster
    from tfyarn.client.history import HdfsShelf
    from tfyarn.core.tfconfig import history_dir
    from tfyarn.hdfs import webhdfs

    opts = _yarn_opts()
    folder = history_dir(None, opts.settings.user)
    client = webhdfs.client_for(folder, opts.hadoop_conf, opts.settings.user,
                                cluster.web_login(opts))
    shelf, until = HdfsShelf(folder, client), time.monotonic() + 30
    while (view := shelf.read(app_id)) is None:  # kept once YARN has the verdict
        assert time.monotonic() < until, f"no kept page for {app_id} in {folder}"
        time.sleep(0.2)
    return {m.name: m.at for m in view.milestones}


def job_milestones(run: tuple[float, float, str, float], tfyarn: bool = True
                   ) -> dict[str, float]:
    """One submitted job's milestones, in seconds from its client's start: the client's
    (application id printed, exit), the ResourceManager's and, for tfyarn, the kept
    page's."""
    first, whole, app_id, wall = run
    marks = {"app id printed": wall + first, "client exit": wall + whole,
             **_rm_times(app_id)}
    if tfyarn:
        marks.update(_kept_milestones(app_id))
    return {name: at - wall for name, at in marks.items()}


def phase_table(runs: list[dict[str, float]]) -> list[list]:
    """Medians over runs of each milestone's offset, in time order, with the phase that
    ends there (the time since the milestone before): [name, at_s, phase_s]."""
    names = set().union(*runs)
    med = {n: statistics.median(r[n] for r in runs if n in r) for n in names}
    rows, before = [], 0.0
    for name in sorted(med, key=med.get):
        rows.append([name, round(med[name], 3), round(med[name] - before, 3)])
        before = med[name]
    return rows


def print_phases(title: str, rows: list[list], file=sys.stderr) -> None:
    print(f"\n{title}\n  {'milestone':<34} {'at (s)':>8} {'phase (s)':>10}", file=file)
    for name, at, took in rows:
        print(f"  {name:<34} {at:8.3f} {took:10.3f}", file=file)


@contextlib.contextmanager
def warm_driver() -> Iterator[None]:
    """`tfyarn skein-driver start` for the submits inside, stopped after them."""
    tfyarn = [sys.executable, "-m", "tfyarn"]
    subprocess.run([*tfyarn, "skein-driver", "start"], check=True, capture_output=True)
    try:
        yield
    finally:
        subprocess.run([*tfyarn, "skein-driver", "stop"], check=True, capture_output=True)


def yarn_rates(repeat: int) -> dict:
    """On the sandbox YARN, interleaved: a trivial el_submit job with and without the
    warm skein driver (its second job: `warm`; the first a driver serves, which also loads
    its classes: `warm_first`) against bare skein (PyPI's 0.8.2, `stock_skein`) submitting
    and awaiting a trivial app; gang restart
    time (a worker's user process SIGKILLed to every task of the new gang running); and
    where each one's seconds went (phase tables: the milestones' medians)."""
    el = [sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn", "1",
          "--python", sys.executable, "-c", "true"]
    cold, warm, bare, first = [], [], [], []
    with tempfile.TemporaryDirectory(prefix="tfyarn-bench-skein-") as unpacked:
        stock = stock_skein(unpacked)
        for _ in range(repeat):
            bare.append(_timed_submit([sys.executable, "-c", BARE_SKEIN], stock))
            cold.append(_timed_submit(el))
            with warm_driver():  # it serves many submits; its first call also loads classes
                first.append(_timed_submit(el))
                warm.append(_timed_submit(el))
    med = {name: (statistics.median(r[0] for r in runs), statistics.median(r[1] for r in runs))
           for name, runs in (("bare", bare), ("cold", cold), ("warm", warm),
                              ("warm_first", first))}
    out = {f"yarn_{name}_submit_to_id_s": round(v[0], 2) for name, v in med.items()}
    out.update({f"yarn_{name}_client_s": round(v[1], 2) for name, v in med.items()})
    out["yarn_warm_client_ratio"] = round(med["warm"][1] / med["bare"][1], 2)
    out["yarn_cold_client_ratio"] = round(med["cold"][1] / med["bare"][1], 2)
    phases = {"trivial_bare_skein": phase_table([job_milestones(r, False) for r in bare]),
              "trivial_cold": phase_table([job_milestones(r) for r in cold]),
              "trivial_warm": phase_table([job_milestones(r) for r in warm])}
    restarts = [yarn_restart() for _ in range(repeat)]
    out["yarn_gang_restart_s"] = round(statistics.median(r[0] for r in restarts), 2)
    phases["gang_restart"] = phase_table([r[1] for r in restarts])
    many, floor_cold = [], []  # each beside its floor (floor_many_tasks), interleaved
    for _ in range(repeat):
        floor_cold.append(floor_many_tasks())
        many.append(yarn_many_tasks())
    out["yarn_64_tasks_running_s"] = round(statistics.median(m[0] for m in many), 2)
    out["yarn_64_floor_s"] = round(statistics.median(floor_cold), 2)
    phases["ranks_64"] = phase_table([m[1] for m in many])
    warm_many, floor = [], []  # the same with a warm driver: without the cold client's JVM
    for _ in range(repeat):
        with warm_driver():
            _timed_submit(el)  # its first call loads classes (warm_first, above)
            floor.append(floor_many_tasks())
            warm_many.append(yarn_many_tasks())
    out["yarn_64_tasks_running_warm_s"] = round(statistics.median(m[0] for m in warm_many), 2)
    out["yarn_64_floor_warm_s"] = round(statistics.median(floor), 2)
    out["yarn_64_warm_over_floor_s"] = round(out["yarn_64_tasks_running_warm_s"]
                                             - out["yarn_64_floor_warm_s"], 2)
    phases["ranks_64_warm"] = phase_table([m[1] for m in warm_many])
    out["phases"] = phases
    for title, rows in phases.items():
        print_phases(title, rows)
    return out


def yarn_many_tasks(containers: int = 4, per: int = 16) -> tuple[float, dict[str, float]]:
    """A 64-rank job (4 containers of 16 ranks: what 8 vcores hold): from el_submit's
    start until every rank runs its command (each stamps the time); and its milestones."""
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as stamps:
        os.chmod(stamps, 0o777)
        run = _timed_submit([sys.executable, "-m", "tfyarn.cli", "-t", "pytorch", "-wn",
                             str(containers), "-ppn", str(per), "-wm", "1024", "--python",
                             sys.executable, "--env", f"STAMPS={stamps}", "-c",
                             'date +%s.%N > "$STAMPS/$RANK"'])
        values = _stamps(stamps, "")  # every rank's, named by its rank
        assert len(values) == containers * per, len(values)
        marks = job_milestones(run)
        marks["every rank stamped"] = max(values) - run[3]
        return max(values) - run[3], marks


FLOOR_MANY = """
import sys
from tfyarn.client import appspec
stamps, per = sys.argv[1], int(sys.argv[2])
each = (f'for i in $(seq {per}); do date +%s.%N > "{stamps}/$CONTAINER_ID-$i" & done; '
        'wait; exec sleep 600')
appspec.task_script = lambda *_args, **_kw: each  # no launcher: no Python, no store
appspec.driver_script = lambda *_args, **_kw: "exec sleep 600"  # no driver
sys.argv[:] = ["el_submit", *sys.argv[3:]]
from tfyarn.cli.entry import el_submit
el_submit()
"""


def floor_many_tasks(containers: int = 4, per: int = 16) -> float:
    """The floor of `yarn_many_tasks` on this YARN: the same el_submit (its client, staging,
    skein's AM with tfyarn's settings, the same containers) with each container's script
    replaced by one that starts `per` shell commands stamping the time, and the driver's
    by a sleep: no tfyarn process in the application. From el_submit's start until the
    last stamp; then Ctrl-C ends it (el_submit kills the application)."""
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as stamps:
        os.chmod(stamps, 0o777)
        t0 = time.time()
        proc = subprocess.Popen([sys.executable, "-c", FLOOR_MANY, stamps, str(per), "-t",
                                 "pytorch", "-wn", str(containers), "-ppn", str(per), "-wm",
                                 "1024", "--python", sys.executable, "-c", "true"],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            until = time.monotonic() + 300
            while len(os.listdir(stamps)) < containers * per:
                assert proc.poll() is None and time.monotonic() < until, "the floor job ended"
                time.sleep(0.05)
            time.sleep(0.2)  # the last stamps' text
            last = max(_stamps(stamps, ""))
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=120)
        return last - t0


def yarn_restart() -> tuple[float, dict[str, float]]:
    """Worker 1 of attempt 0 SIGKILLs its own user process (stamping the time); every task
    of attempt 1 stamps when its user code runs: the last stamp minus the kill; and the
    job's milestones from the kill on (the new gang's)."""
    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as stamps:
        os.chmod(stamps, 0o777)
        run = _timed_submit([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                             "-wn", str(TASKS), "--max-restarts", "1", "--python",
                             sys.executable, "--env", f"STAMPS={stamps}", "-c", RESTART])
        with open(os.path.join(stamps, "failed")) as f:
            failed = float(f.read())
        os.remove(os.path.join(stamps, "failed"))
        took = last_stamp(stamps, failed)
        marks = {n: at + run[3] - failed for n, at in job_milestones(run).items()}
        marks = {n: at for n, at in marks.items() if at >= 0}
        marks["worker:1 killed"] = 0.0
        marks["every task stamped"] = took
        return took, marks


CHECKPOINT_EVERY = 300  # steps (0.1 s each): a periodic checkpoint every 30 s, as "today"


def preempted_run(notice: bool, lead_s: float) -> dict[str, float]:
    """tests/programs.py's STEPPER as job A (`default`, 3 x 3 GB: the sandbox's whole
    cluster, periodic checkpoints every CHECKPOINT_EVERY steps), preempted for job B
    (`urgent`, owed half) `lead_s` after A's tasks run: the steps A lost (the last step
    attempt 1 reached, less the step attempt 2 resumed from) and its goodput, with or
    without the notice path."""
    sys.path.insert(0, str(REPO / "tests"))
    from programs import STEPPER

    with tempfile.TemporaryDirectory(dir=os.path.expanduser("~")) as tmp:
        ckpt, state = Path(tmp, "ckpt"), Path(tmp, "state")
        ckpt.mkdir(), state.mkdir()
        Path(tmp, "stepper.py").write_text(STEPPER)
        how = "notice" if notice else "ignore"
        a = subprocess.Popen([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker",
                              "-wn", "3", "-wm", "3000", "-f", "./", "--queue", "default",
                              "--max-restarts", "2", "--python", sys.executable, "-c",
                              f"python stepper.py {ckpt} {state} {CHECKPOINT_EVERY} {how}"],
                             cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                             text=True)
        while len([p for p in ckpt.iterdir() if not p.name.endswith(".tmp")]) < 3:
            assert a.poll() is None, a.communicate()[1][-2000:]
            time.sleep(0.5)  # polling A's tasks' own files: none is there to wait on
        time.sleep(lead_s)  # A trains a while first (the bench's own pacing)
        subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-worker", "-wn",
                        "2", "-wm", "1500", "--queue", "urgent", "--python", sys.executable,
                        "-c", "true"], check=True, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL)
        _, err = a.communicate(timeout=900)
        assert a.returncode == 0, err[-2000:]
        reached = max(int(Path(state, f"last{t}.0").read_text()) for t in range(3))
        resumed = int(Path(state, "last0.1").read_text()) - 100
        found = re.findall(r"goodput (\d+)%", err)
        return {"steps_lost": reached - resumed,
                "goodput": float(found[-1]) / 100 if found else float("nan")}


def preemption_costs(repeat: int) -> dict:
    """The same preempted job without and with the notice path, alternated, in one run
    (#45): medians over `repeat` pairs (the restart's backoff is jittered)."""
    out: dict = {"steps_between_checkpoints": CHECKPOINT_EVERY, "repeat": repeat}
    runs: dict[str, list[dict[str, float]]] = {"periodic": [], "notice": []}
    leads = random.Random(45)  # the same lead for both runs of a pair, varied across pairs:
    for _ in range(repeat):    # the kill falls anywhere between two periodic checkpoints
        lead = leads.uniform(10.0, 10.0 + CHECKPOINT_EVERY / 10)
        for name, notice in (("periodic", False), ("notice", True)):
            runs[name].append(preempted_run(notice, lead))
    for name, seen in runs.items():
        for key in ("steps_lost", "goodput"):
            out[f"{name}_{key}"] = statistics.median(r[key] for r in seen)
            out[f"{name}_{key}_each"] = [r[key] for r in seen]
    out["notice_lost_over_between"] = round(out["notice_steps_lost"] / CHECKPOINT_EVERY, 4)
    out["targets"] = {"notice_lost_over_between": 0.01}
    return out


PIPELINE_COPIES = 60


def _stamp(text: str) -> float:
    """An ISO time the program printed (`...Z`, UTC) as epoch seconds."""
    import datetime

    return datetime.datetime.fromisoformat(text).replace(
        tzinfo=datetime.timezone.utc).timestamp()


# pl_submit's lines that end a phase: (milestone, pattern, whose clock, which one).
# clock "arrival": the bench's, when the line arrives; "stamp": the time in the line (the
# program's own). Which: the first of its kind, or the last (each dataset is sealed in turn)
PIPELINE_LINES = (
    ("Spark started, pre_train returned", r"data: pre_train's ", "arrival", min),
    ("first shard committed", r"shards? committed at (\S+)Z", "stamp", min),
    ("training job submitted", r"training job (\S+) submitted", "arrival", min),
    ("every dataset sealed", r"sealed: .* at (\S+)Z", "stamp", max),
    ("TensorFlow imported", r"tensorflow imported at (\S+)Z", "stamp", min),
    ("first training step", r"first step at (\S+)Z", "stamp", min),
)


def _pipeline_run(where: str, *extra: str) -> tuple[dict[str, float], str]:
    """pl_submit of the census program, from its start: each milestone of its lines,
    and the training job's id."""
    program = REPO / "examples" / "census_spark"
    cmd = [sys.executable, "-c", "from tfyarn.cli.main import pl_submit_main; "
           "pl_submit_main()", "census_program.py", "-t", "tensorflow-worker", "-wn", "2",
           "-wm", "2048", "-f", "../census/census_single.py,prepare.py", "--env",
           "CENSUS_EPOCHS=1", "--python", sys.executable, "--spark-conf",
           "spark.ui.enabled=false", "--spark-conf", "spark.executor.instances=1",
           *(["--local", "--spark-conf", "spark.master=local[1]"] if where == "local" else []),
           *extra]
    env = {**os.environ, "CENSUS_COPIES": str(PIPELINE_COPIES), "CENSUS_SHARDS": "24"}
    start = time.time()
    proc = subprocess.Popen(cmd, cwd=program, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)
    marks: dict[str, float] = {}
    app_id, tail = "", []
    for line in proc.stderr:
        tail = [*tail[-40:], line]
        for name, pattern, clock, which in PIPELINE_LINES:
            if (m := re.search(pattern, line)) is None:
                continue
            at = time.time() if clock == "arrival" else _stamp(m.group(1))
            marks[name] = which(marks.get(name, at), at)
            if name == "training job submitted":
                app_id = m.group(1)
    if proc.wait(timeout=1800) != 0:
        raise SystemExit(f"pl_submit failed: {''.join(tail)[-3000:]}")
    marks["pl_submit exit"] = time.time()
    return {name: at - start for name, at in marks.items()}, app_id


def _pipeline_marks(where: str, *extra: str) -> dict[str, float]:
    """One run's milestones: pl_submit's lines and, on YARN, the training job's own
    (the ResourceManager's, and its kept page's), all from pl_submit's start."""
    marks, app_id = _pipeline_run(where, *extra)
    if where == "yarn" and app_id:
        submitted = marks["training job submitted"]
        job = {**_rm_times(app_id), **_kept_milestones(app_id)}
        # the training job's clocks are epoch seconds: placed by its RM acceptance, which
        # the submitted line follows by the client's own round trip (below 0.1 s)
        accepted = job["RM accepted"]
        marks.update({f"job: {n}": submitted + at - accepted for n, at in job.items()
                      if n not in ("RM finished", "verdict")})
    return marks


def _unavoidable(marks: dict[str, float]) -> float:
    """What a start to the first step cannot do without, from this run's own phases:
    Spark's start (with pre_train's own jobs), its first shard, one container's start (YARN
    placing and launching the training job's first: its AM's) and TF's import in a task.
    Locally: no container, and TF's term counts from the submit (no kept milestones)."""
    spark = marks["Spark started, pre_train returned"]
    shard = marks["first shard committed"] - spark
    container = marks.get("job: AM launched", 0.0) - marks.get("job: RM accepted", 0.0)
    tf = marks["TensorFlow imported"] - marks.get("job: gang 0 user code started",
                                                  marks["training job submitted"])
    return spark + shard + container + tf


def pipeline_times(where: str) -> dict:
    piped = _pipeline_marks(where)
    whole = _pipeline_marks(where, "--no-pipeline")
    first_p, first_w = piped["first training step"], whole["first training step"]
    tables = {"pipelined": phase_table([piped]), "write_then_submit": phase_table([whole])}
    for name, rows in tables.items():
        print_phases(f"pl_submit census on {where}, {name}", rows)
    floor = _unavoidable(piped)
    return {"where": where, "rows": PIPELINE_COPIES * 32561,
            "pipelined_first_step_s": round(first_p, 2),
            "write_then_submit_first_step_s": round(first_w, 2),
            "pipelined_ratio": round(first_p / first_w, 2),
            "unavoidable_s": round(floor, 2),
            "pipelined_over_unavoidable": round(first_p / floor, 2),
            "phases": tables,
            "targets": {"pipelined_ratio": 0.6, "pipelined_over_unavoidable": 1.5}}


PROGRESS_CALL = """
import os, sys, time
os.environ["TFYARN_STEPS_FILE"] = sys.argv[1]
import tfyarn
def anchor(step, **metrics):  # an empty Python call with the same arguments
    pass
def timed(fn, n=200_000):
    t = time.perf_counter()
    for i in range(n):
        fn(i, loss=0.25, accuracy=0.5)
    return (time.perf_counter() - t) / n * 1e6
tfyarn.progress(0)  # the file opened and mapped once, outside the timing
print(min(timed(tfyarn.progress) for _ in range(5)), min(timed(anchor) for _ in range(5)))
"""


def progress_cost(tmp: str) -> dict[str, float]:
    """tfyarn.progress(step, loss=, accuracy=) per call, in a task's environment (its
    steps file mapped), against an empty Python call with the same arguments."""
    out = subprocess.run([sys.executable, "-c", PROGRESS_CALL, os.path.join(tmp, "steps")],
                         capture_output=True, text=True, check=True)
    ours, anchor = (float(x) for x in out.stdout.split())
    return {"progress_call_us": round(ours, 2), "empty_call_us": round(anchor, 3),
            "progress_over_empty": round(ours / anchor, 1), "target_progress_call_us": 20.0}


def _kept_page(job_id: str, started: float):
    """A finished 8-task job's page, as a driver keeps it (tasks, goodput, a restart)."""
    from tfyarn.core.records import JobView, TaskRow

    rows = tuple(TaskRow(f"worker:{i}", f"10.0.0.{i}:4000{i}", "exited 0", "exit 0",
                         f"http://10.0.0.{i}:8042/node/containerlogs/c_{i}/u", "step 900 (9.1/s)")
                 for i in range(8))
    return JobView(f"nightly {job_id[-4:]}", "tensorflow-mwms", job_id, "SUCCEEDED", "2 min", 1,
                   3, rows, "all 8 tasks exited with code 0",
                   earlier=("attempt 1: FAILED (retryable): worker:3 was preempted",),
                   refresh=False, goodput=("goodput 91%: 100 s of useful training in 110 s, "
                                           "by attempt:", "  1. ...", "  2. ..."),
                   user="bench", started=started, ended=started + 120)


def history_times(jobs: int, repeat: int) -> dict:
    """`tfyarn history` over `jobs` kept pages in HDFS (the cluster HADOOP_CONF_DIR names):
    its start (it reads every page before it serves), the listing's first answer and
    later ones, and one WebHDFS LISTSTATUS of the same dir (the least any listing does)
    as the anchor."""
    import urllib.request

    from tfyarn.client import cluster
    from tfyarn.core.settings import Settings
    from tfyarn.hdfs import webhdfs

    opts = cluster.ClientOptions(settings=Settings.from_environ())
    folder = f"hdfs:///tmp/tfyarn-bench-history-{os.getpid()}"
    client = webhdfs.client_for(folder, opts.hadoop_conf, opts.settings.user,
                                cluster.web_login(opts))
    path, now = webhdfs.hdfs_path(folder), time.time()
    for i in range(jobs):
        job_id = f"application_1_{i:04d}"
        webhdfs.put_text(client, f"{path}/{job_id}.json", _kept_page(job_id, now - i).to_json())
    began = time.perf_counter()
    server = subprocess.Popen([sys.executable, "-m", "tfyarn", "history", "--port", "0",
                               "--dir", folder], stderr=subprocess.PIPE, text=True)
    try:
        url = server.stderr.readline().split(": ", 2)[2].strip()
        start = time.perf_counter() - began  # it reads every kept page before it serves

        def get() -> float:
            t = time.perf_counter()
            with urllib.request.urlopen(url, timeout=60) as r:
                assert r.read().count(b'class="job"') >= jobs
            return time.perf_counter() - t

        first = get()
        later = statistics.median(get() for _ in range(repeat))

        def liststatus() -> float:
            t = time.perf_counter()
            client.list(path, status=True)
            return time.perf_counter() - t

        anchor = statistics.median(liststatus() for _ in range(repeat))
    finally:
        server.terminate()
        server.wait(timeout=30)
        client.delete(path, recursive=True)
    return {"jobs": jobs, "server_start_s": round(start, 3),
            "first_listing_s": round(first, 3), "listing_s": round(later, 3),
            "liststatus_s": round(anchor, 4), "listing_over_liststatus": round(later / anchor, 1),
            "target_first_listing_s": 1.0}


def median_of(fn, repeat: int) -> float:
    runs = []
    for _ in range(repeat):
        with tempfile.TemporaryDirectory() as stamps:
            runs.append(fn(stamps))
    return statistics.median(runs)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--app", help="a YARN application id, for the status comparison")
    p.add_argument("--allreduce", action="store_true", help="also time allreduce bandwidth "
                   "(needs torch and Horovod: scripts/build-horovod)")
    p.add_argument("--data", type=int, nargs="?", const=200_000, metavar="ROWS",
                   help="only tfyarn.data's write/read rows/s (needs pyspark: .[spark])")
    p.add_argument("--scale", nargs="?", const="4,64,256,512", metavar="N,N,...",
                   help="only local scale: 5 s tasks at each N, and 4-task launch overhead "
                   "against a Python script that Popens the same commands")
    p.add_argument("--yarn", action="store_true", help="only the YARN rates, on the cluster "
                   "HADOOP_CONF_DIR names (the sandbox: eval $(scripts/yarn-sandbox env))")
    p.add_argument("--pipeline", nargs="?", const="yarn", choices=["yarn", "local"],
                   help="only pl_submit's time to the first training step, pipelined and "
                   "not (yarn: the cluster HADOOP_CONF_DIR names)")
    p.add_argument("--progress", action="store_true", help="only tfyarn.progress's cost per "
                   "call (target: 20 us)")
    p.add_argument("--preemption", action="store_true", help="only the steps a preempted job "
                   "loses and its goodput, with and without YARN's notice (the 3-node "
                   "sandbox HADOOP_CONF_DIR names; target: notice <= 1%% of the steps between "
                   "checkpoints)")
    p.add_argument("--history", type=int, nargs="?", const=200, metavar="JOBS",
                   help="only `tfyarn history`'s listing of JOBS kept pages in HDFS (the "
                   "cluster HADOOP_CONF_DIR names; target: 1 s)")
    p.add_argument("--compare", metavar="FILE", help="also print each figure beside the "
                   "same mode's in FILE (a saved baseline: scripts/bench-baseline.json), and "
                   "their ratio, on stderr")
    p.add_argument("--save", metavar="FILE", help="keep this run as FILE's baseline for its "
                   "mode (the other modes' entries stay)")
    ns = p.parse_args()
    mode, out = measure(ns)
    print(json.dumps(out, indent=2))
    if ns.compare:
        compare(mode, out, ns.compare)
    if ns.save:
        save(mode, out, ns.save)


def measure(ns: argparse.Namespace) -> tuple[str, dict]:
    """The mode the flags ask for, and its figures (tfyarn byte-compiled first, in every
    mode: the YARN figures were once taken without, 0.2 s more on each client's start)."""
    compiled()
    if ns.preemption:
        return "preemption", preemption_costs(ns.repeat)
    if ns.history:
        return "history", history_times(ns.history, ns.repeat)
    if ns.progress:
        with tempfile.TemporaryDirectory() as tmp:
            return "progress", progress_cost(tmp)
    if ns.pipeline:
        return f"pipeline-{ns.pipeline}", pipeline_times(ns.pipeline)
    if ns.yarn:
        return "yarn", yarn_rates(ns.repeat)
    if ns.scale:
        sizes = [int(x) for x in ns.scale.split(",")]
        return "scale", scale_table(sizes, ns.repeat)
    if ns.data:
        return "data", {"rows": ns.data, **data_rates(ns.data)}
    n = ns.repeat
    helps = help_pairs(max(n, 7))
    help_s = helps["help_s"]
    api_s = statistics.median(api_import_time() for _ in range(n))
    local_s = median_of(local_time, n)
    bare_s = median_of(bare_time, n)
    restart_s = median_of(restart_time, n)
    staged, plain = staging_times()
    out = {**helps, "api_import_s": round(api_s, 3),
           "api_import_ratio": round(api_s / help_s, 2),
           "local_to_tf_config_s": round(local_s, 3),
           "bare_spawn_s": round(bare_s, 3), "overhead_s": round(local_s - bare_s, 3),
           "restart_s": round(restart_s, 3),
           "restart_over_launch_s": round(restart_s - local_s, 3),
           "idle_cores_32_tasks": round(idle_cores(), 3),
           "staging_20k_files_s": round(staged, 3), "no_files_s": round(plain, 3),
           "staging_ratio": round(staged / plain, 2),
           "targets": {"help_s": 0.15, "help_over_skein_help": 0.25, "api_import_ratio": 1.5,
                       "overhead_s": 0.5, "restart_over_launch_s": 5.0,
                       "status_ratio": 0.5}, "repeat": n}
    if ns.allreduce:
        out.update(allreduce_ratios(n))
        out["targets"]["allreduce_ratio"] = 0.95
    if ns.app and os.environ.get("HADOOP_CONF_DIR"):
        ours, theirs = status_times(ns.app, n)
        out.update(status_s=round(ours, 3), yarn_cli_status_s=round(theirs, 3),
                   status_ratio=round(ours / theirs, 2))
    return "default", out


def _figures(d: dict, prefix: str = "") -> dict[str, float]:
    """Every number in a bench output, by its dotted key (a phase table's rows by their
    milestone: `phases.trivial_cold.verdict`); targets left out."""
    flat: dict[str, float] = {}
    for key, v in d.items():
        name = f"{prefix}{key}"
        if key in ("targets", "repeat"):
            continue
        if isinstance(v, dict):
            flat.update(_figures(v, f"{name}."))
        elif isinstance(v, list) and v and all(isinstance(r, list) and len(r) == 3 for r in v):
            flat.update({f"{name}.{r[0]}": r[1] for r in v})  # phase rows: the offset
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            flat[name] = v
    return flat


def compare(mode: str, out: dict, path: str) -> None:
    """Each figure beside the baseline's for the same mode, on stderr: the next
    regression is seen by the change that causes it."""
    with open(path, encoding="utf-8") as f:
        saved = json.load(f).get(mode)
    if saved is None:
        print(f"\n{path} has no {mode!r} baseline: keep one with --save {path}",
              file=sys.stderr)
        return
    print(f"\n{mode}: now against {path} (saved {saved.get('saved', '?')})", file=sys.stderr)
    base, now = _figures(saved["figures"]), _figures(out)
    for key in sorted(set(base) | set(now)):
        b, n = base.get(key), now.get(key)
        ratio = f"{n / b:6.2f}x" if b and n is not None else "      -"
        was, is_ = ("-" if x is None else f"{x:g}" for x in (b, n))
        print(f"  {key:<60} {was:>10} {is_:>10} {ratio}", file=sys.stderr)


def save(mode: str, out: dict, path: str) -> None:
    """This run as the mode's baseline in `path` (the other modes' kept)."""
    import datetime
    import platform

    try:
        with open(path, encoding="utf-8") as f:
            kept = json.load(f)
    except FileNotFoundError:
        kept = {}
    kept[mode] = {"saved": datetime.date.today().isoformat(), "host": platform.node(),
                  "cpus": os.cpu_count(), "figures": out}
    with open(path, "w", encoding="utf-8") as f:
        json.dump(kept, f, indent=1, sort_keys=True)
        f.write("\n")


if __name__ == "__main__":
    main()
