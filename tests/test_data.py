"""tfyarn.data: Spark (pyspark 4.3.0, local[2]) to committed TFRecord/Parquet datasets,
and the readers tasks use. Real Spark, real TensorFlow, real files."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tfyarn.core.errors import SpecError
from tfyarn.data import example as ex
from tfyarn.data import read
from tfyarn.data.manifest import NAME, Shard, assign

pyspark = pytest.importorskip("pyspark")


@pytest.fixture(scope="module")
def spark():
    from pyspark.sql import SparkSession

    # the executors' python must import tfyarn (its writer runs there): this one
    os.environ["PYSPARK_PYTHON"] = sys.executable

    # local[2,4]: two cores, and a failed task is retried (up to 4 attempts), as on YARN
    session = (SparkSession.builder.master("local[2,4]").appName("tfyarn-tests")
               .config("spark.ui.enabled", "false")
               .config("spark.sql.shuffle.partitions", "4").getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


def tf_example(feats: dict) -> bytes:
    """The same features through TensorFlow's own encoder."""
    import tensorflow as tf

    def one(kind, value):
        values = [] if value is None else list(value) if isinstance(value, (list, tuple)) \
            else [value]
        if kind == ex.INT64:
            return tf.train.Feature(int64_list=tf.train.Int64List(value=[int(v) for v in values]))
        if kind == ex.FLOAT:
            return tf.train.Feature(float_list=tf.train.FloatList(value=values))
        return tf.train.Feature(bytes_list=tf.train.BytesList(
            value=[v.encode() if isinstance(v, str) else v for v in values]))

    return tf.train.Example(features=tf.train.Features(feature={
        k: one(*v) for k, v in feats.items() if v[1] is not None})).SerializeToString(
            deterministic=True)


@pytest.mark.parametrize("feats", [
    {"age": (ex.INT64, 39), "workclass": (ex.BYTES, "State-gov"), "w": (ex.FLOAT, 0.25)},
    {"neg": (ex.INT64, [-1, -(2**63), 2**63 - 1, 0]), "flag": (ex.INT64, True),
     "blob": (ex.BYTES, [b"\x00\xff", b"", "é"]), "fs": (ex.FLOAT, [1.5, -3.25e10, 0.0])},
    {"empty": (ex.FLOAT, []), "none": (ex.INT64, None), "ünï": (ex.BYTES, "x" * 300)},
])
def test_examples_are_byte_for_byte_tfs_and_parse_back(tmp_path, feats):
    import tensorflow as tf

    mine = ex.example(feats)
    assert mine == tf_example(feats)
    path = tmp_path / "x.tfrecord"
    path.write_bytes(b"".join(ex.records([mine, mine])))
    assert [r.numpy() for r in tf.data.TFRecordDataset(str(path))] == [mine, mine]
    with open(path, "rb") as f:
        assert list(ex.read_records(f)) == [mine, mine]
    parsed = ex.parse(mine)
    for name, (kind, value) in feats.items():
        if value is None:
            assert name not in parsed
            continue
        values = list(value) if isinstance(value, (list, tuple)) else [value]
        if kind == ex.BYTES:
            values = [v.encode() if isinstance(v, str) else v for v in values]
        got = parsed[name][1]
        assert got == pytest.approx(values) if kind == ex.FLOAT else got == \
            [int(v) for v in values] if kind == ex.INT64 else got == values


def test_the_batch_encoder_gives_the_reference_bytes():
    """The writer's column-wise batch encoder equals `example()` (itself TF's bytes) row
    by row, with repeated values (built once), nulls, 0.0 beside -0.0, and NaN."""
    import random

    rng = random.Random(11)
    columns = [("age", ex.INT64, False), ("w", ex.FLOAT, False), ("name", ex.BYTES, False),
               ("ids", ex.INT64, True), ("a", ex.BYTES, True), ("big", ex.INT64, False),
               ("ab", ex.FLOAT, True), ("flag", ex.INT64, False), ("z", ex.FLOAT, False)]
    rows = []
    for _ in range(300):
        rows.append([rng.choice([None, rng.randint(-2**63, 2**63 - 1), 7]),
                     rng.choice([rng.random() * 1e6, 0.5]),
                     rng.choice([None, "", "é" * rng.randint(0, 200), "same"]),
                     rng.choice([None, [rng.randint(-5, 10**12) for _ in range(3)]]),
                     [b"x" * rng.randint(0, 3)], rng.randint(0, 10**18), [0.5, -2.0],
                     rng.choice([True, False, 1]),
                     rng.choice([0.0, -0.0, float("nan"), float("inf"), None])])
    encoded = ex.batch_encoder(columns)([list(c) for c in zip(*rows, strict=True)])
    for row, got in zip(rows, encoded, strict=True):
        assert got == ex.example({n: (k, v) for (n, k, _), v in zip(columns, row, strict=True)})


