"""`write(df, path)`: a Spark DataFrame to a committed TFRecord or Parquet dataset.

The executors' python (`PYSPARK_PYTHON`) must have tfyarn installed: the writer runs
there.

The rows never pass through the driver. Each Spark task writes its own partition:
- **TFRecord**: tf.train.Example bytes built without TensorFlow: Spark hands each task
  Arrow batches (`mapInArrow`), which `columnar` encodes in C, a column at a time (rows
  pickled to Python one by one ran at a quarter of Spark's own Parquet write). `file://`
  paths are written with plain file I/O; `hdfs://` paths over WebHDFS, so executors need
  no Hadoop install; any other Hadoop filesystem (s3a://, gs://, abfs://...), Kerberos
  clusters and clusters with WebHDFS off through Hadoop's own client (libhdfs,
  `tfyarn.hdfs.jni`), which needs a Hadoop install (HADOOP_HOME) on the executors.
- **Parquet**: Spark's own writer and committer.

Files go to a fresh hidden generation dir. The driver collects only each partition's
file name, row count, size and CRC. It then writes the manifest last, through Spark's
own Hadoop FileSystem (a local path: the OS's, `LocalFs`): a temp file, then one rename
that overwrites. A task retried or
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
Long because both formats, the commit and the streamed manifest share one write path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import re
import shutil
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any, Protocol

from tfyarn.core.errors import SpecError
from tfyarn.core.timing import SHARD_CLAIM_POLL_S
from tfyarn.data import columnar
from tfyarn.data import example as ex
from tfyarn.data.manifest import FORMATS, NAME, STREAMED, Column, Manifest, Shard
from tfyarn.hdfs import siteconf

GENERATION_PREFIX = ".tfyarn-"

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
    fs = filesystem(df.sparkSession, path)
    write_id = _write_id()
    generation = f"{GENERATION_PREFIX}{write_id}"
    if format == "parquet":
        written = _parquet(parts, fs, generation)
    else:
        target = fs.resolved()  # viewfs:// (a mount table): the hdfs:// it stands for
        sink = _sink(df.sparkSession, target)
        writer = _partition_writer(columns, f"{target}/{generation}", sink)
        written = _written(parts, writer)
    manifest = Manifest(format, columns, tuple(
        Shard(f"{generation}/{name}", rows, size, crc) for _, name, rows, size, crc in written),
        write_id=write_id, extra=dict(extra or {}))
    fs.commit(NAME, manifest.to_json())
    keep_only(fs, generation, {s.file.split("/", 1)[1] for s in manifest.shards})
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
        self.fs = filesystem(df.sparkSession, path)
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
        watcher = threading.Thread(target=self.grower.watch, args=(stop,), daemon=True,
                                   name="tfyarn-manifest")
        watcher.start()
        try:
            written = _written(self.parts, writer)
        except Exception as exc:  # Spark's failure: said to the readers, then raised on
            stop.set()
            watcher.join()
            self.failure = spark_reason(exc)
            self.grower.commit(error=self.failure)
            raise
        stop.set()
        watcher.join()
        return self._seal(written)

    def _seal(self, written: list[tuple]) -> Manifest:
        self.grower.poll()
        named = {f"{self.generation}/{name}" for _, name, *_ in written}
        if {s.file for s in self.grower.shards} != named:
            raise SpecError(f"{self.root}: the shards Spark counted differ from what its "
                            "tasks returned; write it again")
        final = self.grower.commit(sealed=True)
        keep_only(self.fs, self.generation, {s.file.split("/", 1)[1] for s in final.shards})
        return final


def qualified(path: str) -> str:
    return path if "://" in path else "file://" + os.path.abspath(path)


def _parquet(parts: Any, fs: Fs, generation: str) -> list[tuple]:
    """Spark's Parquet writer (its committer keeps one file per partition), then each
    file's rows from its footer: no second pass over the data."""
    parts.write.parquet(f"{fs.root}/{generation}")
    files = sorted(n for n in fs.list(generation) if n.endswith(".parquet"))
    return [(i, name, fs.parquet_rows(f"{generation}/{name}"),
             fs.size(f"{generation}/{name}"), None) for i, name in enumerate(files)]


