"""What a task reads of a committed dataset: its share, as tf.data or as plain rows.

Each reading task gets a disjoint set of whole shards, balanced by the manifest's row
counts (`manifest.assign`), so every row is read exactly once per epoch across the job.
Who reads:
- allreduce jobs (pytorch, tensorflow-mpi): every rank (RANK of WORLD_SIZE);
- TF jobs: the chief and the workers, in that order (ps read nothing);
- with a `tf.distribute.InputContext` (ParameterServerStrategy's per-worker datasets):
  its pipeline id of its pipeline count.
A TFRecord dataset is a `TFRecordDataset`, whose iterator state a `tf.train.Checkpoint`
saves (a restarted job resumes where it stopped). Parquet is read through pyarrow, one
row group at a time, never a whole file in memory, in numbered pieces: checkpointable too.
A streamed dataset (one still being written, `write(..., stream=True)`) is followed:
a reader starts on its share of the shards committed so far and waits for the rest until
the writer seals the manifest; the writer's failure is raised in every reader. Its
tf.data form stays checkpointable: the k-th file of a share never changes.
Must not read a shard another task reads, nor skip one: the split is the manifest's.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Mapping
from typing import IO, Any

from tfyarn.core.errors import SpecError, TfYarnError
from tfyarn.core.tfconfig import Task, parse_tf_config
from tfyarn.core.timing import STREAM_POLL_S, STREAM_STALL_S
from tfyarn.data import example as ex
from tfyarn.data.manifest import NAME, Manifest, Shard, split

DATA_VAR = "TFYARN_DATA"  # the job's --data paths, comma-separated
SCHEMA_VAR = "TFYARN_DATA_SCHEMA"  # the first one's columns (JSON)
FOLLOW_VAR = "TFYARN_DATA_FOLLOW_S"  # a streamed dataset that grows not for this long fails
CHUNK_BYTES = 8 << 20  # TFRecord bytes the C decoder is given at once
ROWS_AT_ONCE = 4096  # rows() decodes this many at a time
MANIFEST_READS = 4  # reads of a manifest before one that does not parse is its error


class WriteFailed(TfYarnError):
    """The writer of a streamed dataset failed (its reason), or stopped writing."""


def data_paths(env: Mapping[str, str] | None = None) -> list[str]:
    raw = (os.environ if env is None else env).get(DATA_VAR, "")
    return [p for p in raw.split(",") if p]


def reader(input_context: Any = None, env: Mapping[str, str] | None = None) -> tuple[int, int]:
    """This task's reader index and the number of readers."""
    e = os.environ if env is None else env
    if input_context is not None:
        return int(input_context.input_pipeline_id), int(input_context.num_input_pipelines)
    if e.get("RANK") and e.get("WORLD_SIZE"):
        return int(e["RANK"]), int(e["WORLD_SIZE"])
    cluster, me = parse_tf_config(e.get("TF_CONFIG"))
    if me is not None:
        readers = [Task(kind, i) for kind in ("chief", "worker")
                   for i in range(len(cluster.get(kind, [])))]
        if me not in readers:
            raise SpecError(f"{me} reads no data (only the chief and the workers do); call "
                            "tfyarn.data.dataset in them")
        return readers.index(me), len(readers)
    return 0, 1


