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
Must not leave a dataset half-written under its name: the manifest is the commit point.
"""

from __future__ import annotations

import itertools
import os
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from tfyarn.core.errors import SpecError
from tfyarn.data import example as ex
from tfyarn.data.manifest import FORMATS, NAME, Column, Manifest, Shard

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
          extra: dict | None = None) -> Manifest:
    """Write `df` as a dataset at `path` (`hdfs://`, `file://` or a local path) in
    `shards` files (default: one per partition, no shuffle; another count repartitions),
    commit it, and return its manifest. `extra` (JSON-able) is kept in the manifest for
    readers (vocabulary sizes, normalisation constants...)."""
    if format not in FORMATS:
        raise SpecError(f"format={format!r}: use one of {', '.join(FORMATS)}")
    columns = columns_of(df.schema)
    shards = shards or df.rdd.getNumPartitions()
    if shards < 1:
        raise SpecError(f"shards={shards}: must be at least 1")
    fs = HadoopFs(df.sparkSession, _qualified(path))
    write_id = f"{time.strftime('%Y%m%d%H%M%S')}-{uuid.uuid4().hex[:8]}"
    generation = f"{GENERATION_PREFIX}{write_id}"
    parts = df if shards == df.rdd.getNumPartitions() else df.repartition(shards)
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


def _qualified(path: str) -> str:
    return path if "://" in path else "file://" + os.path.abspath(path)


def _parquet(parts: Any, fs: HadoopFs, generation: str) -> list[tuple]:
    """Spark's Parquet writer (its committer keeps one file per partition), then each
    file's rows counted from Spark's own read of what was committed."""
    from pyspark.sql import functions as F

    target = f"{fs.root}/{generation}"
    parts.write.parquet(target)
    spark = parts.sparkSession
    counts = dict(spark.read.parquet(target).groupBy(F.input_file_name().alias("f")).count()
                  .rdd.map(lambda r: (r["f"].rsplit("/", 1)[-1], r["count"])).collect())
    files = sorted(n for n in fs.list(generation) if n.endswith(".parquet"))
    return [(i, name, counts.get(name, 0), fs.size(f"{generation}/{name}"), None)
            for i, name in enumerate(files)]


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
                      sink: tuple[str, str | None, str | None]
                      ) -> Callable[[int, Iterator[Any]], Iterator[tuple]]:
    """What each Spark task runs: its rows, a batch at a time, encoded column-wise into
    Examples in a file named by its partition and a fresh id (a retry never writes over
    another attempt's file); yields what it wrote."""
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
        yield index, name, count, size, crc

    return run


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

