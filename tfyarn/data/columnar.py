"""Arrow record batches to and from TFRecord bytes, column-wise in C (native/tfrecord.c,
through ctypes).

Writing: Spark hands a writer's Python its rows as Arrow batches (`mapInArrow`); encoding
them row by row in Python ran at a quarter of Spark's own Parquet write. Here pyarrow
normalizes each column (int64, float32 or binary values; scalars or lists), and one C call
per batch writes every record: the Example protobuf, TFRecord's length and CRCs, and the
file's running CRC-32C. Reading (`rows()`, `batches()`): one C pass counts a buffer's
records' values, a second fills the Arrow arrays (Python's parser read 17,000 rows/s).
The library is built from source on first use (`system.native`); where no C compiler is
found, `encoder` and `decoder` say so and callers fall back to `example`'s Python (the
same bytes and rows, slower).
Must give exactly `example.example`'s bytes for every row (tests compare them); must not
import pyarrow or numpy at module level (the writer's driver side imports this module).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tfyarn.core.errors import EnvironmentMissing, SpecError
from tfyarn.data import example as ex
from tfyarn.system import native

SOURCE = Path(__file__).parent / "native" / "tfrecord.c"
_KINDS = {ex.BYTES: 0, ex.FLOAT: 1, ex.INT64: 2}
# Upper bounds of a batch's bytes (its buffer is this large; varints take 10 bytes at most):
RECORD_BOUND = 27  # per row: length, 2 CRCs, the Example's tag and length
ENTRY_BOUND = 55  # per row and column, plus its key: the map entry's tags and lengths
VALUE_BOUND = 11  # per value, plus the value's buffers: a tag and length, or a varint

Encode = Callable[[Any, int], tuple[Any, int]]  # (Arrow batch, crc) -> (bytes, crc)
T = TypeVar("T")


class _Column(ctypes.Structure):
    _fields_ = [("kind", ctypes.c_int32), ("is_list", ctypes.c_int32),
                ("key", ctypes.c_char_p), ("key_len", ctypes.c_int64),
                ("validity", ctypes.c_void_p), ("offset", ctypes.c_int64),
                ("list_offsets", ctypes.c_void_p), ("values_offset", ctypes.c_int64),
                ("value_offsets", ctypes.c_void_p), ("data", ctypes.c_void_p)]


class _Field(ctypes.Structure):
    _fields_ = [("key", ctypes.c_char_p), ("key_len", ctypes.c_int64),
                ("kind", ctypes.c_int32), ("is_list", ctypes.c_int32),
                ("values", ctypes.c_int64), ("bytes", ctypes.c_int64),
                ("present", ctypes.c_void_p), ("list_offsets", ctypes.c_void_p),
                ("value_offsets", ctypes.c_void_p), ("data", ctypes.c_void_p),
                ("last_row", ctypes.c_int64)]


@functools.cache
def library() -> ctypes.CDLL:
    """The encoder and decoder, built for this host once (keyed by its source's hash)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    cc = os.environ.get("CC", "cc")
    path = native.built("tfrecord", f"{digest}/libtfyarn_tfrecord.so",
                        lambda out: [cc, "-shared", "-fPIC", "-O2", str(SOURCE), "-o", out],
                        "tfyarn's TFRecord encoder and decoder")
    lib = ctypes.CDLL(str(path))
    lib.tfr_write.restype = ctypes.c_int64
    lib.tfr_write.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(_Column),
                              ctypes.c_void_p, ctypes.POINTER(ctypes.c_uint32), ctypes.c_void_p]
    lib.tfr_read.restype = ctypes.c_int64
    lib.tfr_read.argtypes = [ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64, ctypes.c_int32,
                             ctypes.POINTER(_Field), ctypes.c_int32,
                             ctypes.POINTER(ctypes.c_int64), ctypes.POINTER(ctypes.c_int32)]
    return lib


def unless_missing(make: Callable[[Any], T], columns: Any, doing: str) -> T | None:
    """`make(columns)` (`encoder` or `decoder`); None where the C library cannot be built
    (no C compiler on this host), said on stderr: the caller then uses Python's."""
    try:
        return make(columns)
    except EnvironmentMissing as exc:
        print(f"tfyarn.data: {exc}; {doing} TFRecords in Python instead (slower)",
              file=sys.stderr)
        return None


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


# ---------------------------------------------------------------- reading