@contextlib.contextmanager
def open_file(url: str, login: Any = None) -> Iterator[IO[bytes]]:
    """A file of a dataset: local; through TensorFlow's filesystem once TF is loaded with
    one for the scheme (tfyarn's hdfs:// plugin, in tasks); hdfs:// and viewfs:// over
    WebHDFS with simple auth, or under Kerberos where this process has a login of its own
    (a gateway: the ticket cache, or `login`, a `spnego.Negotiator`); else (s3a://,
    gs://..., a YARN container's delegation tokens, WebHDFS off) through Hadoop's own
    client."""
    from tfyarn.core.settings import Settings
    from tfyarn.hdfs import siteconf

    settings = Settings.from_environ()
    conf_dir = settings.conf_dir()
    site: dict[str, str] = {}
    for name in ("core-site.xml", "hdfs-site.xml") if conf_dir and "://" in url else ():
        site.update(siteconf.read_site(os.path.join(conf_dir, name)))
    # a gateway signs in itself (ticket cache, keytab); a container has tokens only
    how = siteconf.route(url, site, spnego=settings.token_file is None,
                         tf_schemes=_tf_schemes() if "://" in url else ())
    if how == "file":
        with open(url.removeprefix("file://"), "rb") as f:
            yield f
    elif how == "tensorflow":
        import tensorflow as tf

        with tf.io.gfile.GFile(url, "rb") as f:
            yield f
    elif how == "webhdfs":
        from tfyarn.hdfs import webhdfs

        with webhdfs.open_range(url, conf_dir, settings.user, login=login) as f:
            yield f
    else:
        from tfyarn.hdfs import jni

        fs = jni.filesystem(url, settings.user if siteconf.simple_auth(site) else None)
        with fs.open_input_file(urllib.parse.urlparse(url).path) as f:
            yield f


def _tf_schemes() -> tuple[str, ...]:
    """The schemes TensorFlow reads, where it is loaded (in a task: tfyarn's hdfs://
    plugin); none where it is not (loading it is not this module's to do)."""
    if sys.modules.get("tensorflow") is None:  # not loaded (or barred: None)
        return ()
    import tensorflow as tf

    return tuple(tf.io.gfile.get_registered_schemes())


def manifest(path: str, login: Any = None) -> Manifest:
    """The committed manifest of the dataset at `path`; none means not a dataset (yet).
    `login`: the client's Kerberos login (a `spnego.Negotiator`), where it has a keytab."""
    where = f"{path.rstrip('/')}/{NAME}"

    def read() -> str:
        try:
            with open_file(where, login) as f:
                return _to_eof(f).decode()
        except (FileNotFoundError, OSError) as exc:
            raise SpecError(f"{path}: no committed dataset ({NAME} missing: {exc}); write "
                            "it with tfyarn.data.spark.write (a write that died commits "
                            "nothing)") from None

    return first_whole(read, where)


def first_whole(read: Callable[[], str], where: str, tries: int = MANIFEST_READS) -> Manifest:
    """The manifest of the first of `tries` reads that parses. A streamed write replaces
    the manifest while tasks follow it, and HDFS served one task a read that spanned the
    replacement torn (CI: a JSON cut at a line end mid-shard, a worker failed at start);
    a committed manifest always parses, so a read that does not is read again, and one
    that never parses is the error it says."""
    for _ in range(tries - 1):
        text = read()
        with contextlib.suppress(SpecError):  # torn: read it again
            return Manifest.from_json(text, where)
    return Manifest.from_json(read(), where)


def _to_eof(f: IO[bytes]) -> bytes:
    """Everything up to EOF through one open handle: never a separate stat's length (a
    TF GFile's read() asks the path's length apart from the handle it reads)."""
    parts = []
    while chunk := f.read(1 << 20):
        parts.append(chunk if isinstance(chunk, bytes) else chunk.encode())
    return b"".join(parts)


class StreamShare:
    """A reader's share of a streamed dataset, as it grows: `nth(k)` waits until the
    share's k-th shard is committed (None once the manifest is sealed without it)."""

    def __init__(self, path: str, index: int, readers: int,
                 env: Mapping[str, str] | None = None) -> None:
        self.path, self.index, self.readers = path, index, readers
        self.limit = float((os.environ if env is None else env).get(FOLLOW_VAR, STREAM_STALL_S))
        self.known: list[Shard] = []
        self.sealed = False

    def nth(self, k: int) -> Shard | None:
        grown = time.monotonic()
        while k >= len(self.known) and not self.sealed:
            before = len(self.known)
            self._look()
            if len(self.known) > before:
                grown = time.monotonic()
            elif time.monotonic() - grown > self.limit:
                raise WriteFailed(f"{self.path}: the streamed dataset has not grown for "
                                  f"{self.limit:.0f} s and is not sealed: its writer stopped "
                                  f"(set {FOLLOW_VAR} to wait longer)")
            elif k >= len(self.known) and not self.sealed:
                time.sleep(STREAM_POLL_S)  # polling the writer's manifest, not ordering events
        return self.known[k] if k < len(self.known) else None

    def _look(self) -> None:
        m = manifest(self.path)
        if m.error:
            raise WriteFailed(f"{self.path}: its writer failed: {m.error}")
        self.known = split(m, self.readers)[self.index]
        self.sealed = m.sealed

    def __iter__(self) -> Iterator[Shard]:
        k = 0
        while (shard := self.nth(k)) is not None:
            yield shard
            k += 1