def arrow_rows(n: int, seed: int = 11):
    """An Arrow batch of every column shape Spark hands the writer (narrow ints, bools,
    doubles, strings and binaries, large ones, lists of each, nulls, empty lists, multi-byte
    lengths), and its columns as the writer describes them."""
    import random

    import pyarrow as pa

    rng = random.Random(seed)
    pick = rng.choice
    data = {
        "age": (pa.int64(), [pick([None, rng.randint(-2**63, 2**63 - 1), 7]) for _ in range(n)]),
        "small": (pa.int8(), [pick([None, -128, 127, 0]) for _ in range(n)]),
        "flag": (pa.bool_(), [pick([None, True, False]) for _ in range(n)]),
        "w": (pa.float64(), [pick([rng.random() * 1e6, 0.0, -0.0, float("nan"), float("inf"),
                                   None]) for _ in range(n)]),
        "f32": (pa.float32(), [pick([1.5, None, -2.25]) for _ in range(n)]),
        "name": (pa.string(), [pick([None, "", "é" * rng.randint(0, 200), "same"])
                               for _ in range(n)]),
        "long_name": (pa.large_string(), [pick(["x" * 20000, "y", None]) for _ in range(n)]),
        "blob": (pa.binary(), [pick([b"\x00\xff", b"", None]) for _ in range(n)]),
        "ids": (pa.list_(pa.int64()), [pick([None, [], [rng.randint(-5, 10**12)
                                                     for _ in range(3)]]) for _ in range(n)]),
        "ab": (pa.list_(pa.float64()), [pick([[0.5, -2.0], [], None]) for _ in range(n)]),
        "tags": (pa.large_list(pa.string()), [pick([["p", "", "q" * 300], [], None])
                                              for _ in range(n)]),
    }
    kinds = {"age": ex.INT64, "small": ex.INT64, "flag": ex.INT64, "w": ex.FLOAT,
             "f32": ex.FLOAT, "name": ex.BYTES, "long_name": ex.BYTES, "blob": ex.BYTES,
             "ids": ex.INT64, "ab": ex.FLOAT, "tags": ex.BYTES}
    batch = pa.record_batch({k: pa.array(v, t) for k, (t, v) in data.items()})
    return batch, [(k, kinds[k], k in ("ids", "ab", "tags")) for k in data]


def reference_records(batch, columns) -> bytes:
    """`example()`'s bytes (TF's own, as the tests above show) for each row, framed."""
    rows = batch.to_pylist()
    return b"".join(ex.record(ex.example({n: (k, r[n]) for n, k, _ in columns}))
                    for r in rows)


def test_the_c_encoder_gives_the_reference_bytes_for_every_column_shape():
    """The writer's C encoder (built from source here) equals `example()` row by row,
    whole batches and slices of them (Arrow offsets), and carries the file's CRC over
    batches."""
    from tfyarn.data import columnar

    batch, columns = arrow_rows(400)
    encode = columnar.encoder(columns)
    whole, crc = encode(batch, 0)
    assert bytes(whole) == reference_records(batch, columns) and crc == ex.crc32c(whole)
    first, crc = encode(batch.slice(0, 123), 0)
    rest, crc = encode(batch.slice(123), crc)
    assert bytes(first) + bytes(rest) == bytes(whole) and crc == ex.crc32c(whole)
    empty, crc = encode(batch.slice(0, 0), 5)
    assert bytes(empty) == b"" and crc == 5


def test_a_null_inside_an_array_is_refused_by_column():
    import pyarrow as pa

    from tfyarn.data import columnar

    batch = pa.record_batch({"v": pa.array([[1, None]], pa.list_(pa.int64()))})
    with pytest.raises(SpecError, match="column 'v' has a null inside an array"):
        columnar.encoder([("v", ex.INT64, True)])(batch, 0)


def test_without_a_compiler_the_writer_says_so_and_encodes_the_same_bytes(
        tmp_path, monkeypatch, capsys):
    from tfyarn.core.errors import EnvironmentMissing
    from tfyarn.data import columnar
    from tfyarn.data import spark as tds

    batch, columns = arrow_rows(50, seed=3)
    monkeypatch.setenv("TFYARN_CACHE", str(tmp_path))  # nothing built here yet
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    columnar.library.cache_clear()
    try:
        with pytest.raises(EnvironmentMissing, match="needs a compiler"):
            columnar.encoder(columns)
        chunk, crc = tds._encoder(columns)(batch, 0)
    finally:
        columnar.library.cache_clear()
    assert "encoding TFRecords in Python instead (slower)" in capsys.readouterr().err
    assert bytes(chunk) == reference_records(batch, columns) and crc == ex.crc32c(chunk)