_READ_ERRORS = {-1: "corrupt TFRecord length", -2: "corrupt TFRecord data",
                -3: "malformed tf.train.Example"}

Decode = Callable[[Any, int], tuple[Any, int]]  # (buffer, rows) -> (Arrow batch, bytes)


def decoder(columns: Sequence[tuple[str, str, bool]]) -> Decode:
    """`decode(buffer, rows)`: up to `rows` whole TFRecords from the start of `buffer` as
    an Arrow batch of these columns `(name, kind, is_list)` (a scalar: its first value, a
    null where the row has none; a list: its values; bytes as strings where a batch's
    are all UTF-8), and the bytes they took (a record cut at the end is left). Checks both
    CRCs. Raises EnvironmentMissing where the C library cannot be built."""
    import numpy as np

    lib = library()
    keys = [name.encode() for name, _, _ in columns]

    def decode(buffer: Any, rows: int) -> tuple[Any, int]:
        view = np.frombuffer(buffer, dtype=np.uint8)
        fields = (_Field * len(columns))(*(
            _Field(key=key, key_len=len(key), kind=_KINDS[kind], is_list=int(is_list))
            for key, (_, kind, is_list) in zip(keys, columns, strict=True)))
        used, bad = ctypes.c_int64(0), ctypes.c_int32(-1)
        args = (view.ctypes.data, len(view), rows, len(columns), fields)
        n = lib.tfr_read(*args, 1, ctypes.byref(used), ctypes.byref(bad))
        if n < 0:
            _refuse(n, columns, bad.value, used.value)
        held = [_sized(f, n) for f in fields]  # the arrays pass 2 fills
        lib.tfr_read(*args, 2, ctypes.byref(used), ctypes.byref(bad))
        return _batch(columns, fields, held, n), used.value

    return decode


def _refuse(code: int, columns: Sequence[tuple[str, str, bool]], bad: int, at: int) -> None:
    if code == -4:
        name, kind, _ = columns[bad]
        raise SpecError(f"column {name!r}: a record at byte {at} holds another kind than "
                        f"the manifest's {kind}; was the dataset written by tfyarn.data?")
    raise ValueError(f"{_READ_ERRORS[code]} (the record at byte {at})")


def _sized(f: _Field, rows: int) -> dict[str, Any]:
    """The arrays of one column, as pass 1 counted them, their addresses set in `f`."""
    import numpy as np

    bytes_kind = f.kind == _KINDS[ex.BYTES]
    dtype = np.uint8 if bytes_kind else np.float32 if f.kind == _KINDS[ex.FLOAT] else np.int64
    held = {"data": np.empty(f.bytes if bytes_kind else f.values, dtype=dtype)}
    if f.is_list:
        held["list_offsets"] = np.empty(rows + 1, dtype=np.int32)
    else:
        held["present"] = np.empty(rows, dtype=np.uint8)
    if bytes_kind:
        held["value_offsets"] = np.empty(f.values + 1, dtype=np.int32)
    for name, array in held.items():
        setattr(f, name, array.ctypes.data)
    return held


def _batch(columns: Sequence[tuple[str, str, bool]], fields: Any,
           held: list[dict[str, Any]], rows: int) -> Any:
    import numpy as np
    import pyarrow as pa

    arrays = []
    for (_, kind, is_list), f, h in zip(columns, fields, held, strict=True):
        count = f.values
        valid = None
        if not is_list and not h["present"].all():
            valid = pa.py_buffer(np.packbits(h["present"], bitorder="little"))
        buffers = [pa.py_buffer(h["value_offsets"]), pa.py_buffer(h["data"])] \
            if kind == ex.BYTES else [pa.py_buffer(h["data"])]
        values = pa.Array.from_buffers(_value_type(kind), count,
                                       [None if is_list else valid, *buffers])
        if kind == ex.BYTES:
            values = _text(values)
        arrays.append(pa.ListArray.from_arrays(pa.array(h["list_offsets"]), values)
                      if is_list else values)
    return pa.RecordBatch.from_arrays(arrays, names=[n for n, _, _ in columns])


def _text(values: Any) -> Any:
    """Bytes values as strings where they are all UTF-8 (names, categories); else as
    they are (images, serialized tensors), which no string could hold."""
    import pyarrow as pa

    try:
        return values.cast(pa.string())
    except pa.ArrowInvalid:  # not UTF-8: the bytes themselves are the values
        return values
