"""A dataset's manifest: its commit point, and what readers split among themselves.

A dataset is a directory: data files under a hidden generation dir (`.tfyarn-<id>/`)
and `_tfyarn_manifest.json`, written last, naming them. Without the manifest the
directory is not a dataset (a write died, or is still going): readers and `--data`
refuse it. Readers read only the files the manifest names, so a retried or speculative
Spark task's extra file is never read, and a rerun that replaces the manifest in one
rename switches readers from the old generation to the new one whole.
Stdlib only (the gateway's `--data` check and the tasks' readers use it).
Must not do I/O: reading and writing the file is the callers'.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field

from tfyarn.core.errors import SpecError

NAME = "_tfyarn_manifest.json"
VERSION = 1
FORMATS = ("tfrecord", "parquet")


@dataclass(frozen=True)
class Column:
    """One feature: its name, Example kind (int64 / float / bytes) and whether a list."""

    name: str
    kind: str
    is_list: bool = False


@dataclass(frozen=True)
class Shard:
    """One data file, relative to the dataset dir, with its rows, bytes and CRC-32C."""

    file: str
    rows: int
    bytes: int
    crc32c: int | None = None  # of the whole file (tfrecord); parquet has its own checks


@dataclass(frozen=True)
class Manifest:
    format: str
    columns: tuple[Column, ...]
    shards: tuple[Shard, ...]
    version: int = VERSION
    write_id: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def rows(self) -> int:
        return sum(s.rows for s in self.shards)

    def to_json(self) -> str:
        d = asdict(self)
        d["rows"] = self.rows
        return json.dumps(d, indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str, where: str = "manifest") -> Manifest:
        try:
            d = json.loads(text)
            if d.get("version") != VERSION or d.get("format") not in FORMATS:
                raise ValueError(f"version {d.get('version')}, format {d.get('format')!r}")
            return cls(d["format"], tuple(Column(**c) for c in d["columns"]),
                       tuple(Shard(**s) for s in d["shards"]), d["version"],
                       d.get("write_id", ""), d.get("extra", {}))
        except (ValueError, KeyError, TypeError) as exc:
            raise SpecError(f"{where}: not a tfyarn dataset manifest ({exc}); rewrite the "
                            "dataset with tfyarn.data.spark.write") from None

    def schema_json(self) -> str:
        """The columns, as tasks get them (TFYARN_DATA_SCHEMA)."""
        return json.dumps([asdict(c) for c in self.columns], sort_keys=True)


def assign(shards: Sequence[Shard], readers: int) -> list[list[Shard]]:
    """Shards split among `readers`, balanced by rows: the biggest first, each to the
    reader with the fewest rows so far. Every shard goes to exactly one reader, and no
    reader ends up more than one shard's rows above another."""
    if readers < 1:
        raise ValueError("readers must be at least 1")
    shares: list[list[Shard]] = [[] for _ in range(readers)]
    load = [0] * readers
    for shard in sorted(shards, key=lambda s: (-s.rows, s.file)):
        i = min(range(readers), key=lambda r: (load[r], r))
        shares[i].append(shard)
        load[i] += shard.rows
    return [sorted(share, key=lambda s: s.file) for share in shares]