def tfrecord_dataset(folder: Path, columns, data: list[bytes], files: int = 2) -> None:
    """A committed TFRecord dataset of these records in `files` shards, written as the
    writer's tasks and driver write one (no Spark needed)."""
    from tfyarn.data.manifest import Column, Manifest

    folder.mkdir()
    shards, per = [], -(-len(data) // files)
    for i in range(files):
        chunk = b"".join(ex.record(d) for d in data[i * per:(i + 1) * per])
        (folder / f"part-{i}.tfrecord").write_bytes(chunk)
        shards.append(Shard(f"part-{i}.tfrecord", len(data[i * per:(i + 1) * per]),
                            len(chunk), ex.crc32c(chunk)))
    m = Manifest("tfrecord", tuple(Column(*c) for c in columns), tuple(shards))
    (folder / NAME).write_text(m.to_json())


def test_rows_and_batches_of_tfrecords_decode_in_c_as_the_python_parser_does(
        tmp_path, monkeypatch, capsys):
    """rows() and batches() read TFRecords through the C decoder: the same rows as the
    row-by-row Python parser they fall back to without a compiler, batches of `size`
    rows up to each file's end."""
    from tfyarn.data import columnar

    batch, columns = arrow_rows(300, seed=5)
    columns = [c for c in columns if c[0] != "blob"]  # not UTF-8: rows() keeps it bytes
    data = [ex.example({n: (k, r[n]) for n, k, _ in columns}) for r in batch.to_pylist()]
    tfrecord_dataset(tmp_path / "ds", columns, data)
    fast = list(read.rows(str(tmp_path / "ds"), whole=True))
    sizes = [len(b["age"]) for b in read.batches(str(tmp_path / "ds"), 64, whole=True)]
    assert sizes == [64, 64, 22] * 2
    monkeypatch.setenv("TFYARN_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("CC", str(tmp_path / "no-cc"))
    columnar.library.cache_clear()
    try:
        slow = list(read.rows(str(tmp_path / "ds"), whole=True))
    finally:
        columnar.library.cache_clear()
    assert "decoding TFRecords in Python instead (slower)" in capsys.readouterr().err
    assert len(fast) == 300 and json.dumps(fast) == json.dumps(slow)


def test_the_c_decoder_refuses_corrupt_cut_and_foreign_records(tmp_path):
    from tfyarn.data import columnar

    columns = [("id", ex.INT64, False), ("s", ex.BYTES, False)]
    data = [ex.example({"id": (ex.INT64, i), "s": (ex.BYTES, f"r{i}")}) for i in range(20)]
    tfrecord_dataset(tmp_path / "ds", columns, data, files=1)
    part = tmp_path / "ds" / "part-0.tfrecord"
    good = part.read_bytes()
    decode = columnar.decoder(columns)
    assert decode(good[:-3], 100)[0].num_rows == 19  # the cut record is left for later
    part.write_bytes(good[:-3])
    with pytest.raises(ValueError, match="truncated TFRecord"):
        list(read.rows(str(tmp_path / "ds"), whole=True))
    part.write_bytes(good[:40] + bytes([good[40] ^ 1]) + good[41:])
    with pytest.raises(ValueError, match="corrupt TFRecord data"):
        list(read.rows(str(tmp_path / "ds"), whole=True))
    with pytest.raises(SpecError, match="column 'id': a record at byte 0 holds another kind"):
        columnar.decoder([("id", ex.FLOAT, False)])(good, 100)


def test_spark_types_map_to_example_features(spark, tmp_path):
    from tfyarn.data import spark as tds

    df = spark.sql("select cast(1 as tinyint) a, cast(2 as smallint) b, 3 c, cast(4 as bigint) d, "
                   "true e, cast(0.5 as float) f, cast(0.25 as double) g, 'x' h, "
                   "cast('y' as binary) i, array(1, 2) j, array(1.5d) k, array('p', 'q') l")
    m = tds.write(df, str(tmp_path / "ds"))
    kinds = {c.name: (c.kind, c.is_list) for c in m.columns}
    assert kinds == {**{n: ("int64", False) for n in "abcde"}, "f": ("float", False),
                     "g": ("float", False), "h": ("bytes", False), "i": ("bytes", False),
                     "j": ("int64", True), "k": ("float", True), "l": ("bytes", True)}
    (row,) = list(read.rows(str(tmp_path / "ds")))
    assert row == {"a": 1, "b": 2, "c": 3, "d": 4, "e": 1, "f": 0.5, "g": 0.25, "h": "x",
                   "i": "y", "j": [1, 2], "k": [1.5], "l": ["p", "q"]}
    for bad in ("cast(1 as decimal(10,2))", "current_date()", "map('a', 1)"):
        with pytest.raises(SpecError, match=r"column 'x' is .*cast it first"):
            tds.write(spark.sql(f"select {bad} as x"), str(tmp_path / "bad"))
    assert not (tmp_path / "bad").exists()  # refused before anything was written


def rows_df(spark, sizes: list[int]):
    """A DataFrame whose partitions hold `sizes[i]` rows (ids unique across them)."""
    starts = [sum(sizes[:i]) for i in range(len(sizes))]
    rdd = spark.sparkContext.parallelize(range(len(sizes)), len(sizes)).flatMap(
        lambda i: [(starts[i] + j, float(j), f"p{i}") for j in range(sizes[i])])
    return spark.createDataFrame(rdd, "id long, x double, part string")


@pytest.mark.parametrize("fmt", ["tfrecord", "parquet"])
def test_a_dataset_is_committed_by_its_manifest_and_a_rerun_replaces_it(spark, tmp_path, fmt):
    from tfyarn.data import spark as tds

    path = tmp_path / "ds"
    first = tds.write(rows_df(spark, [30, 20, 10]), str(path), format=fmt)
    assert first.format == fmt and first.rows == 60 and len(first.shards) == 3
    assert {s.rows for s in first.shards} == {30, 20, 10}
    assert read.manifest(str(path)) == first
    second = tds.write(rows_df(spark, [5, 5]), str(path), format=fmt, shards=4)
    assert read.manifest(str(path)) == second and second.rows == 10 and len(second.shards) == 4
    generations = [p.name for p in path.iterdir() if p.name.startswith(".tfyarn-")]
    assert generations == [second.shards[0].file.split("/")[0]]  # the old one is gone
    assert sorted(r["id"] for r in read.rows(str(path))) == list(range(10))
    files = sorted(p.name for p in (path / generations[0]).iterdir()
                   if not p.name.endswith(".crc"))  # Hadoop's local checksums of kept files
    assert files == sorted(s.file.split("/")[1] for s in second.shards)


def test_a_killed_write_commits_nothing_and_a_rerun_succeeds(spark, tmp_path):
    """SIGKILL while the executors write: no manifest, so readers and --data refuse the
    directory; the same write run again commits it."""
    path, gate = tmp_path / "ds", tmp_path / "gate"
    script = f"""
import os, time
from pyspark.sql import SparkSession
spark = SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false").getOrCreate()
from tfyarn.data import spark as tds
def slow(i):
    for j in range(100):
        if j == 50:  # half-way: say so, then wait for a gate that never opens
            open({str(gate)!r} + str(i), "w").close()
            while True:
                time.sleep(0.05)
        yield (i * 100 + j, "x")
rdd = spark.sparkContext.parallelize(range(2), 2).flatMap(slow)
tds.write(spark.createDataFrame(rdd, "id long, s string"), {str(path)!r})
"""
    proc = subprocess.Popen([sys.executable, "-c", script], start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 180
    while not (Path(f"{gate}0").exists() or Path(f"{gate}1").exists()):
        assert proc.poll() is None and time.monotonic() < deadline, "the write never started"
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (path / NAME).exists()
    with pytest.raises(SpecError, match="no committed dataset"):
        read.manifest(str(path))
    out = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "standalone", "--local",
                          "--data", str(path), "-c", "true"], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 2 and out.stderr.startswith(f"Error: --data {path}: no committed")
    assert "Traceback" not in out.stderr and not out.stdout  # nothing was started
    from tfyarn.data import spark as tds

    m = tds.write(rows_df(spark, [7, 8]), str(path))
    assert m.rows == 15 and sorted(r["id"] for r in read.rows(str(path))) == list(range(15))


@contextlib.contextmanager
def arrow_batches(spark, rows: int):
    """The writer's tasks get their rows in Arrow batches of `rows` (Spark's setting), so
    a task that dies half-way has written some."""
    key = "spark.sql.execution.arrow.maxRecordsPerBatch"
    spark.conf.set(key, str(rows))
    try:
        yield
    finally:
        spark.conf.unset(key)


def test_a_retried_task_leaves_no_duplicate_and_no_missing_row(spark, tmp_path):
    """Each partition's first attempt dies half-way after its writer wrote rows; Spark
    retries it: the manifest names only the successful attempts' files."""
    from pyspark import TaskContext

    from tfyarn.data import spark as tds

    def flaky(i):
        for j in range(200):
            if j == 120 and TaskContext.get().attemptNumber() == 0:
                raise RuntimeError("injected: the first attempt dies half-way")
            yield (i * 1000 + j, f"r{j}")

    rdd = spark.sparkContext.parallelize(range(3), 3).flatMap(flaky)
    path = tmp_path / "ds"
    with arrow_batches(spark, 50):  # rows written before the failure: 100
        m = tds.write(spark.createDataFrame(rdd, "id long, s string"), str(path))
    ids = [r["id"] for r in read.rows(str(path))]
    assert len(ids) == len(set(ids)) == 600 == m.rows
    assert sorted(ids) == sorted(i * 1000 + j for i in range(3) for j in range(200))


def test_three_readers_of_seven_skewed_shards_balance_and_read_each_row_once(spark, tmp_path,
                                                                               monkeypatch):
    from tfyarn.data import spark as tds

    sizes = [1000, 50, 400, 10, 700, 300, 90]
    m = tds.write(rows_df(spark, sizes), str(tmp_path / "ds"))
    assert sorted(s.rows for s in m.shards) == sorted(sizes)
    seen = []
    for rank in range(3):
        monkeypatch.setenv("RANK", str(rank))
        monkeypatch.setenv("WORLD_SIZE", "3")
        seen.append([r["id"] for r in read.rows(str(tmp_path / "ds"))])
    counts = [len(s) for s in seen]
    assert max(counts) - min(counts) <= max(sizes), counts
    every = [i for s in seen for i in s]
    assert sorted(every) == list(range(sum(sizes)))  # every row, exactly once


def test_assign_bounds_the_imbalance_by_one_shard():
    import random

    rng = random.Random(7)
    for _ in range(200):
        shards = [Shard(f"f{i}", rng.choice([1, 10, 100, 1000]) * rng.randint(1, 9), 0)
                  for i in range(rng.randint(1, 30))]
        readers = rng.randint(1, len(shards))
        shares = assign(shards, readers)
        loads = [sum(s.rows for s in share) for share in shares]
        assert max(loads) - min(loads) <= max(s.rows for s in shards)
        assert sorted(s.file for share in shares for s in share) == sorted(s.file for s in shards)


def test_tf_config_readers_are_the_chief_then_the_workers():
    cluster = {"ps": ["a:1"], "chief": ["b:1"], "worker": ["c:1", "d:1"]}
    def who(kind, i):
        return read.reader(env={"TF_CONFIG": json.dumps(
            {"cluster": cluster, "task": {"type": kind, "index": i}})})
    assert [who("chief", 0), who("worker", 0), who("worker", 1)] == [(0, 3), (1, 3), (2, 3)]
    with pytest.raises(SpecError, match="ps:0 reads no data"):
        who("ps", 0)


def test_the_tfrecord_iterator_resumes_from_a_checkpoint(spark, tmp_path):
    """Read 3 batches, checkpoint the iterator, and a new one restored from it goes on
    with the 4th: what a restarted gang does with its checkpoint dir."""
    import tensorflow as tf

    from tfyarn.data import spark as tds

    tds.write(rows_df(spark, [64, 64]), str(tmp_path / "ds"))
    whole = [b["id"].numpy().tolist() for b in read.dataset(str(tmp_path / "ds"), 16)]
    it = iter(read.dataset(str(tmp_path / "ds"), 16))
    first = [next(it)["id"].numpy().tolist() for _ in range(3)]
    saved = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "ckpt" / "it"))
    again = iter(read.dataset(str(tmp_path / "ds"), 16))
    tf.train.Checkpoint(iterator=again).restore(saved)
    rest = [b["id"].numpy().tolist() for b in again]
    assert first + rest == whole and len(whole) == 8


