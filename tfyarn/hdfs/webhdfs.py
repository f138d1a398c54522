"""HDFS from the client without a JVM: WebHDFS, through the `hdfs` package.

Owns finding the NameNode's HTTP address for an hdfs:// URI (its host, with
dfs.namenode.http-address's port from HADOOP_CONF_DIR, 9870 by default), making a
client (on a Kerberized cluster one that answers the NameNode's SPNEGO challenge as the
client's login; the DataNodes then take the delegation token the NameNode puts in its
redirect), and turning the `hdfs` package's and requests' failures into HdfsUnavailable
(`failing_as`). Used where the client reads HDFS (check-data, --data, local mode's
`-f hdfs://`, the HDFS cache, `tfyarn history`) and where the driver writes the job's
history (`container_client`: a YARN container's delegation token, no JVM); tasks read
HDFS through libhdfs.
Must not start a JVM (that is `jni`).
"""

from __future__ import annotations

import contextlib
import io
import os
import posixpath
import urllib.parse
from collections.abc import Iterator
from typing import Any

from tfyarn.core.errors import EnvironmentMissing
from tfyarn.hdfs import spnego, tokens
from tfyarn.hdfs.siteconf import kerberized, read_site

HTTP_PORT = 9870  # Hadoop 3's NameNode web port


class HdfsUnavailable(EnvironmentMissing):
    """A WebHDFS call failed (NameNode down or unreachable, permissions, no such path)."""


@contextlib.contextmanager
def failing_as(what: str, fix: str = "") -> Iterator[None]:
    """Inside: a WebHDFS failure is one HdfsUnavailable saying `what` failed and `fix`."""
    from hdfs.util import HdfsError
    from requests import RequestException

    try:
        yield
    except (HdfsError, RequestException, OSError, spnego.NegotiateUnavailable) as exc:
        raise HdfsUnavailable(f"{what}: {exc}" + (f"; {fix}" if fix else "")) from None


def http_address(uri: str, conf_dir: str | None) -> str:
    parsed = urllib.parse.urlparse(uri)
    hdfs_site = read_site(os.path.join(conf_dir, "hdfs-site.xml")) if conf_dir else {}
    core = read_site(os.path.join(conf_dir, "core-site.xml")) if conf_dir else {}
    host = parsed.hostname or urllib.parse.urlparse(core.get("fs.defaultFS", "")).hostname
    if not host:
        raise EnvironmentMissing(f"{uri} names no NameNode and HADOOP_CONF_DIR has no "
                                 "fs.defaultFS; give hdfs://HOST:PORT/... or set -conf")
    configured = hdfs_site.get("dfs.namenode.http-address", "")
    port = configured.rsplit(":", 1)[1] if ":" in configured else str(HTTP_PORT)
    return f"http://{host}:{port}"


def hdfs_path(uri: str) -> str:
    return urllib.parse.urlparse(uri).path or "/"


def client_for(uri: str, conf_dir: str | None, user: str,
               login: spnego.Negotiator | None = None) -> Any:
    """A WebHDFS client: as `user` (simple auth), or on a Kerberized cluster as `login`
    (the ticket cache when None)."""
    import requests
    from hdfs import Client, InsecureClient

    if not kerberized(conf_dir):
        return InsecureClient(http_address(uri, conf_dir), user=user)
    session = requests.Session()
    session.auth = NegotiateAuth(login or spnego.Negotiator())
    return Client(http_address(uri, conf_dir), session=session)


def container_client(uri: str, conf_dir: str | None, user: str, token_file: str | None,
                     timeout_s: float) -> Any:
    """A WebHDFS client inside a YARN container, which has no Kerberos login: on a
    Kerberized cluster it shows the container's HDFS delegation token, else it acts as
    `user` (simple auth)."""
    from hdfs import InsecureClient, TokenClient

    address = http_address(uri, conf_dir)
    if not kerberized(conf_dir):
        return InsecureClient(address, user=user, timeout=timeout_s)
    try:
        token = tokens.hdfs_delegation(token_file) if token_file else None
    except (OSError, tokens.TokenFileError) as exc:
        raise HdfsUnavailable(f"the container's token file {token_file}: {exc}") from None
    if token is None:
        raise HdfsUnavailable("the container has no HDFS delegation token (its token file: "
                              f"{token_file or 'none'})")
    return TokenClient(address, token, timeout=timeout_s)


DEFAULT_DIR_MODE = "755"  # what HDFS makes a dir (umask 022), and an older tfyarn did


