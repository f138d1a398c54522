"""A dataset's manifest: its commit point, and what readers split among themselves.

A dataset is a directory: data files under a hidden generation dir (`.tfyarn-<id>/`)
and `_tfyarn_manifest.json`, written last, naming them. Without the manifest the
directory is not a dataset (a write died, or is still going): readers and `--data`
refuse it. Readers read only the files the manifest names, so a retried or speculative
Spark task's extra file is never read, and a rerun that replaces the manifest in one
rename switches readers from the old generation to the new one whole.

A streamed dataset (`write(..., stream=True)`, version 2) is committed a shard at a time:
its manifest grows (shards in commit order, `sealed` false) until the writer seals it, or
says why it failed (`error`). Its shards are split in that order (`assign_in_order`), so
a reader's share of a prefix never changes as the list grows: readers start on what is
there and follow the rest.
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
STREAMED = 2  # the version of a streamed manifest: a reader older than it refuses it
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
    sealed: bool = True  # false while a streamed write still adds shards
    error: str = ""  # a streamed write that failed: why (readers raise it)

    @property
    def streamed(self) -> bool:
        return self.version == STREAMED

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
            if d.get("version") not in (VERSION, STREAMED) or d.get("format") not in FORMATS:
                raise ValueError(f"version {d.get('version')}, format {d.get('format')!r}")
            return cls(d["format"], tuple(Column(**c) for c in d["columns"]),
                       tuple(Shard(**s) for s in d["shards"]), d["version"],
                       d.get("write_id", ""), d.get("extra", {}), d.get("sealed", True),
                       d.get("error", ""))
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
    shares = assign_in_order(sorted(shards, key=lambda s: (-s.rows, s.file)), readers)
    return [sorted(share, key=lambda s: s.file) for share in shares]


def assign_in_order(shards: Sequence[Shard], readers: int) -> list[list[Shard]]:
    """A streamed dataset's split: shards in commit order, each to the reader with the
    fewest rows so far. A shard's reader depends only on the shards before it, so every
    reader of a growing manifest agrees, before and after the seal; no reader ends up more
    than one shard's rows above another."""
    if readers < 1:
        raise ValueError("readers must be at least 1")
    shares: list[list[Shard]] = [[] for _ in range(readers)]
    load = [0] * readers
    for shard in shards:
        i = min(range(readers), key=lambda r: (load[r], r))
        shares[i].append(shard)
        load[i] += shard.rows
    return shares


def split(m: Manifest, readers: int) -> list[list[Shard]]:
    """The readers' shares of `m`, by the rule its kind of write uses."""
    return assign_in_order(m.shards, readers) if m.streamed else assign(m.shards, readers)
