"""`fit(program, ...)`: Spark to training in one program (EMR's `pl_submit`).

The program file's `Program` class runs `pre_train(spark)` here, in a Spark application
(on YARN, or `local[*]` with `local=True`). Each DataFrame it returns is written as a
streamed dataset (`tfyarn.data.spark.Stream`) in a dir of this run's own; the training
job (every task runs `train(ctx)`) is submitted as soon as the first shard of the first
dataset is committed, and its readers follow the datasets as Spark writes them.

Owns the coupling of the two: Spark's failure before the first shard submits nothing
(`JobFailed` with Spark's reason); after it, the training job is stopped and the same
error raised; a failed training cancels Spark's jobs and stops the Spark application it
started. The datasets are removed at the end unless `keep_data`.
Must not write the process environment: Spark's python is set through Spark's conf.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from typing import Any

from tfyarn.core.errors import JobFailed, SpecError
from tfyarn.core.records import Outcome
from tfyarn.core.settings import Settings
from tfyarn.core.timing import PIPELINE_POLL_S
from tfyarn.data import program as prog

PROGRAM_MAIN = '"${TFYARN_PYTHON:-python3}" -m tfyarn.data.program'


@dataclasses.dataclass(frozen=True)
class Fitted:
    """What a one-program job left: the training job's id and outcome, and where its
    datasets were (removed unless kept) and its model is."""

    job_id: str
    outcome: Outcome
    data: dict[str, str]
    model_dir: str | None


def fit(program: str | os.PathLike, *, local: bool = False, cls: str | None = None,
        data_dir: str | None = None, keep_data: bool = False, pipeline: bool = True,
        spark_conf: Mapping[str, str] | None = None,
        say: Callable[[str], None] | None = None,
        on_submit: Callable[[Any], None] | None = None, **options: Any) -> Fitted:
    """Run the program file: `pre_train` in Spark, its data written as it is trained on,
    `train` in every task of a job submitted with `options` (submit's: kind, workers,
    worker_memory, files, ...). `data_dir`: where the datasets go (default: on YARN
    `hdfs:///user/$USER/.tfyarn/data/RUN`, locally a temp dir); `pipeline`: submit the
    training at the first shard (False: once every dataset is sealed); `spark_conf`: Spark
    settings (`spark.executor.instances`...); `say`: progress lines; `on_submit(job)`:
    called with the training job's handle once it is submitted."""
    from tfyarn.api.submit import job_spec

    say = say or (lambda _line: None)
    for bad in ("command", "data"):
        if bad in options:
            raise SpecError(f"{bad}: a one-program job runs the program's train() on the "
                            "data its pre_train() returns; drop it")
    path = os.path.abspath(os.fspath(program))
    program_cls = prog.load(path, cls)
    command = f"{PROGRAM_MAIN} {os.path.basename(path)}" + (f" {cls}" if cls else "")
    files = options.pop("files", None) or []
    files = [files] if isinstance(files, str | os.PathLike) else list(files)
    options["files"] = [*files, path]
    _, spec = job_spec(None, command=command, **options)  # every option checked before I/O
    settings = Settings.from_environ()
    root = _data_root(data_dir, local, settings)
    run = _Run(program_cls(), root, spec.readers, local, dict(spark_conf or {}), say)
    run.pipeline = pipeline
    with _by_value(program_cls):
        return run.go(lambda data: _submit(local, command, data, options), on_submit,
                      keep_data)


@contextlib.contextmanager
def _by_value(program_cls: type) -> Iterator[None]:
    """The program's module pickled by value for Spark's executors (which do not have
    the file) while it runs; pyspark's cloudpickle keeps that registry process-wide, so
    it is undone at the end, and the module let go."""
    from pyspark import cloudpickle

    module = sys.modules[program_cls.__module__]
    cloudpickle.register_pickle_by_value(module)
    try:
        yield
    finally:
        cloudpickle.unregister_pickle_by_value(module)
        sys.modules.pop(module.__name__, None)