def _sink(spark: Any, root: str) -> tuple[str, str | None, str | None]:
    """Where and how executors write: ("file", None, None); ("webhdfs", http URL, user)
    for hdfs:// with simple auth and WebHDFS on (no Hadoop install needed); else
    ("hadoop", root, user or None under Kerberos): Hadoop's own client through libhdfs,
    for any filesystem."""
    parsed = urllib.parse.urlparse(root)
    conf = spark._jsc.hadoopConfiguration()
    site = {k: conf.get(k) or "" for k in ("hadoop.security.authentication",
                                           "dfs.webhdfs.enabled") if conf.get(k)}
    # executors have no Kerberos login of their own; the WebHDFS URL is the NameNode's
    how = siteconf.route(root, site, spnego=False, web_schemes=("hdfs",))
    if how == "file":
        return "file", None, None
    user = spark.sparkContext.sparkUser() if siteconf.simple_auth(site) else None
    if how != "webhdfs":
        return "hadoop", root, user
    port = (conf.get("dfs.namenode.http-address") or ":9870").rsplit(":", 1)[1]
    return "webhdfs", f"http://{parsed.hostname}:{port}", user


WRITTEN = "index long, name string, rows long, size long, crc long"  # one row per task


def _partition_writer(columns: tuple[Column, ...], folder: str,
                      sink: tuple[str, str | None, str | None], done: Any = None
                      ) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """What each Spark task runs (`mapInArrow`): its rows as Arrow batches, each encoded
    column-wise into Examples (`columnar`) in a file named by its partition and a fresh
    id (a retry never writes over another attempt's file); yields what it wrote (one row
    of `WRITTEN`), and adds it to `done` (a streamed write's accumulator)."""
    spec = [(c.name, c.kind, c.is_list) for c in columns]

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        from pyspark import TaskContext

        index = TaskContext.get().partitionId()
        name = f"part-{index:05d}-{uuid.uuid4().hex[:8]}.tfrecord"
        encode = _encoder(spec)
        count, size, crc = 0, 0, 0
        with _open(sink, f"{folder}/{name}") as out:
            for batch in batches:
                chunk, crc = encode(batch, crc)
                out.write(chunk)
                size += len(chunk)
                count += batch.num_rows
        if done is not None:  # counted by Spark once its task succeeded, not before
            done.add(((index, name, count, size, crc),))
        yield pa.record_batch({"index": [index], "name": [name], "rows": [count],
                               "size": [size], "crc": [crc]})

    return run


def _written(parts: Any, writer: Callable[[Iterator[Any]], Iterator[Any]]) -> list[tuple]:
    """Run the writer on every partition; what each task wrote, by partition."""
    rows = parts.mapInArrow(writer, WRITTEN).collect()
    return sorted((r["index"], r["name"], r["rows"], r["size"], r["crc"]) for r in rows)


def _encoder(spec: list[tuple[str, str, bool]]) -> columnar.Encode:
    """The C encoder; where it cannot be built (no compiler on this executor), Python's
    (the same bytes, several times slower)."""
    native = columnar.unless_missing(columnar.encoder, spec, "encoding")
    if native is not None:
        return native
    rows = ex.batch_encoder(spec)

    def encode(batch: Any, crc: int) -> tuple[bytes, int]:
        chunk = b"".join(ex.record(d) for d in rows([batch.column(n).to_pylist()
                                                      for n, _, _ in spec]))
        return chunk, ex.crc32c(chunk, crc)

    return encode


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

    def __init__(self, fs: Fs, start: Manifest, generation: str,
                 on_commit: Callable[[Manifest], None] | None) -> None:
        self.fs, self.start, self.generation, self.on_commit = fs, start, generation, on_commit
        self.shards: list[Shard] = []
        self.seen: set[int] = set()
        self.done: Any = None  # the Spark job's accumulator, once it runs
        self.error: BaseException | None = None

    def watch(self, stop: threading.Event) -> None:
        try:
            while not stop.wait(SHARD_CLAIM_POLL_S):
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