def test_the_parquet_iterator_resumes_from_a_checkpoint(spark, tmp_path):
    """As TFRecord's: 3 batches read, the iterator checkpointed, a new pipeline restored
    from it goes on with the 4th, across row groups and files (unbatched too)."""
    import tensorflow as tf

    from tfyarn.data import spark as tds

    tds.write(rows_df(spark, [70, 58]), str(tmp_path / "pq"), format="parquet")
    path = str(tmp_path / "pq")
    whole = [b["id"].numpy().tolist() for b in read.dataset(path, 16)]
    it = iter(read.dataset(path, 16))
    first = [next(it)["id"].numpy().tolist() for _ in range(3)]
    saved = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "ckpt" / "it"))
    again = iter(read.dataset(path, 16))
    tf.train.Checkpoint(iterator=again).restore(saved)
    rest = [b["id"].numpy().tolist() for b in again]
    assert first + rest == whole and sorted(sum(whole, [])) == list(range(128))
    one = iter(read.dataset(path))  # unbatched: restored mid-piece
    head = [int(next(one)["id"]) for _ in range(21)]
    saved = tf.train.Checkpoint(iterator=one).save(str(tmp_path / "ckpt1" / "it"))
    more = iter(read.dataset(path))
    tf.train.Checkpoint(iterator=more).restore(saved)
    assert head + [int(r["id"]) for r in more] == sum(whole, [])


