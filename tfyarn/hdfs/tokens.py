"""A YARN container's Hadoop tokens, read without a JVM: its HDFS delegation token for WebHDFS.

Owns reading the token file the NodeManager gives every container
(HADOOP_TOKEN_FILE_LOCATION: Hadoop's `Credentials` storage, "HDTS" then a format byte: 0,
Writable records, what Hadoop 3.3.6's containers get; 1, protobuf, is refused) and turning
its HDFS delegation token into the string WebHDFS takes as `delegation=` (Hadoop's
`Token.encodeToUrlString`: the token's Writable form in URL-safe base64). The driver in
the ApplicationMaster writes the job's history over WebHDFS with it on a Kerberized
cluster, where it has no Kerberos login.
Must not do network I/O (that is `webhdfs`).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

MAGIC = b"HDTS"
HDFS_KIND = "HDFS_DELEGATION_TOKEN"


class TokenFileError(ValueError):
    """Not a Hadoop token file this reader knows."""


@dataclass(frozen=True)
class Token:
    identifier: bytes
    password: bytes
    kind: str
    service: str

    def url_string(self) -> str:
        """Hadoop's `Token.encodeToUrlString`: what WebHDFS's `delegation=` takes."""
        raw = b"".join((_vint(len(self.identifier)), self.identifier,
                        _vint(len(self.password)), self.password,
                        _text(self.kind), _text(self.service)))
        return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def read_tokens(data: bytes) -> list[Token]:
    """Every token in a token file's bytes."""
    if data[:4] != MAGIC or len(data) < 5:
        raise TokenFileError("not a Hadoop token file (no HDTS header)")
    version = data[4]
    if version == 0:
        return _writable(_Reader(data, 5))
    raise TokenFileError(f"Hadoop token file format {version} is not read here (only 0, "
                         "the Writable form, which YARN's containers get)")


def hdfs_delegation(path: str) -> str | None:
    """The URL string of the first HDFS delegation token in the token file at `path`, or
    None when it holds none (a cluster without Kerberos)."""
    with open(path, "rb") as f:
        tokens = read_tokens(f.read())
    return next((t.url_string() for t in tokens if t.kind == HDFS_KIND), None)


# ---------------------------------------------------------------- Hadoop's Writable form


class _Reader:
    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def take(self, n: int) -> bytes:
        if n < 0 or self.pos + n > len(self.data):
            raise TokenFileError("token file ends early")
        out = self.data[self.pos:self.pos + n]
        self.pos += n
        return out

    def vint(self) -> int:
        """Hadoop's WritableUtils.readVLong."""
        first = int.from_bytes(self.take(1), "big", signed=True)
        if first >= -112:
            return first
        negative = first < -120
        size = (-119 - first) if negative else (-111 - first)
        value = int.from_bytes(self.take(size - 1), "big")
        return ~value if negative else value

    def text(self) -> str:
        return self.take(self.vint()).decode("utf-8")


def _writable(r: _Reader) -> list[Token]:
    out = []
    for _ in range(r.vint()):
        r.text()  # the alias
        identifier, password = r.take(r.vint()), r.take(r.vint())
        out.append(Token(identifier, password, r.text(), r.text()))
    return out


def _vint(n: int) -> bytes:
    """Hadoop's WritableUtils.writeVLong, for the lengths (never negative) it is used for."""
    if -112 <= n <= 127:
        return n.to_bytes(1, "big", signed=True)
    body = n.to_bytes((n.bit_length() + 7) // 8, "big")
    return (-112 - len(body)).to_bytes(1, "big", signed=True) + body


def _text(s: str) -> bytes:
    raw = s.encode("utf-8")
    return _vint(len(raw)) + raw
