"""UCI Adult CSV -> Spark DataFrame -> committed TFRecord datasets (train and test), the
flow EMR's data scientists use: prepare with Spark, keep it on HDFS, train with el_submit.

    python prepare.py --out hdfs:///user/$USER/census --master yarn    # Spark on YARN
    python prepare.py --out ./census-data                              # local[2]

The rows never pass through this process: the executors parse the CSV and write the
shards. Spark also learns the encoder (each categorical column's vocabulary and the
numeric columns' mean and std, over the whole training set) and keeps it in the training
dataset's manifest. Then every worker encodes alike, whatever share it reads. Train with:

    el_submit -t tensorflow-worker -wn 2 -f ../census/census_single.py \
      --data OUT/train --data OUT/test -c python census_single.py
"""

from __future__ import annotations

import argparse
import gzip
import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "census"))  # the model's column names

from census_single import (  # noqa: E402
    AGE_BOUNDARIES,
    CATEGORICAL,
    COLUMNS,
    NUMERIC,
)

NUMBERS = ("age", "fnlwgt", "education_num", "capital_gain", "capital_loss", "hours_per_week")


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", required=True, help="where train/ and test/ go (hdfs:// or a dir)")
    p.add_argument("--master", default="local[2]", help="Spark master: local[2] or yarn")
    p.add_argument("--data-dir", default=os.path.join(HERE, "..", "census"),
                   help="dir with adult.data(.gz) and adult.test(.gz); hdfs:// too")
    p.add_argument("--shards", type=int, default=4, help="files per dataset (>= readers)")
    return p.parse_args(argv)


def csv_source(data_dir: str, name: str, scratch: str) -> str:
    """Spark reads CSV, not gzip in a name without .gz: the shipped .gz as a .csv.gz."""
    if "://" in data_dir:
        return f"{data_dir.rstrip('/')}/{name}"
    plain, packed = os.path.join(data_dir, name), os.path.join(data_dir, f"{name}.gz")
    if os.path.exists(plain):
        return "file://" + os.path.abspath(plain)
    target = os.path.join(scratch, f"{name}.csv.gz")
    with gzip.open(packed, "rb") as src, gzip.open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return "file://" + target


def frame(spark, source: str):
    """The typed census rows: fields trimmed, adult.test's odd first line dropped."""
    from pyspark.sql import functions as F

    schema = ", ".join(f"{c} string" for c in COLUMNS)  # adult.test's first line is odd
    raw = spark.read.csv(source, schema=schema, header=False, ignoreLeadingWhiteSpace=True,
                         ignoreTrailingWhiteSpace=True)
    df = raw.where(F.col("income_bracket").isNotNull())
    for c in NUMBERS:
        df = df.withColumn(c, F.col(c).try_cast("long"))  # malformed: null, dropped below
    bucket = sum((F.col("age") >= b).cast("int") for b in AGE_BOUNDARIES)
    return df.withColumn("age_bucket", bucket.cast("string")).dropna(subset=list(NUMBERS))


def encoder_state(train) -> dict:
    """What census_single.Encoder learns from rows, computed by Spark over all of them."""
    from pyspark.sql import functions as F

    vocab = {c: sorted(r[0] for r in train.select(c).distinct().collect()) for c in CATEGORICAL}
    logged = [F.log1p(F.col(c)) if c in ("capital_gain", "capital_loss") else F.col(c)
              for c in NUMERIC]
    stats = train.select(*[F.mean(x).alias(f"m{i}") for i, x in enumerate(logged)],
                         *[F.stddev_pop(x).alias(f"s{i}") for i, x in enumerate(logged)]).first()
    return {"vocab": vocab, "mean": [stats[f"m{i}"] for i in range(len(NUMERIC))],
            "std": [stats[f"s{i}"] for i in range(len(NUMERIC))]}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    from pyspark.sql import SparkSession

    from tfyarn.data import spark as tds

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)  # executors import tfyarn too
    spark = (SparkSession.builder.master(args.master).appName("census-prepare")
             .config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("WARN")
    with tempfile.TemporaryDirectory() as scratch:
        train = frame(spark, csv_source(args.data_dir, "adult.data", scratch)).cache()
        test = frame(spark, csv_source(args.data_dir, "adult.test", scratch))
        out = args.out.rstrip("/")
        m = tds.write(train, f"{out}/train", shards=args.shards,
                      extra={"encoder": encoder_state(train)})
        t = tds.write(test, f"{out}/test", shards=args.shards)
    print(f"train: {m.rows} rows in {len(m.shards)} shards at {out}/train", flush=True)
    print(f"test: {t.rows} rows in {len(t.shards)} shards at {out}/test", flush=True)
    spark.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