def test_parquet_reads_as_tf_data_and_rows(spark, tmp_path):
    from tfyarn.data import spark as tds

    df = spark.sql("select id, cast(id as double) / 2 x, if(id % 3 = 0, null, 'k') s "
                   "from range(0, 100, 1, 3)")
    tds.write(df, str(tmp_path / "pq"), format="parquet")
    ids = sorted(int(i) for b in read.dataset(str(tmp_path / "pq"), 32) for i in b["id"].numpy())
    assert ids == list(range(100))
    rows = {r["id"]: r for r in read.rows(str(tmp_path / "pq"))}
    assert rows[3]["s"] is None and rows[4] == {"id": 4, "x": 2.0, "s": "k"}


def test_tfrecord_on_the_sandboxes_hdfs(spark, sandbox, monkeypatch):
    """hdfs:// for real: executors write over WebHDFS, the driver commits through Spark's
    Hadoop client, a rerun replaces the dataset, and the gateway's reader (WebHDFS, no
    TensorFlow) reads every row once; Hadoop's own shell sees what the manifest names."""
    import uuid

    from tfyarn.data import spark as tds

    monkeypatch.setenv("HADOOP_CONF_DIR", sandbox["HADOOP_CONF_DIR"])
    monkeypatch.setenv("HADOOP_USER_NAME", os.environ.get("USER", "root"))
    from tfyarn.hdfs.siteconf import read_site

    core = read_site(os.path.join(sandbox["HADOOP_CONF_DIR"], "core-site.xml"))
    base = f"/tmp/tfyarn-data-{uuid.uuid4().hex[:8]}"
    url = core["fs.defaultFS"].rstrip("/") + base
    tds.write(rows_df(spark, [40, 60]), url)
    m = tds.write(rows_df(spark, [30, 30, 30]), url)
    assert read.manifest(url) == m and m.rows == 90
    assert sorted(r["id"] for r in read.rows(url)) == list(range(90))
    dfs = [f"{sandbox['HADOOP_HOME']}/bin/hdfs", "dfs"]
    env = {**os.environ, **sandbox, "HADOOP_ROOT_LOGGER": "ERROR,console"}
    listing = subprocess.run([*dfs, "-ls", "-R", base], env=env, capture_output=True, text=True,
                             check=True).stdout
    data = sorted(line.rsplit(base + "/", 1)[1] for line in listing.splitlines()
                  if line.endswith(".tfrecord"))
    assert data == sorted(s.file for s in m.shards)  # the first write's generation is gone
    conf = spark.sparkContext._jsc.hadoopConfiguration()  # a viewfs mount of this dir
    conf.set("fs.viewfs.mounttable.tfyarntest.link./mounted", url)
    viewed = tds.write(rows_df(spark, [10, 10]), "viewfs://tfyarntest/mounted/v")
    assert sorted(r["id"] for r in read.rows(f"{url}/v")) == list(range(20))
    assert viewed == read.manifest(f"{url}/v")
    pq = tds.write(rows_df(spark, [25, 35]), f"{url}-parquet", format="parquet")
    got = sorted(r["id"] for r in read.rows(f"{url}-parquet"))  # seeks over WebHDFS ranges
    assert pq.format == "parquet" and got == list(range(60))
    subprocess.run([*dfs, "-rm", "-r", "-f", base, f"{base}-parquet"], env=env,
                   capture_output=True)


