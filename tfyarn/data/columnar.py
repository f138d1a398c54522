"""Arrow record batches to TFRecord bytes, column-wise in C (native/tfrecord.c via ctypes).

Spark hands a writer's Python its rows as Arrow batches (`mapInArrow`); encoding them row
by row in Python ran at a quarter of Spark's own Parquet write. Here pyarrow normalizes each
column (int64, float32 or binary values; scalars or lists), and one C call per batch writes
every record: the Example protobuf, TFRecord's length and CRCs, and the file's running
CRC-32C. The library is built from source on first use (`system.native`); where no C
compiler is found, `encoder` says so and the caller falls back to `example.batch_encoder`
(the same bytes, slower).
Must give exactly `example.example`'s bytes for every row (tests compare them); must not
import pyarrow or numpy at module level (the writer's driver side imports this module).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tfyarn.core.errors import SpecError
from tfyarn.data import example as ex
from tfyarn.system import native

SOURCE = Path(__file__).parent / "native" / "tfrecord.c"
_KINDS = {ex.BYTES: 0, ex.FLOAT: 1, ex.INT64: 2}
# Upper bounds of a batch's bytes (its buffer is this large; varints take 10 bytes at most):
RECORD_BOUND = 27  # per row: length, 2 CRCs, the Example's tag and length
ENTRY_BOUND = 55  # per row and column, plus its key: the map entry's tags and lengths
VALUE_BOUND = 11  # per value, plus the value's buffers: a tag and length, or a varint

Encode = Callable[[Any, int], tuple[Any, int]]  # (Arrow batch, crc) -> (bytes, crc)


class _Column(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("is_list", ctypes.c_int32),
                ("key", ctypes.c_char_p), ("key_len", ctypes.c_int64),
                ("validity", ctypes.c_void_p), ("offset", ctypes.c_int64),
                ("list_offsets", ctypes.c_void_p), ("values_offset", ctypes.c_int64),
                ("value_offsets", ctypes.c_void_p), ("data", ctypes.c_void_p)]


@functools.cache
def library() -> ctypes.CDLL:
    """The encoder, built for this host once (keyed by its source's hash)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    cc = os.environ.get("CC", "cc")
    path = native.built("tfrecord", f"{digest}/libtfyarn_tfrecord.so",
                        lambda out: [cc, "-shared", "-fPIC", "-O2", str(SOURCE), "-o", out],
                        "tfyarn's TFRecord encoder")
    lib = ctypes.CDLL(str(path))
    lib.tfr_write.restype = ctypes.c_int64
    lib.tfr_write.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(_Column),
                              ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
    return lib


def encoder(columns: Sequence[tuple[str, str, bool]]) -> Encode:
    """`encode(batch, crc)`: the TFRecords (a memoryview) of an Arrow batch with these
    columns `(name, kind, is_list)` (in any order, found by name), and the running CRC-32C
    extended over them. Raises EnvironmentMissing where the C library cannot be built."""
    lib = library()
    order = sorted(columns, key=lambda c: functools.cmp_to_key(ex._map_order)(c[0].encode()))

    scratch = (ctypes.c_int64 * (4 * len(order)))()  # the C side's sizes per column

    def encode(batch: Any, crc: int) -> tuple[Any, int]:
        import numpy as np

        keep: list[Any] = []  # the normalized arrays: alive until the C call returns
        rows = batch.num_rows
        bound = [rows * RECORD_BOUND]
        cols = (_Column * len(order))(*(
            _describe(name, kind, is_list, batch.column(name), keep, bound)
            for name, kind, is_list in order))
        out = np.empty(sum(bound), dtype=np.uint8)  # pages never written are never touched
        running = ctypes.c_uint32(crc)
        n = lib.tfr_write(rows, len(order), cols, out.ctypes.data, ctypes.byref(running),
                          scratch)
        return memoryview(out)[:n].toreadonly(), running.value

    return encode


def _value_type(kind: str) -> Any:
    import pyarrow as pa

    return {ex.INT64: pa.int64(), ex.FLOAT: pa.float32(), ex.BYTES: pa.binary()}[kind]


def _address(buffer: Any) -> int | None:
    return None if buffer is None else buffer.address


def _describe(name: str, kind: str, is_list: bool, arr: Any, keep: list[Any],
              bound: list[int]) -> _Column:
    """One column as the C encoder reads it: values cast to int64/float32/binary (Spark's
    narrower ints, bools and doubles become those, as `example` stores them); adds its
    bytes' upper bound to `bound`."""
    import pyarrow as pa

    arr = arr.combine_chunks() if isinstance(arr, pa.ChunkedArray) else arr
    if is_list and not pa.types.is_list(arr.type):
        arr = arr.cast(pa.list_(arr.type.value_type))  # large lists: int32 offsets
    values = arr.values if is_list else arr
    if values.null_count and is_list:
        raise SpecError(f"column {name!r} has a null inside an array: a tf.train.Example "
                        "list cannot hold one; filter or fill it first, e.g. "
                        f"F.filter({name!r}, lambda x: x.isNotNull())")
    values = values.cast(_value_type(kind))
    rows = arr if is_list else values  # a scalar column's rows are its values
    key = name.encode()
    keep += [arr, values, key]
    bound.append(len(arr) * (ENTRY_BOUND + len(key)) + len(values) * VALUE_BOUND
                 + values.get_total_buffer_size())
    col = _Column(kind=_KINDS[kind], is_list=int(is_list), key=key, key_len=len(key),
                  validity=_address(rows.buffers()[0]) if rows.null_count else None,
                  offset=rows.offset, values_offset=values.offset)
    if is_list:
        col.list_offsets = _address(arr.buffers()[1])
    if kind == ex.BYTES:
        col.value_offsets = _address(values.buffers()[1])
        col.data = _address(values.buffers()[2])
    else:
        col.data = _address(values.buffers()[1])
    return col
