"""Upload once: archives YARN localizes (a `-m virtual-env` env, large `-f` dirs) are put in
hdfs:///user/$USER/.tfyarn/cache/<sha256><ext> the first time and reused by every later
submit, so a resubmit with an unchanged env uploads nothing.

Owns the content-addressed names and the race-free upload (write a unique temp name,
rename; a concurrent submit of the same archive either finds it or renames the same bytes
over it). Talks WebHDFS (no JVM; SPNEGO under Kerberos); where WebHDFS cannot serve (no
configuration, a default filesystem other than HDFS), callers upload through skein as
before and say so.
The dir is 0700 and each archive 0600 (a user's env and files are theirs: YARN localizes
them as the user). Must not overwrite a cached archive: a name is its content's hash,
written once.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass
from typing import Any

from tfyarn.core.progress import Progress, Reading
from tfyarn.hdfs.siteconf import kerberized, read_site
from tfyarn.hdfs.spnego import Negotiator
from tfyarn.hdfs.webhdfs import client_for, failing_as, private_dir

CACHE_DIR = ".tfyarn/cache"  # under the user's HDFS home
MIN_DIR_BYTES = 64 * 1024 * 1024  # -f dirs smaller than this are just uploaded each time
CHUNK = 1 << 20


def sha256(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def suffix(path: str) -> str:
    name = os.path.basename(path)
    for ext in (".tar.gz", ".tgz", ".zip", ".tar"):
        if name.endswith(ext):
            return ext
    return ""


@dataclass(frozen=True)
class HdfsCache:
    """The user's cache dir on HDFS, through a WebHDFS client."""

    client: Any
    root: str

    @classmethod
    def open(cls, conf_dir: str | None, user: str,
             login: Negotiator | None = None) -> HdfsCache | None:
        """None where WebHDFS cannot serve: no configuration, or no HDFS. Under Kerberos
        the cache is in the home dir of the login's user, as HDFS names it (a keytab's
        principal need not be the local user)."""
        if not conf_dir:
            return None
        core = read_site(os.path.join(conf_dir, "core-site.xml"))
        default_fs = core.get("fs.defaultFS", "")
        if not default_fs.startswith("hdfs://"):
            return None
        client = client_for(default_fs, conf_dir, user, login)
        if not kerberized(conf_dir):
            return cls(client, f"/user/{user}/{CACHE_DIR}")
        with failing_as("HDFS home directory (GETHOMEDIRECTORY)"):
            home = client.resolve(".")  # a relative path: the client asks for the home dir
        return cls(client, f"{home.rstrip('/')}/{CACHE_DIR}")

    def put(self, local: str) -> tuple[str, bool]:
        """(hdfs:// URI of `local`'s content, whether it was there already)."""
        with failing_as(f"HDFS cache at {self.root}"):
            return self._put(local)

    def _put(self, local: str) -> tuple[str, bool]:
        from hdfs.util import HdfsError

        final = f"{self.root}/{sha256(local)}{suffix(local)}"
        if self.client.status(final, strict=False) is not None:
            return f"hdfs://{final}", True
        private_dir(self.client, self.root)
        tmp = f"{final}.{uuid.uuid4().hex}.tmp"
        progress = Progress(f"uploading {os.path.basename(local)} to the HDFS cache",
                            os.path.getsize(local))
        with open(local, "rb") as f:
            self.client.write(tmp, data=Reading(f, progress), overwrite=True, permission="600")
        progress.finish()
        try:
            self.client.rename(tmp, final)
        except HdfsError:  # a concurrent submit renamed the same bytes there first
            self.client.delete(tmp)
            if self.client.status(final, strict=False) is None:
                raise
        return f"hdfs://{final}", False