def test_tfrecord_through_hadoops_own_client_where_webhdfs_cannot_serve(spark, sandbox,
                                                                         monkeypatch, tmp_path):
    """A cluster whose client config turns WebHDFS off (as on many secured clusters; the
    same path serves s3a://, gs:// and Kerberos): the executors write through Hadoop's own
    client, libhdfs in each Python worker, found from HADOOP_HOME alone; the gateway reads
    it back the same way; Hadoop's shell sees the files the manifest names."""
    import shutil
    import uuid

    from tfyarn.data import spark as tds
    from tfyarn.hdfs.siteconf import read_site

    conf_dir = tmp_path / "conf"  # the sandbox's client config, WebHDFS off
    shutil.copytree(sandbox["HADOOP_CONF_DIR"], conf_dir)
    site = (conf_dir / "hdfs-site.xml").read_text()
    (conf_dir / "hdfs-site.xml").write_text(site.replace("</configuration>", (
        "<property><name>dfs.webhdfs.enabled</name><value>false</value></property>"
        "</configuration>")))
    env = {"HADOOP_CONF_DIR": str(conf_dir), "HADOOP_HOME": sandbox["HADOOP_HOME"],
           "JAVA_HOME": sandbox["JAVA_HOME"]}
    for name, value in env.items():
        monkeypatch.setenv(name, value)  # the gateway's reader
        monkeypatch.setitem(spark.sparkContext.environment, name, value)  # executors
    for name in ("CLASSPATH", "ARROW_LIBHDFS_DIR"):  # found from HADOOP_HOME, as on a node
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HADOOP_USER_NAME", os.environ.get("USER", "root"))
    hadoop_conf = spark.sparkContext._jsc.hadoopConfiguration()  # the driver's view
    hadoop_conf.set("dfs.webhdfs.enabled", "false")
    environ = dict(os.environ)  # libhdfs's JVM starts in this process: it leaves no trace
    try:
        url = read_site(str(conf_dir / "core-site.xml"))["fs.defaultFS"].rstrip("/") + \
            f"/tmp/tfyarn-jni-{uuid.uuid4().hex[:8]}"
        assert tds._sink(spark, url)[0] == "hadoop"
        m = tds.write(rows_df(spark, [30, 45]), url)
    finally:
        hadoop_conf.unset("dfs.webhdfs.enabled")
    assert m.rows == 75 and read.manifest(url) == m
    assert sorted(r["id"] for r in read.rows(url)) == list(range(75))
    assert dict(os.environ) == environ
    dfs = [f"{sandbox['HADOOP_HOME']}/bin/hdfs", "dfs"]
    shell = {**os.environ, **sandbox, "HADOOP_ROOT_LOGGER": "ERROR,console"}
    listing = subprocess.run([*dfs, "-ls", "-R", url], env=shell, capture_output=True,
                             text=True, check=True).stdout
    assert sorted(line.rsplit("/", 1)[1] for line in listing.splitlines()
                  if line.endswith(".tfrecord")) == sorted(s.file.rsplit("/", 1)[1]
                                                           for s in m.shards)
    subprocess.run([*dfs, "-rm", "-r", "-f", url], env=shell, capture_output=True)


def test_data_with_fewer_shards_than_readers_is_refused_before_anything_starts(spark,
                                                                                tmp_path):
    from tfyarn.data import spark as tds

    tds.write(rows_df(spark, [5, 5]), str(tmp_path / "ds"))
    out = subprocess.run([sys.executable, "-m", "tfyarn.cli", "-t", "tensorflow-ps", "-wn",
                          "3", "--local", "--data", str(tmp_path / "ds"), "-c", "true"],
                         capture_output=True, text=True, timeout=120,
                         env={**os.environ, "TMPDIR": str(tmp_path)})
    assert out.returncode == 2 and not out.stdout, out.stderr
    assert out.stderr.strip() == (f"Error: --data {tmp_path / 'ds'}: 2 shards for 3 reading "
                                  "tasks (chief and workers, or ranks); rewrite it with "
                                  "shards=3 or more, or run fewer tasks")
    assert not list(tmp_path.glob("tfyarn-local_*"))  # no job dir: nothing was started


