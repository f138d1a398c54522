"""tf.train.Example bytes and TFRecord framing, without TensorFlow (stdlib only).

Spark executors write training data; they should not need TensorFlow (550 MB, 3.4 s to
import) to do it. An Example is a small protobuf, written here field by field: the bytes
equal TF's own `Example.SerializeToString(deterministic=True)`, and a
TFRecord file is TF's framing (length, masked CRC-32C of the length, data, masked CRC-32C
of the data), readable by `tf.data.TFRecordDataset`.
Must not import TensorFlow: the bytes are built and parsed by hand.
"""

from __future__ import annotations

import functools
import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Value = int | float | bool | str | bytes
FeatureValue = Value | Sequence[Value] | None

INT64, FLOAT, BYTES = "int64", "float", "bytes"  # the three Example feature kinds
_FIELD = {BYTES: 1, FLOAT: 2, INT64: 3}  # Feature's oneof field numbers


# ---------------------------------------------------------------- protobuf wire format


def _varint(n: int) -> bytes:
    """An unsigned varint; a negative int64 as its 64-bit two's complement (10 bytes)."""
    n &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """A length-delimited field (wire type 2)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def _list(kind: str, values: Sequence[Value]) -> bytes:
    """BytesList / FloatList / Int64List: bytes repeated, numbers packed."""
    if kind == BYTES:
        return b"".join(_field(1, v.encode() if isinstance(v, str) else bytes(v))
                        for v in values)
    if not values:
        return b""
    if kind == FLOAT:
        return _field(1, struct.pack(f"<{len(values)}f", *values))
    return _field(1, b"".join(_varint(int(v)) for v in values))


def feature(kind: str, value: FeatureValue) -> bytes:
    """One Feature message: a scalar is a list of one, None an empty list."""
    values = [] if value is None else list(value) if isinstance(value, (list, tuple)) \
        else [value]
    return _field(_FIELD[kind], _list(kind, values))


def _map_order(a: bytes, b: bytes) -> int:
    """protobuf's (upb's) deterministic order of map keys: bytewise over the common
    prefix, and of two keys equal there, the longer first."""
    n = min(len(a), len(b))
    return (a[:n] > b[:n]) - (a[:n] < b[:n]) or len(b) - len(a)


def example(features: Mapping[str, tuple[str, FeatureValue]]) -> bytes:
    """A serialized tf.train.Example of `name -> (kind, value)`, keys in protobuf's
    deterministic order; a None (a null in Spark) leaves its feature out, so readers
    give its default."""
    named = sorted(((name.encode(), kind, value) for name, (kind, value) in features.items()
                    if value is not None), key=lambda e: functools.cmp_to_key(_map_order)(e[0]))
    return _field(1, b"".join(_field(1, _field(1, name) + _field(2, feature(kind, value)))
                              for name, kind, value in named))


def batch_encoder(columns: Sequence[tuple[str, str, bool]]) -> Any:
    """A fast `example()` for a batch of rows of fixed columns `(name, kind, is_list)`,
    given column by column (as Arrow hands a Spark task its rows): each column's map
    entries are built once per distinct scalar value and then joined row by row, in the
    map order worked out once. Gives the same bytes as `example()` for each row. Needs
    one column at least (an Example of none says nothing)."""
    keyed = sorted(((name.encode(), i, kind, is_list) for i, (name, kind, is_list)
                    in enumerate(columns)), key=lambda e: functools.cmp_to_key(_map_order)(e[0]))
    plan = [(i, kind, is_list, _field(1, name)) for name, i, kind, is_list in keyed]

    def entry(kind: str, key: bytes, value: FeatureValue) -> bytes:
        feat = feature(kind, value)
        body = key + b"\x12" + _varint(len(feat)) + feat
        return b"\x0a" + _varint(len(body)) + body

    def column(kind: str, is_list: bool, key: bytes, values: Sequence[Any]) -> list[bytes]:
        if is_list:
            return [b"" if v is None else entry(kind, key, v) for v in values]
        known: dict[Any, bytes] = {None: b""}  # None: the feature is left out
        out = []
        for v in values:
            e = known.get(v)
            if e is None:
                e = entry(kind, key, v)
                if not (kind == FLOAT and v == 0):  # 0.0 == -0.0, but their bytes differ
                    known[v] = e
            out.append(e)
        return out

    def encode(values: Sequence[Sequence[Any]]) -> list[bytes]:
        """`values[i]`: column i's values, one per row; the rows' Examples."""
        entries = [column(kind, is_list, key, values[i]) for i, kind, is_list, key in plan]
        bodies = map(b"".join, zip(*entries, strict=True))
        return [b"\x0a" + _varint(len(body)) + body for body in bodies]

    return encode


def _read_varint(data: bytes, i: int) -> tuple[int, int]:
    n = shift = 0
    while True:
        b = data[i]
        i += 1
        n |= (b & 0x7F) << shift
        if not b & 0x80:
            return n, i
        shift += 7


def _fields(data: bytes) -> Iterable[tuple[int, int, Any]]:
    """(field number, wire type, value) of a message: varints as ints, fixed32 as bytes,
    length-delimited as bytes."""
    i = 0
    while i < len(data):
        key, i = _read_varint(data, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = _read_varint(data, i)
        elif wire == 2:
            size, i = _read_varint(data, i)
            value, i = data[i:i + size], i + size
        elif wire == 5:
            value, i = data[i:i + 4], i + 4
        elif wire == 1:
            value, i = data[i:i + 8], i + 8
        else:
            raise ValueError(f"wire type {wire} is not in a tf.train.Example")
        yield number, wire, value


def _values(kind: str, payload: bytes) -> list[Value]:
    out: list[Value] = []
    for _, wire, v in _fields(payload):
        if kind == BYTES:
            out.append(v)
        elif kind == FLOAT:
            out += struct.unpack(f"<{len(v) // 4}f", v) if wire == 2 else struct.unpack("<f", v)
        elif wire == 2:  # packed int64s
            j = 0
            while j < len(v):
                n, j = _read_varint(v, j)
                out.append(n - (1 << 64) if n >= 1 << 63 else n)
        else:
            out.append(v - (1 << 64) if v >= 1 << 63 else v)
    return out


def parse(data: bytes) -> dict[str, tuple[str, list[Value]]]:
    """A serialized tf.train.Example back to `name -> (kind, values)` (TF not needed:
    PyTorch and Horovod readers use this)."""
    out = {}
    for _, _, features in _fields(data):
        for _, _, entry in _fields(features):
            name, feat = b"", b""
            for number, _, v in _fields(entry):
                name, feat = (v, feat) if number == 1 else (name, v)
            for number, _, payload in _fields(feat):
                kind = {1: BYTES, 2: FLOAT, 3: INT64}[number]
                out[name.decode()] = (kind, _values(kind, payload))
    return out


def read_records(f: Any) -> Iterable[bytes]:
    """The records of a TFRecord stream, each checked against its CRCs."""
    while header := f.read(12):
        if len(header) < 12:
            raise ValueError("truncated TFRecord header")
        (length,), (lcrc,) = struct.unpack("<Q", header[:8]), struct.unpack("<I", header[8:])
        if _masked(crc32c(header[:8])) != lcrc:
            raise ValueError("corrupt TFRecord length")
        data, (dcrc,) = f.read(length), struct.unpack("<I", f.read(4))
        if _masked(crc32c(data)) != dcrc:
            raise ValueError("corrupt TFRecord data")
        yield data


# ---------------------------------------------------------------- TFRecord framing

_CRC_TABLE: list[int] = []


def _crc_table() -> list[int]:
    if not _CRC_TABLE:
        for i in range(256):
            c = i
            for _ in range(8):
                c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
            _CRC_TABLE.append(c)
    return _CRC_TABLE


def _crc32c_table(data: bytes, crc: int) -> int:
    table, crc = _crc_table(), crc ^ 0xFFFFFFFF
    for b in data:
        crc = table[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def _crc32c_compiled() -> Any:
    try:
        import google_crc32c  # compiled: far faster than the table (PyPI, optional)
    except ImportError:
        return None
    return google_crc32c.extend


_compiled = _crc32c_compiled()


def crc32c(data: bytes | memoryview, crc: int = 0) -> int:
    """CRC-32C (Castagnoli), as TFRecord uses, continuing from `crc` (a running CRC of
    what came before); the compiled one when installed (it takes bytes only)."""
    if _compiled is None:
        return _crc32c_table(data, crc)
    return int(_compiled(crc, data if isinstance(data, bytes) else bytes(data)))


def _masked(crc: int) -> int:
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def record(data: bytes) -> bytes:
    """One TFRecord: length, its masked CRC, the data, the data's masked CRC."""
    length = struct.pack("<Q", len(data))
    return (length + struct.pack("<I", _masked(crc32c(length))) + data
            + struct.pack("<I", _masked(crc32c(data))))


def records(datas: Iterable[bytes]) -> Iterable[bytes]:
    for data in datas:
        yield record(data)
