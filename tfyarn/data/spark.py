"""`write(df, path)`: a Spark DataFrame to a committed TFRecord or Parquet dataset.

The executors' python (`PYSPARK_PYTHON`) must have tfyarn installed: the writer runs
there.

The rows never pass through the driver. Each Spark task writes its own partition:
- **TFRecord**: tf.train.Example bytes built without TensorFlow (`example`). `file://`
  paths are written with plain file I/O; `hdfs://` paths over WebHDFS, so executors need
  no Hadoop install; any other Hadoop filesystem (s3a://, gs://, abfs://...), Kerberos
  clusters and clusters with WebHDFS off through Hadoop's own client (libhdfs,
  `tfyarn.hdfs.jni`), which needs a Hadoop install (HADOOP_HOME) on the executors.
- **Parquet**: Spark's own writer and committer.

Files go to a fresh hidden generation dir. The driver collects only each partition's
file name, row count, size and CRC. It then writes the manifest last, through Spark's
own Hadoop FileSystem: a temp file, then one rename that overwrites. A task retried or
run twice (speculation) writes a file of its own name, which no manifest names, and
which is deleted after the commit.
A streamed write (`stream=True`, TFRecord) commits each shard as its Spark task ends:
each task adds what it wrote to an accumulator, which Spark merges on the driver once per
partition, and only for a task that succeeded (a task whose input was cut short by a
failure upstream may finish its own loop, but Spark fails it and drops its update); a
thread of the driver adds each new shard to a growing manifest, so readers start before
the last task ends. The end seals the manifest; a failure writes Spark's reason into it,
which every following reader raises.
Must not leave a dataset half-written under its name: the manifest is the commit point.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
import re
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tfyarn.core.errors import SpecError
from tfyarn.data import example as ex
from tfyarn.data.manifest import FORMATS, NAME, STREAMED, Column, Manifest, Shard

GENERATION_PREFIX = ".tfyarn-"
POLL_S = 0.25  # the driver looks for newly claimed shards this often

# Spark type name -> Example kind
KINDS = {"bigint": ex.INT64, "int": ex.INT64, "smallint": ex.INT64, "tinyint": ex.INT64,
         "boolean": ex.INT64, "float": ex.FLOAT, "double": ex.FLOAT, "string": ex.BYTES,
         "binary": ex.BYTES}


def columns_of(schema: Any) -> tuple[Column, ...]:
    """Example features of a Spark schema; a type with no Example kind is refused by
    column, with the cast to use."""
    if not schema.fields:
        raise SpecError("the DataFrame has no columns: select the features to write")
    out = []
    for f in schema.fields:
        name = f.dataType.simpleString()
        inner = name[len("array<"):-1] if name.startswith("array<") else None
        kind = KINDS.get(inner if inner is not None else name)
        if kind is None:
            raise SpecError(
                f"column {f.name!r} is {name}: tfyarn.data writes int/long/short/byte/bool, "
                "float/double, string/binary and arrays of those; cast it first, e.g. "
                f"df.withColumn({f.name!r}, df[{f.name!r}].cast('double'))")
        out.append(Column(f.name, kind, inner is not None))
    return tuple(out)


def write(df: Any, path: str, format: str = "tfrecord", shards: int | None = None,
          extra: dict | None = None, stream: bool = False,
          on_commit: Callable[[Manifest], None] | None = None) -> Manifest:
    """Write `df` as a dataset at `path` (`hdfs://`, `file://` or a local path) in
    `shards` files (default: one per partition, no shuffle; another count repartitions),
    commit it, and return its manifest. `extra` (JSON-able) is kept in the manifest for
    readers (vocabulary sizes, normalisation constants...). `stream`: commit shard by
    shard (readers follow the growing manifest), calling `on_commit` with each manifest
    written, on a thread of its own."""
    if stream:
        streamed = Stream(df, path, shards, extra, on_commit)
        streamed.begin()
        return streamed.run()
    if format not in FORMATS:
        raise SpecError(f"format={format!r}: use one of {', '.join(FORMATS)}")
    columns = columns_of(df.schema)
    parts = _parts(df, shards)
    fs = HadoopFs(df.sparkSession, qualified(path))
    write_id = _write_id()
    generation = f"{GENERATION_PREFIX}{write_id}"
    if format == "parquet":
        written = _parquet(parts, fs, generation)
    else:
        target = fs.resolved()  # viewfs:// (a mount table): the hdfs:// it stands for
        sink = _sink(df.sparkSession, target)
        writer = _partition_writer(columns, f"{target}/{generation}", sink)
        written = sorted(parts.rdd.mapPartitionsWithIndex(writer).collect())
    manifest = Manifest(format, columns, tuple(
        Shard(f"{generation}/{name}", rows, size, crc) for _, name, rows, size, crc in written),
        write_id=write_id, extra=dict(extra or {}))
    fs.commit(NAME, manifest.to_json())
    fs.keep_only(generation, {s.file.split("/", 1)[1] for s in manifest.shards})
    return manifest


def _parts(df: Any, shards: int | None) -> Any:
    """`df` in `shards` partitions (its own count: as it is, no shuffle)."""
    shards = shards or df.rdd.getNumPartitions()
    if shards < 1:
        raise SpecError(f"shards={shards}: must be at least 1")
    return df if shards == df.rdd.getNumPartitions() else df.repartition(shards)


def _write_id() -> str:
    return f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"


class Stream:
    """A streamed TFRecord write in two steps: `begin` commits an empty, open manifest
    (readers and `--data` may start on it), `run` writes it through Spark, shard by shard,
    and seals it. Built from the DataFrame without running a Spark job."""

    def __init__(self, df: Any, path: str, shards: int | None = None,
                 extra: dict | None = None,
                 on_commit: Callable[[Manifest], None] | None = None) -> None:
        self.parts = _parts(df, shards)
        self.fs = HadoopFs(df.sparkSession, qualified(path))
        start = Manifest("tfrecord", columns_of(df.schema), (), STREAMED, _write_id(),
                         dict(extra or {}), False)
        self.generation = f"{GENERATION_PREFIX}{start.write_id}"
        self.grower = _Grower(self.fs, start, self.generation, on_commit)
        self.failure = ""  # Spark's reason, set before the readers can see it

    @property
    def root(self) -> str:
        return self.fs.root

    def begin(self) -> Manifest:
        return self.grower.commit()

    def run(self) -> Manifest:
        """The Spark job writes and claims; a thread of this driver grows the manifest as
        claims appear; the end seals it (or writes Spark's reason into it and raises)."""
        target = self.fs.resolved()
        done = self.parts.sparkSession.sparkContext.accumulator((), _Tuples())
        self.grower.done = done
        writer = _partition_writer(self.grower.start.columns, f"{target}/{self.generation}",
                                   _sink(self.parts.sparkSession, target), done)
        stop = threading.Event()
        follower = threading.Thread(target=self.grower.follow, args=(stop,), daemon=True,
                                    name="tfyarn-manifest")
        follower.start()
        try:
            written = self.parts.rdd.mapPartitionsWithIndex(writer).collect()
        except Exception as exc:  # Spark's failure: said to the readers, then raised on
            stop.set()
            follower.join()
            self.failure = spark_reason(exc)
            self.grower.commit(error=self.failure)
            raise
        stop.set()
        follower.join()
        return self._seal(written)

    def _seal(self, written: list[tuple]) -> Manifest:
        self.grower.poll()
        named = {f"{self.generation}/{name}" for _, name, *_ in written}
        if {s.file for s in self.grower.shards} != named:
            raise SpecError(f"{self.root}: the shards Spark counted differ from what its "
                            "tasks returned; write it again")
        final = self.grower.commit(sealed=True)
        self.fs.keep_only(self.generation, {s.file.split("/", 1)[1] for s in final.shards})
        return final


def qualified(path: str) -> str:
    return path if "://" in path else "file://" + os.path.abspath(path)


def _parquet(parts: Any, fs: HadoopFs, generation: str) -> list[tuple]:
    """Spark's Parquet writer (its committer keeps one file per partition), then each
    file's rows from its footer: no second pass over the data."""
    target = f"{fs.root}/{generation}"
    parts.write.parquet(target)
    files = sorted(n for n in fs.list(generation) if n.endswith(".parquet"))
    return [(i, name, _footer_rows(parts.sparkSession, f"{target}/{name}"),
             fs.size(f"{generation}/{name}"), None) for i, name in enumerate(files)]


def _footer_rows(spark: Any, path: str) -> int:
    """A Parquet file's row count, as its footer says, read by Hadoop's Parquet reader in
    the driver's JVM (the footer only: the data is not read)."""
    jvm = spark._jvm
    conf = spark._jsc.hadoopConfiguration()
    source = jvm.org.apache.parquet.hadoop.util.HadoopInputFile.fromPath(
        jvm.org.apache.hadoop.fs.Path(path), conf)
    reader = jvm.org.apache.parquet.hadoop.ParquetFileReader.open(source)
    try:
        return int(reader.getRecordCount())
    finally:
        reader.close()


def _sink(spark: Any, root: str) -> tuple[str, str | None, str | None]:
    """Where and how executors write: ("file", None, None); ("webhdfs", http URL, user)
    for hdfs:// with simple auth and WebHDFS on (no Hadoop install needed); else
    ("hadoop", root, user or None under Kerberos): Hadoop's own client through libhdfs,
    for any filesystem."""
    parsed = urllib.parse.urlparse(root)
    if parsed.scheme == "file":
        return "file", None, None
    conf = spark._jsc.hadoopConfiguration()
    simple = (conf.get("hadoop.security.authentication") or "simple").lower() == "simple"
    user = spark.sparkContext.sparkUser() if simple else None
    web_on = (conf.get("dfs.webhdfs.enabled") or "true").lower() == "true"
    if parsed.scheme != "hdfs" or not simple or not web_on:
        return "hadoop", root, user
    port = (conf.get("dfs.namenode.http-address") or ":9870").rsplit(":", 1)[1]
    return "webhdfs", f"http://{parsed.hostname}:{port}", user


BATCH_ROWS = 4096  # rows encoded (column-wise) and written at once


def _partition_writer(columns: tuple[Column, ...], folder: str,
                      sink: tuple[str, str | None, str | None], done: Any = None
                      ) -> Callable[[int, Iterator[Any]], Iterator[tuple]]:
    """What each Spark task runs: its rows, a batch at a time, encoded column-wise into
    Examples in a file named by its partition and a fresh id (a retry never writes over
    another attempt's file); yields what it wrote, and adds it to `done` (a streamed
    write's accumulator)."""
    spec = [(c.name, c.kind, c.is_list) for c in columns]

    def run(index: int, rows: Iterator[Any]) -> Iterator[tuple]:
        name = f"part-{index:05d}-{uuid.uuid4().hex[:8]}.tfrecord"
        encode = ex.batch_encoder(spec)  # rows come in the schema's column order
        count, size, crc = 0, 0, 0
        with _open(sink, f"{folder}/{name}") as out:
            while batch := list(itertools.islice(rows, BATCH_ROWS)):
                datas = encode(list(zip(*batch, strict=True)))
                size, crc = _flush(out, [ex.record(d) for d in datas], size, crc)
                count += len(datas)
        if done is not None:  # counted by Spark once its task succeeded, not before
            done.add(((index, name, count, size, crc),))
        yield index, name, count, size, crc

    return run


class _Tuples:
    """An accumulator's param (duck-typed, so this module needs no Spark to import):
    tuples, concatenated in the order Spark merges them."""

    def zero(self, _value: tuple) -> tuple:
        return ()

    def addInPlace(self, a: tuple, b: tuple) -> tuple:  # noqa: N802 (Spark's name)
        return a + b


class _Grower:
    """A streamed write's manifest, grown by the shards Spark counted as its tasks
    succeeded, in that order (so a reader's share never changes); one per partition."""

    def __init__(self, fs: HadoopFs, start: Manifest, generation: str,
                 on_commit: Callable[[Manifest], None] | None) -> None:
        self.fs, self.start, self.generation, self.on_commit = fs, start, generation, on_commit
        self.shards: list[Shard] = []
        self.seen: set[int] = set()
        self.done: Any = None  # the Spark job's accumulator, once it runs
        self.error: BaseException | None = None

    def follow(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(POLL_S):
                self.poll()
        except Exception as exc:  # kept, raised by commit on the driver's thread
            self.error = exc

    def poll(self) -> None:
        before = len(self.shards)
        for index, name, rows, size, crc in self.done.value if self.done is not None else ():
            if index not in self.seen:
                self.shards.append(Shard(f"{self.generation}/{name}", rows, size, crc))
                self.seen.add(index)
        if len(self.shards) > before:
            self.commit()

    def commit(self, sealed: bool = False, error: str = "") -> Manifest:
        if self.error is not None and not error:
            raise self.error
        m = dataclasses.replace(self.start, shards=tuple(self.shards), sealed=sealed,
                                error=error)
        self.fs.commit(NAME, m.to_json())
        if self.on_commit is not None:
            self.on_commit(m)
        return m


def spark_reason(exc: BaseException) -> str:
    """Spark's failure in a line or two: its own first line (`Job aborted due to stage
    failure: ...`) and the task's Python error, where there was one."""
    text = str(exc)
    lines = [x.strip() for x in text.splitlines() if x.strip()]
    head = next((x for x in lines if "Job aborted" in x or "Exception:" in x), lines[0] if
                lines else type(exc).__name__)
    head = re.sub(r"^.*?(Job aborted due to stage failure:)", r"\1", head)
    errors = [x for x in lines if re.match(r"^[A-Za-z_.]*(Error|Exception): ", x)
              and not x.startswith(("py4j", "org.apache", "java."))]
    tail = errors[-1] if errors else ""
    return head[:400] + (f" ({tail[:300]})" if tail and tail not in head else "")


def _flush(out: Any, buffer: list[bytes], size: int, crc: int) -> tuple[int, int]:
    """Write the batch's records at once; the file's running size and CRC-32C."""
    chunk = b"".join(buffer)
    out.write(chunk)
    return size + len(chunk), ex.crc32c(chunk, crc)


def _open(sink: tuple[str, str | None, str | None], url: str) -> Any:
    kind, where, user = sink
    path = urllib.parse.urlparse(url).path
    if kind == "file":
        os.makedirs(os.path.dirname(path), exist_ok=True)
        return open(path, "wb")
    if kind == "hadoop":
        from tfyarn.hdfs import jni

        return jni.filesystem(url, user).open_output_stream(path)
    from hdfs import InsecureClient

    return InsecureClient(where, user=user).write(path, overwrite=False)


class HadoopFs:
    """The driver's view of the dataset dir through Spark's JVM (any Hadoop filesystem):
    list, size, delete, and the commit: a temp file renamed over the manifest at once."""

    def __init__(self, spark: Any, root: str) -> None:
        self.jvm = spark._jvm
        self.gateway = spark.sparkContext._gateway
        self.conf = spark._jsc.hadoopConfiguration()
        path = self.jvm.org.apache.hadoop.fs.Path(root.rstrip("/"))
        self.fs = path.getFileSystem(self.conf)
        self.root = str(self.fs.makeQualified(path)).rstrip("/")  # hdfs:///x: its NameNode

    def _path(self, rel: str) -> Any:
        """A path under the dataset dir ("" is the dir itself)."""
        return self.jvm.org.apache.hadoop.fs.Path(f"{self.root}/{rel}" if rel else self.root)

    def resolved(self) -> str:
        """The dataset dir (created) as its filesystem really serves it: a viewfs:// path
        resolved through the mount table; other paths as they are."""
        root = self.jvm.org.apache.hadoop.fs.Path(self.root)
        self.fs.mkdirs(root)
        return str(self.fs.resolvePath(root)).rstrip("/")

    def list(self, rel: str) -> list[str]:
        return [s.getPath().getName() for s in self.fs.listStatus(self._path(rel))]

    def remove(self) -> None:
        """The whole dataset dir."""
        self.fs.delete(self._path(""), True)

    def size(self, rel: str) -> int:
        return int(self.fs.getFileStatus(self._path(rel)).getLen())

    def commit(self, name: str, text: str) -> None:
        """Write `name` whole or not at all: a temp file, then rename with OVERWRITE."""
        tmp = self._path(f"{name}.tmp-{uuid.uuid4().hex[:8]}")
        out = self.fs.create(tmp, True)
        try:
            out.write(bytearray(text.encode()))
        finally:
            out.close()
        hadoop_fs = self.jvm.org.apache.hadoop.fs
        options = self.gateway.new_array(hadoop_fs.Options.Rename, 1)  # Rename... varargs
        options[0] = hadoop_fs.Options.Rename.OVERWRITE
        fc = hadoop_fs.FileContext.getFileContext(tmp.toUri(), self.conf)
        fc.rename(tmp, self._path(name), options)

    def keep_only(self, generation: str, files: set[str]) -> None:
        """After the commit: other generations, and files of this one no manifest names
        (a retried or speculative task's), are deleted."""
        for name in self.list(""):
            if name.startswith(GENERATION_PREFIX) and name != generation:
                self.fs.delete(self._path(name), True)
            elif name.startswith(f"{NAME}.tmp-"):
                self.fs.delete(self._path(name), False)
        for name in self.list(generation):
            if name not in files:
                self.fs.delete(self._path(f"{generation}/{name}"), True)