# ---------------------------------------------------------------- streamed datasets (#31)


def gated_df(spark, gates: Path, parts: int, size: int = 100):
    """`parts` partitions of `size` rows; partition i writes nothing until gate file i
    exists (the test opens them one by one)."""
    folder = str(gates)

    def rows(i):
        while not os.path.exists(f"{folder}/{i}"):
            time.sleep(0.02)  # a Spark task waiting for the test's gate file
        return [(i * size + j, f"p{i}") for j in range(size)]

    rdd = spark.sparkContext.parallelize(range(parts), parts).flatMap(rows)
    return spark.createDataFrame(rdd, "id long, part string")


class Writing:
    """A streamed write on a thread of this process (Spark serves several jobs at once)."""

    def __init__(self, spark, path: Path, df, **kw) -> None:
        import threading

        from tfyarn.data import spark as tds

        self.result, self.error, self.commits = None, None, []
        self.thread = threading.Thread(target=self._run, args=(tds, df, str(path), kw))
        self.thread.start()

    def _run(self, tds, df, path, kw) -> None:
        try:
            self.result = tds.write(df, path, stream=True, on_commit=self.commits.append, **kw)
        except Exception as exc:  # the test asserts on it
            self.error = exc

    def shards(self) -> int:
        """Shards in the newest manifest written (the first, empty, at the start)."""
        return len(self.commits[-1].shards) if self.commits else 0

    def join(self):
        self.thread.join(timeout=300)
        assert not self.thread.is_alive()
        return self.result


def open_gate(gates: Path, i: int) -> None:
    (gates / str(i)).touch()


def wait_for(cond, what: str, limit: float = 120) -> None:
    deadline = time.monotonic() + limit
    while not cond():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.05)  # polling another thread's progress


def test_a_streamed_dataset_is_read_while_it_is_written_each_row_once(spark, tmp_path,
                                                                       monkeypatch):
    """Readers start on the first committed shard while Spark still writes the others,
    follow the manifest until the seal, and between them read every row once."""
    gates = tmp_path / "gates"
    gates.mkdir()
    path = tmp_path / "ds"
    w = Writing(spark, path, gated_df(spark, gates, 4))
    open_gate(gates, 0)
    wait_for(lambda: w.shards() == 1, "the first shard committed")
    open_m = read.manifest(str(path))
    assert open_m.streamed and not open_m.sealed and len(open_m.shards) == 1
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "2")
    mine = read.rows(str(path))
    early = [next(mine)["id"] for _ in range(100)]  # partition 0: before the others exist
    assert not read.manifest(str(path)).sealed and sorted(early) == list(range(100))
    for i in (1, 2, 3):
        open_gate(gates, i)
    final = w.join()
    assert final.sealed and final.rows == 400 and w.commits[-1].sealed
    assert not w.commits[0].shards  # the empty, open manifest: readers may start at once
    first = early + [r["id"] for r in mine]
    monkeypatch.setenv("RANK", "1")
    second = [r["id"] for r in read.rows(str(path))]
    assert len(first) == len(second) == 200
    assert sorted(first + second) == list(range(400))  # every row, exactly once


def test_a_streamed_tf_data_share_resumes_from_a_checkpoint_mid_stream(spark, tmp_path):
    """A tf.data reader checkpointed while the write goes on, restored in a new pipeline
    after the seal, reads on from the next row: nothing twice, nothing lost."""
    import tensorflow as tf

    gates = tmp_path / "gates"
    gates.mkdir()
    path = tmp_path / "ds"
    w = Writing(spark, path, gated_df(spark, gates, 4))
    open_gate(gates, 0)
    open_gate(gates, 1)
    wait_for(lambda: w.shards() == 2, "two shards committed")
    it = iter(read.dataset(str(path), 30))
    first = [i for _ in range(5) for i in next(it)["id"].numpy().tolist()]  # 150 of 200
    saved = tf.train.Checkpoint(iterator=it).save(str(tmp_path / "ckpt" / "it"))
    open_gate(gates, 2)
    open_gate(gates, 3)
    assert w.join().sealed
    again = iter(read.dataset(str(path), 30))
    tf.train.Checkpoint(iterator=again).restore(saved)
    rest = [i for b in again for i in b["id"].numpy().tolist()]
    assert len(first) == 150 and sorted(first + rest) == list(range(400))


def test_a_failed_streamed_write_fails_its_readers_with_sparks_reason(spark, tmp_path):
    """The Spark job fails after a shard was committed: the write raises, and a reader
    following the manifest raises the task's own error instead of waiting forever."""
    from tfyarn.data import spark as tds

    gates = tmp_path / "gates"
    gates.mkdir()

    def rows(i):
        if i == 1:
            while not os.path.exists(f"{gates}/1"):
                time.sleep(0.02)  # a Spark task waiting for the test's gate file
            raise ValueError("injected: partition 1 cannot be parsed")
        return [(i * 10 + j,) for j in range(10)]

    df = spark.createDataFrame(spark.sparkContext.parallelize(range(2), 2).flatMap(rows),
                               "id long")
    path = tmp_path / "ds"
    w = Writing(spark, path, df)
    wait_for(lambda: w.shards() == 1, "partition 0 committed")
    mine = read.rows(str(path))
    assert [next(mine)["id"] for _ in range(10)] == list(range(10))
    open_gate(gates, 1)
    w.join()
    assert w.error is not None
    with pytest.raises(read.WriteFailed, match="its writer failed: .*ValueError: injected: "
                       "partition 1 cannot be parsed"):
        next(mine)
    assert "injected" in tds.spark_reason(w.error)