class Fs(Protocol):
    """The driver's view of a dataset dir: where it is, what is in it, and the commit."""

    root: str

    def resolved(self) -> str: ...
    def list(self, rel: str) -> list[str]: ...
    def remove(self) -> None: ...
    def size(self, rel: str) -> int: ...
    def parquet_rows(self, rel: str) -> int: ...
    def commit(self, name: str, text: str) -> None: ...
    def delete(self, rel: str) -> None: ...


def keep_only(fs: Fs, generation: str, files: set[str]) -> None:
    """After the commit: other generations, stale temp manifests, and files of this
    generation no manifest names (a retried or speculative task's) are deleted."""
    for name in fs.list(""):
        if (name.startswith(GENERATION_PREFIX) and name != generation) or \
                name.startswith(f"{NAME}.tmp-"):
            fs.delete(name)
    for name in fs.list(generation):
        if name not in files:
            fs.delete(f"{generation}/{name}")


def filesystem(spark: Any, path: str) -> Fs:
    """`path`'s dataset dir: a local path (file://) through the OS, which commits in
    microseconds where Hadoop's local filesystem takes tens of milliseconds a rename;
    any other through Spark's Hadoop FileSystem."""
    root = qualified(path)
    if urllib.parse.urlparse(root).scheme == "file":
        return LocalFs(root)
    return HadoopFs(spark, root)


class LocalFs:
    """A file:// dataset dir, through the OS: the same commit (a temp file renamed over
    the manifest), without Hadoop's checksum sidecars (one left by an earlier Hadoop
    write of the manifest is removed: it would no longer match)."""

    def __init__(self, root: str) -> None:
        self.root = root.rstrip("/")
        self.dir = urllib.parse.urlparse(self.root).path

    def _path(self, rel: str) -> str:
        return os.path.join(self.dir, rel) if rel else self.dir

    def resolved(self) -> str:
        os.makedirs(self.dir, exist_ok=True)
        return self.root

    def list(self, rel: str) -> list[str]:
        return os.listdir(self._path(rel))

    def remove(self) -> None:
        self.delete("")

    def size(self, rel: str) -> int:
        return os.path.getsize(self._path(rel))

    def parquet_rows(self, rel: str) -> int:
        import pyarrow.parquet as pq

        return int(pq.read_metadata(self._path(rel)).num_rows)

    def commit(self, name: str, text: str) -> None:
        os.makedirs(self.dir, exist_ok=True)
        tmp = self._path(f"{name}.tmp-{uuid.uuid4().hex[:8]}")
        with open(tmp, "w") as f:
            f.write(text)
        os.replace(tmp, self._path(name))
        with contextlib.suppress(FileNotFoundError):  # a stale Hadoop checksum
            os.unlink(self._path(f".{name}.crc"))

    def delete(self, rel: str) -> None:
        """A file or a dir (with what is in it)."""
        path = self._path(rel)
        if os.path.isdir(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)


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

    def parquet_rows(self, rel: str) -> int:
        """A Parquet file's row count, as its footer says, read by Hadoop's Parquet reader
        in the driver's JVM (the footer only: the data is not read)."""
        parquet = self.jvm.org.apache.parquet.hadoop
        reader = parquet.ParquetFileReader.open(
            parquet.util.HadoopInputFile.fromPath(self._path(rel), self.conf))
        try:
            return int(reader.getRecordCount())
        finally:
            reader.close()

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

    def delete(self, rel: str) -> None:
        """A file or a dir (with what is in it)."""
        self.fs.delete(self._path(rel), True)