def _data_root(data_dir: str | None, local: bool, settings: Settings) -> str:
    run = f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"
    if data_dir:
        return f"{data_dir.rstrip('/')}/{run}"
    if local:
        import tempfile

        return os.path.join(tempfile.gettempdir(), f"tfyarn-data-{run}")
    return f"hdfs:///user/{settings.user}/.tfyarn/data/{run}"


def _submit(local: bool, command: str, data: list[str], options: dict[str, Any]) -> Any:
    from tfyarn.api import submit

    return submit(local=local, command=command, data=data, **options)


class _Run:
    """One run of a program: its Spark session, its streamed writes, its training job."""

    def __init__(self, program: prog.Program, root: str, readers: int, local: bool,
                 spark_conf: dict[str, str], say: Callable[[str], None]) -> None:
        self.program, self.root, self.readers, self.say = program, root, readers, say
        self.local, self.spark_conf = local, spark_conf
        self.spark: Any = None
        self.ours = False  # this run started the Spark session (and stops it)
        self.first = threading.Event()  # the first dataset's first shard is committed
        self.streams: list[Any] = []
        self.writer: _Writer | None = None
        self.pipeline = True  # submit at the first shard, not after the last

    def go(self, submit: Callable[[list[str]], Any], on_submit: Callable[[Any], None] | None,
           keep_data: bool) -> Fitted:
        try:
            self._start_spark()
            data = self._pre_train()
            self.writer = _Writer(self.streams, self.first)
            self.writer.start()
            self._wait_first()
            with submit(list(data.values())) as job:
                self.say(f"training job {job.id} submitted")
                if on_submit is not None:
                    on_submit(job)
                outcome = self._wait(job)
                model = job.model_dir
            if keep_data and self.writer.is_alive():
                self.writer.join()  # the data is kept: whole
            return Fitted(job.id, outcome, data, model)
        finally:
            self._end(keep_data)

    def _start_spark(self) -> None:
        from pyspark.sql import SparkSession

        self.ours = SparkSession.getActiveSession() is None
        builder = SparkSession.builder.master("local[*]" if self.local else "yarn") \
            .appName(f"tfyarn-pre_train-{type(self.program).__name__}")
        for key, value in self.spark_conf.items():
            builder = builder.config(key, value)
        self.spark = builder.getOrCreate()
        python = self.spark_conf.get("spark.pyspark.python") or os.environ.get("PYSPARK_PYTHON")
        if self.ours:  # the executors' python imports tfyarn: this one, unless said
            # pyspark's driver takes its workers' python from PYSPARK_PYTHON only; the
            # context's own attribute says it without touching the environment
            self.spark.sparkContext.pythonExec = python or sys.executable

    def _pre_train(self) -> dict[str, str]:
        """pre_train's DataFrames, each begun as a streamed dataset (an open manifest
        that training may start on), in its order."""
        from tfyarn.data import spark as tds

        try:
            frames = self.program.pre_train(self.spark)
        except Exception as exc:  # the user's Spark code: its reason, nothing submitted
            raise JobFailed(f"pre_train failed: {tds.spark_reason(exc)}; no training job "
                            "was submitted (fix pre_train and run again)") from exc
        frames = frames if isinstance(frames, Mapping) else {"train": frames}
        if not frames:
            raise SpecError("pre_train returned no DataFrame: return the data to train on")
        self.say(f"data: pre_train's {', '.join(frames)} go to {self.root}")
        odd = {n: type(df).__name__ for n, df in frames.items() if not hasattr(df, "rdd")}
        if odd:
            raise SpecError(f"pre_train returned {odd} where DataFrames go: return a Spark "
                            "DataFrame, or a dict of them by name")
        data = {}
        for i, (name, df) in enumerate(frames.items()):
            shards = max(df.rdd.getNumPartitions(), self.readers)
            hook = self._committed(name, i == 0)
            data[name] = f"{self.root}/{name}"
            stream = tds.Stream(df, data[name], shards, self.program.extra, hook)
            stream.begin()
            self.streams.append(stream)
        return data

    def _committed(self, name: str, first: bool) -> Callable[[Any], None]:
        def hook(m: Any) -> None:
            if m.sealed:
                self.say(f"data {name}: sealed: {m.rows} rows in {len(m.shards)} shards "
                         f"at {_now()}")
            elif m.shards:
                self.say(f"data {name}: {len(m.shards)} shards committed at {_now()}")
            if first and m.shards:
                self.first.set()
        return hook

    def _wait_first(self) -> None:
        """Until the first shard is committed; Spark's failure before it submits nothing."""
        while not self.first.wait(PIPELINE_POLL_S) and self.writer.is_alive():
            pass
        if not self.pipeline:
            self.writer.join()
        failed = bool(self.writer.reason) and not self.pipeline
        if failed or not self.first.is_set():
            raise self._spark_failed("no training job was submitted")

    def _wait(self, job: Any) -> Outcome:
        """The training job's end; Spark's failure stops it, its failure stops Spark.
        Once the data is written, Spark's executors go back to YARN."""
        released = False
        while True:
            if not released and not self.writer.is_alive() and not self.writer.reason:
                released = True
                self._release_executors()
            try:
                return job.wait(PIPELINE_POLL_S if self.writer.is_alive() else None)
            except TimeoutError:
                if self.writer.reason:
                    self.say(f"Spark failed: {self.writer.reason}; stopping the training job")
                    job.kill()
                    raise self._spark_failed(f"the training job {job.id} was stopped") \
                        from None
            except JobFailed as failed:  # a reader that saw Spark's failure fails too
                if self.writer.reason:
                    raise self._spark_failed(f"the training job {job.id} was stopped") \
                        from failed
                self.say(f"training failed; stopping Spark ({failed})")
                raise

    def _release_executors(self) -> None:
        """pre_train's data is written: the Spark application this run started gives its
        executors back to YARN (idle, they would hold a shared queue's room for the whole
        training, and after a lost node the room a restarting gang waits for). Its
        driver stays for the datasets' removal at the end. Not locally (local[*] has
        none), nor for a session the user started."""
        from py4j.protocol import Py4JError

        if self.local or not self.ours or self.spark is None:
            return
        try:
            context = self.spark.sparkContext._jsc.sc()
            ids = context.getExecutorIds()
            if ids.isEmpty():
                return
            count = ids.size()
            context.killExecutors(ids)  # with no dynamic allocation: not replaced
        except Py4JError as exc:
            self.say(f"data: written; Spark kept its executors ({exc})")
            return
        self.say(f"data: written; Spark's {count} executor(s) given back to YARN")

    def _spark_failed(self, training: str) -> JobFailed:
        return JobFailed(f"Spark failed writing pre_train's data: {self.writer.reason}; "
                         f"{training} (fix pre_train and run again)")

    def _end(self, keep_data: bool) -> None:
        """Spark's jobs cancelled (a write still going is not waited for), the datasets
        removed unless kept, and the Spark application stopped if this run started it."""
        if self.spark is None:
            return
        if self.writer is not None and self.writer.is_alive():
            self.writer.cancelled = True
            self.spark.sparkContext.cancelAllJobs()
            self.writer.join()
        if not keep_data:  # this run's dir, every dataset in it
            from tfyarn.data import spark as tds

            tds.filesystem(self.spark, self.root).remove()
        if self.ours:
            self.spark.stop()


class _Writer(threading.Thread):
    """The streamed writes, one after another; Spark's failure kept for the run."""

    def __init__(self, streams: list[Any], first: threading.Event) -> None:
        super().__init__(name="tfyarn-writes", daemon=True)
        self.streams, self.first = streams, first
        self.cancelled = False
        self.other = ""  # a failure outside Spark's job (the seal's check, HDFS)

    @property
    def reason(self) -> str:
        """Spark's failure, "" while none. Read from the streams, which set it before
        their manifests say it: a training that failed on reading it finds it here."""
        if self.cancelled:
            return ""
        return next((s.failure for s in self.streams if s.failure), self.other)

    def run(self) -> None:
        from tfyarn.data import spark as tds

        try:
            for stream in self.streams:
                stream.run()
        except Exception as exc:  # kept: the run raises it as the job's failure
            self.other = tds.spark_reason(exc)


def _now() -> str:
    """UTC with milliseconds: the progress lines' clock, comparable with the tasks'."""
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t * 1000) % 1000:03d}Z"