def test_a_retried_task_of_a_streamed_write_commits_once(spark, tmp_path):
    """The first attempt of each partition dies half-way (its writer sees its input end
    early and finishes its own loop, but Spark fails the task): only the retries' files
    are committed. No duplicate, no missing row, one file each."""
    from pyspark import TaskContext

    from tfyarn.data import spark as tds

    def flaky(i):
        for j in range(200):
            if j == 120 and TaskContext.get().attemptNumber() == 0:
                raise RuntimeError("injected: the first attempt dies half-way")
            yield (i * 1000 + j,)

    df = spark.createDataFrame(spark.sparkContext.parallelize(range(3), 3).flatMap(flaky),
                               "id long")
    with arrow_batches(spark, 50):
        m = tds.write(df, str(tmp_path / "ds"), stream=True)
    ids = [r["id"] for r in read.rows(str(tmp_path / "ds"))]
    assert m.sealed and len(m.shards) == 3 and len(ids) == len(set(ids)) == 600


def test_in_order_assignment_never_moves_a_shard_and_stays_balanced():
    import random

    from tfyarn.data.manifest import assign_in_order

    rng = random.Random(11)
    for _ in range(200):
        shards = [Shard(f"f{i}", rng.choice([1, 10, 100]) * rng.randint(1, 9), 0)
                  for i in range(rng.randint(1, 30))]
        readers = rng.randint(1, 5)
        whole = assign_in_order(shards, readers)
        for cut in range(len(shards)):
            prefix = assign_in_order(shards[:cut], readers)
            assert all(whole[r][:len(prefix[r])] == prefix[r] for r in range(readers))
        loads = [sum(s.rows for s in share) for share in whole]
        if len(shards) >= readers:
            assert max(loads) - min(loads) <= max(s.rows for s in shards)


def test_batches_are_numpy_columns_of_the_share_without_tensorflow(spark, tmp_path):
    """batches(): each column a numpy array, nulls their kind's default, every row once
    across the readers; in a process where TensorFlow cannot be imported."""
    from tfyarn.data import spark as tds

    df = spark.sql("select id, cast(id as double) / 2 x, if(id % 3 = 0, null, 'k') s, "
                   "array(id, id) l from range(0, 100, 1, 4)")
    for fmt in ("parquet", "tfrecord"):
        tds.write(df, str(tmp_path / fmt), format=fmt)
    code = """if True:
        import json, os, sys
        sys.modules["tensorflow"] = None  # any import of it fails
        from tfyarn.data import read
        out = {}
        for fmt in ("parquet", "tfrecord"):
            got = []
            for rank in range(2):
                os.environ.update(RANK=str(rank), WORLD_SIZE="2")  # a rank of 2
                for b in read.batches(sys.argv[1] + "/" + fmt, 16):
                    assert {type(v).__name__ for v in b.values()} == {"ndarray"}, b
                    got += [[int(i), float(x), str(s), [int(v) for v in l]]
                            for i, x, s, l in zip(b["id"], b["x"], b["s"], b["l"])]
            out[fmt] = sorted(got)
        print(json.dumps(out))
    """
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    got = json.loads(out.stdout)
    want = [[i, i / 2, "" if i % 3 == 0 else "k", [i, i]] for i in range(100)]
    assert got["parquet"] == want and got["tfrecord"] == want


def test_a_manifest_read_torn_by_its_replacement_is_read_again_and_a_bad_one_still_fails():
    """A streamed write replaces its manifest while tasks read it; a read cut short (as
    CI saw: the JSON cut at a line end among the shards) is read again, and the first
    whole one wins; a manifest that never parses is still its error, after
    MANIFEST_READS reads."""
    from tfyarn.data.manifest import STREAMED, Column, Manifest

    shards = tuple(Shard(f"gen/part-{i:05d}.tfrecord", 100 + i, 4096 + i, i) for i in range(40))
    whole = Manifest("tfrecord", (Column("age", "int64", False),), shards,
                     STREAMED, sealed=False).to_json()
    torn = whole[:whole.index("\n", len(whole) // 2) + 1]
    with pytest.raises(SpecError):  # what the worker in CI was given, once
        Manifest.from_json(torn)
    reads = iter([torn, torn, whole])
    assert read.first_whole(lambda: next(reads), "m") == Manifest.from_json(whole)
    assert next(reads, None) is None
    reads = iter([torn] * read.MANIFEST_READS)
    with pytest.raises(SpecError, match=r"^m: not a tfyarn dataset manifest \(Expecting"):
        read.first_whole(lambda: next(reads), "m")
    assert next(reads, None) is None