def private_dir(client: Any, path: str) -> str:
    """`path` (and missing parents) made 0700, or one left at HDFS's default 0755
    tightened to 0700: HDFS's default lets every cluster user list and read it. Any other
    mode is its owner's choice and kept. What was done: "made", "tightened" or ""."""
    st = client.status(path, strict=False)
    if st is None:
        client.makedirs(path, permission="700")
        return "made"
    if st.get("type") == "DIRECTORY" and st.get("permission") == DEFAULT_DIR_MODE:
        client.set_permission(path, "700")
        return "tightened"
    return ""


def put_temp(path: str) -> str:
    """Where `put_text` writes `path` before renaming it in: whole once it is there, and
    the only copy between the old one's delete and the rename."""
    folder, name = posixpath.split(path)
    return posixpath.join(folder, f".{name}.tmp")


def put_text(client: Any, path: str, text: str, permission: str = "640") -> None:
    """`text` at `path`, whole: written to a hidden file beside it, then renamed in, so
    a reader never sees half of it. 0640 (HDFS's default is 0644: every cluster user)."""
    client.makedirs(posixpath.dirname(path))
    temp = put_temp(path)
    client.write(temp, data=text.encode("utf-8"), overwrite=True, permission=permission)
    client.delete(path)  # HDFS renames onto nothing only
    client.rename(temp, path)


class NegotiateAuth:
    """requests' auth for Hadoop's SPNEGO: a request answered 401 `Negotiate` is sent
    again with a token; later requests to that host carry one from the start. Hosts that
    never ask (the DataNodes: a redirect carries a delegation token) get none."""

    def __init__(self, login: spnego.Negotiator) -> None:
        self.login = login
        self.hosts: set[str] = set()

    def __call__(self, request: Any) -> Any:
        host = spnego.host_of(request.url)
        if host in self.hosts:
            request.headers["Authorization"] = self.login.header(host)
        else:
            request.register_hook("response", self._answer)
        return request

    def _answer(self, response: Any, **kwargs: Any) -> Any:
        asked = spnego.challenged(response.status_code,
                                  response.headers.get("WWW-Authenticate"))
        if not asked or "Authorization" in response.request.headers:
            return response
        host = spnego.host_of(response.request.url)
        again = response.request.copy()
        again.headers["Authorization"] = self.login.header(host)
        self.hosts.add(host)
        response.close()
        answer = response.connection.send(again, **kwargs)
        answer.history.append(response)
        answer.request = again
        return answer


def download(uri: str, target: str, conf_dir: str | None, user: str,
             login: spnego.Negotiator | None = None) -> None:
    """Copy a file or a directory tree from HDFS to `target`."""
    with failing_as(f"cannot fetch {uri} over WebHDFS", "check HADOOP_CONF_DIR and that the "
                    "NameNode's HTTP port is reachable, or copy it here and ship the local copy"):
        _copy(client_for(uri, conf_dir, user, login), hdfs_path(uri), target)


def _copy(client: Any, path: str, target: str) -> None:
    if client.status(path)["type"] == "DIRECTORY":
        os.makedirs(target, exist_ok=True)
        for name in client.list(path):
            _copy(client, f"{path.rstrip('/')}/{name}", os.path.join(target, name))
        return
    with client.read(path) as src, open(target, "wb") as dst:
        for chunk in iter(lambda: src.read(1 << 20), b""):
            dst.write(chunk)


class RangeFile(io.RawIOBase):
    """A seekable, read-only HDFS file over WebHDFS: each read asks for its byte range
    (OPEN with offset and length), so Parquet readers can seek to the footer and stream
    row groups without the whole file in memory. Wrap it in io.BufferedReader."""

    def __init__(self, client: Any, path: str) -> None:
        super().__init__()
        self.client, self.path = client, path
        self.size = int(client.status(path)["length"])
        self.pos = 0

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self.pos, io.SEEK_END: self.size}[whence]
        self.pos = max(0, base + offset)
        return self.pos

    def readinto(self, buffer: Any) -> int:
        n = min(len(buffer), self.size - self.pos)
        if n <= 0:
            return 0
        with failing_as(f"cannot read hdfs://{self.path} over WebHDFS"), \
                self.client.read(self.path, offset=self.pos, length=n) as r:
            data = r.read()
        buffer[:len(data)] = data
        self.pos += len(data)
        return len(data)


def open_range(uri: str, conf_dir: str | None, user: str, buffer_size: int = 8 << 20,
               login: spnego.Negotiator | None = None) -> io.BufferedReader:
    """A buffered, seekable reader of an HDFS file (FileNotFoundError when it is not
    there); reads of `buffer_size` bytes at a time."""
    client = client_for(uri, conf_dir, user, login)
    path = hdfs_path(uri)
    with failing_as(f"cannot read {uri} over WebHDFS"):
        found = client.status(path, strict=False) is not None
    if not found:
        raise FileNotFoundError(f"{uri} does not exist")
    return io.BufferedReader(RangeFile(client, path), buffer_size=buffer_size)