def _files(path: str, me: tuple[int, int]) -> tuple[Manifest, Any]:
    """The files of reader `me` (index, readers): a list, or (streamed) a StreamShare of
    shards."""
    m = manifest(path)
    index, readers = me
    if m.streamed:
        return m, StreamShare(path, index, readers)
    if len(m.shards) < readers:
        raise SpecError(f"{path} has {len(m.shards)} shards for {readers} readers; rewrite it "
                        f"with shards={readers} or more")
    return m, [f"{path.rstrip('/')}/{s.file}" for s in split(m, readers)[index]]


def dataset(path: str | None = None, batch_size: int | None = None, *,
            input_context: Any = None) -> Any:
    """This task's share as a `tf.data.Dataset` of feature dicts (batched when
    `batch_size`): `path` defaults to the job's first `--data`."""
    import tensorflow as tf

    path = path or _first_path()
    m, files = _files(path, reader(input_context))
    if m.format == "parquet":
        return _parquet_dataset(tf, m, files, batch_size)
    spec = {c.name: _feature_spec(tf, c) for c in m.columns}
    if not isinstance(files, list):  # streamed: in the caller's thread, nothing ahead
        ds = _streamed(tf, path, files)
        return ds.batch(batch_size).map(lambda b: tf.io.parse_example(b, spec)) \
            if batch_size else ds.map(lambda r: tf.io.parse_single_example(r, spec))
    ds = tf.data.TFRecordDataset(files)
    if batch_size:
        ds = ds.batch(batch_size).map(lambda b: tf.io.parse_example(b, spec),
                                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    else:
        ds = ds.map(lambda r: tf.io.parse_single_example(r, spec),
                    num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return ds.prefetch(tf.data.AUTOTUNE)


def _streamed(tf: Any, path: str, share: StreamShare) -> Any:
    """The records of a growing share: file k of the share (waited for) is a pure function
    of k, so the pipeline's state is the file index and the offset in it, which a
    `tf.train.Checkpoint` saves (the wait is external state it may ignore). Nothing reads
    ahead on a thread of its own (no prefetch, no parallel map): a checkpoint taken
    while a read-ahead waited for the next shard would wait with it."""
    root = path.rstrip("/")

    def nth(k: Any) -> bytes:
        shard = share.nth(int(k))
        return b"" if shard is None else f"{root}/{shard.file}".encode()

    names = tf.data.Dataset.range(1 << 62).map(
        lambda k: tf.py_function(nth, [k], tf.string)).take_while(lambda f: f != "")
    options = tf.data.Options()
    options.experimental_external_state_policy = \
        tf.data.experimental.ExternalStatePolicy.IGNORE
    options.experimental_optimization.inject_prefetch = False  # tf.data's own read-ahead
    options.experimental_optimization.map_parallelization = False
    options.experimental_warm_start = False
    return names.flat_map(tf.data.TFRecordDataset).with_options(options)


def _feature_spec(tf: Any, c: Any) -> Any:
    dtype = {ex.INT64: tf.int64, ex.FLOAT: tf.float32, ex.BYTES: tf.string}[c.kind]
    if c.is_list:
        return tf.io.VarLenFeature(dtype)
    default = {ex.INT64: 0, ex.FLOAT: 0.0, ex.BYTES: b""}[c.kind]
    return tf.io.FixedLenFeature([], dtype, default_value=default)


def _parquet_dataset(tf: Any, m: Manifest, files: list[str], batch_size: int | None) -> Any:
    """Parquet through pyarrow, in pieces of `batch_size` rows (1024 when unbatched), a
    row group at a time. Piece k is a pure function of k (its file, row group and first
    row, from the footers), so the pipeline's state is k and the rows left of a piece,
    which a `tf.train.Checkpoint` saves, as it does a TFRecord dataset's."""
    scalars = [c for c in m.columns if not c.is_list]
    names = [c.name for c in scalars]
    types = {ex.INT64: tf.int64, ex.FLOAT: tf.float32, ex.BYTES: tf.string}
    pieces = _Pieces(files, batch_size or 1024, names)

    def piece(k: Any) -> list[Any]:
        part = pieces.read(int(k))
        return [part[n] for n in names]

    def named(*cols: Any) -> dict[str, Any]:
        return {n: tf.ensure_shape(col, [None]) for n, col in zip(names, cols, strict=True)}

    options = tf.data.Options()  # the footers' plan is the state; the reads are pure
    options.experimental_external_state_policy = \
        tf.data.experimental.ExternalStatePolicy.IGNORE
    ds = tf.data.Dataset.range(len(pieces.plan)).map(
        lambda k: tf.py_function(piece, [k], [types[c.kind] for c in scalars])).map(named)
    ds = ds.with_options(options)
    return ds if batch_size else ds.unbatch()


class _Pieces:
    """A Parquet share in `size`-row pieces, numbered from the files' footers: piece k
    (`plan[k]`: file index, row group, first row) as numpy columns, a null its kind's
    default. Pieces are read in order, so the row group read last is kept for the next."""

    def __init__(self, files: list[str], size: int, names: list[str]) -> None:
        import pyarrow.parquet as pq

        self.files, self.size, self.names = files, size, names
        self.plan: list[tuple[int, int, int]] = []
        for f, url in enumerate(files):
            with open_file(url) as fh:
                meta = pq.ParquetFile(fh).metadata
            for group in range(meta.num_row_groups):
                rows = meta.row_group(group).num_rows
                self.plan += [(f, group, start) for start in range(0, rows, size)]
        self.held: tuple[tuple[int, int] | None, Any] = (None, None)

    def read(self, k: int) -> dict[str, Any]:
        import pyarrow.parquet as pq

        f, group, start = self.plan[k]
        if self.held[0] != (f, group):
            with open_file(self.files[f]) as fh:
                table = pq.ParquetFile(fh).read_row_group(group, columns=self.names)
            self.held = ((f, group), table)
        part = self.held[1].slice(start, self.size)
        return {n: _filled(part.column(n)).to_numpy() for n in self.names}


def _filled(col: Any) -> Any:
    """A column with each null its kind's default, as in TFRecord."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if not col.null_count:
        return col
    kind = col.type
    default = "" if pa.types.is_string(kind) else b"" if pa.types.is_binary(kind) \
        else 0.0 if pa.types.is_floating(kind) else [] if pa.types.is_list(kind) else 0
    return pc.fill_null(col, pa.scalar(default, type=kind))


def rows(path: str | None = None, whole: bool = False) -> Iterator[dict[str, Any]]:
    """This task's share (`whole`: every row, e.g. for evaluation) as plain dicts (no
    TensorFlow: for PyTorch and Horovod jobs too); a list column is a list, a scalar a
    value (None where the row had a null)."""
    path = path or _first_path()
    m, files = _files(path, (0, 1) if whole else reader())
    files = _urls(path, files)
    if m.format == "parquet":
        import pyarrow.parquet as pq

        for url in files:
            with open_file(url) as f:
                for batch in pq.ParquetFile(f).iter_batches():
                    yield from batch.to_pylist()
        return
    decode = _decoder(m.columns)
    if decode is not None:
        for batch in _decoded(files, decode, ROWS_AT_ONCE):
            yield from batch.to_pylist()
        return
    for url in files:
        with open_file(url) as f:
            for data in ex.read_records(f):
                parsed = ex.parse(data)
                yield {c.name: _plain(c, parsed.get(c.name)) for c in m.columns}


def batches(path: str | None = None, size: int = 1024, whole: bool = False
            ) -> Iterator[dict[str, Any]]:
    """This task's share (`whole`: every row) as column batches of up to `size` rows, no
    TensorFlow: each column a numpy array (`torch.from_numpy` takes the numeric ones), a
    null its kind's default as in `dataset()`. Both formats are decoded in C: Parquet by
    pyarrow, TFRecord by tfyarn's decoder (`columnar`; row by row in Python where no C
    compiler is found). Batches end at a file's end or a Parquet row group's."""
    path = path or _first_path()
    if size < 1:
        raise SpecError(f"batches(size={size}): give 1 or more rows per batch")
    m, files = _files(path, (0, 1) if whole else reader())
    names = [c.name for c in m.columns]
    if m.format == "parquet":
        pieces = _Pieces(files, size, names)
        for k in range(len(pieces.plan)):
            yield pieces.read(k)
        return
    decode = _decoder(m.columns)
    if decode is not None:
        import pyarrow as pa

        for batch in _decoded(_urls(path, files), decode, size):
            table = pa.Table.from_batches([batch])  # converted as a Parquet piece is
            yield {n: _filled(table.column(n)).to_numpy() for n in names}
        return
    chunk: list[dict[str, Any]] = []
    for row in rows(path, whole):
        chunk.append(row)
        if len(chunk) == size:
            yield _stacked(m.columns, chunk)
            chunk = []
    if chunk:
        yield _stacked(m.columns, chunk)


def _urls(path: str, files: Any) -> Any:
    """A share's files as URLs: a list is; a streamed share's shards, as they come."""
    return files if isinstance(files, list) else (
        f"{path.rstrip('/')}/{s.file}" for s in files)


def _decoder(columns: Any) -> Any:
    """The C TFRecord decoder for these columns; None where pyarrow is not installed, or
    no C compiler is found (said on stderr): the Python parser then reads, row by row."""
    try:
        import pyarrow  # noqa: F401  (the decoder's batches are Arrow's)
    except ImportError:
        return None
    from tfyarn.data import columnar

    return columnar.unless_missing(columnar.decoder,
                                   [(c.name, c.kind, c.is_list) for c in columns], "decoding")


def _decoded(urls: Any, decode: Any, size: int) -> Iterator[Any]:
    """The files' records as Arrow batches of `size` rows (fewer at a file's end)."""
    for url in urls:
        with open_file(url) as f:
            yield from _file_batches(f, url, decode, size)


def _file_batches(f: IO[bytes], url: str, decode: Any, size: int) -> Iterator[Any]:
    buf, at, eof = b"", 0, False
    while True:
        batch, used = decode(memoryview(buf)[at:], size)
        if batch.num_rows and (batch.num_rows == size or eof):
            yield batch
            at += used
            continue
        if eof:
            if at < len(buf):
                raise ValueError(f"{url}: truncated TFRecord at byte {at}")
            return
        more = f.read(CHUNK_BYTES)
        eof = not more
        buf, at = buf[at:] + more, 0


def _stacked(columns: Any, chunk: list[dict[str, Any]]) -> dict[str, Any]:
    """Rows as numpy columns: a scalar's null its kind's default, a list column an object
    array of arrays."""
    import numpy as np

    out = {}
    for c in columns:
        values = [r[c.name] for r in chunk]
        if c.is_list:
            out[c.name] = np.empty(len(values), dtype=object)
            out[c.name][:] = [np.array(v) for v in values]
        else:
            default = {ex.INT64: 0, ex.FLOAT: 0.0, ex.BYTES: ""}[c.kind]
            out[c.name] = np.array([default if v is None else v for v in values])
    return out


def _plain(c: Any, parsed: tuple[str, list] | None) -> Any:
    if parsed is None:
        return [] if c.is_list else None
    values = [v.decode() if isinstance(v, bytes) and c.kind == ex.BYTES else v
              for v in parsed[1]]
    return values if c.is_list else (values[0] if values else None)


def _first_path() -> str:
    paths = data_paths()
    if not paths:
        raise SpecError(f"no dataset given: pass a path, or submit with --data PATH "
                        f"({DATA_VAR} is not set)")
    return paths[0]
