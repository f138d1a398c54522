"""A task's own Kerberos login, from the keytab of a `--principal/--keytab` submit.

A YARN container gets HDFS delegation tokens, and the ResourceManager renews them, but
none lives past the NameNode's dfs.namenode.delegation.token.max-lifetime (7 days by
default, often less): a longer job then fails on its next HDFS call. With a keytab the
client ships it (private to the application, as Spark ships spark.kerberos.keytab to its
ApplicationMaster) and the launcher logs the tasks in themselves: `kinit -kt` into a
ticket cache in the container's work dir, renewed every KEYTAB_RELOGIN_S, and the tasks'
Hadoop clients use it instead of the token file (Hadoop's client re-reads the cache when
a connection's login fails). Owns that login; the client side is `client.appspec`.
Must not touch the user's own ticket cache, nor keep a password or keytab anywhere but
the container's private dir.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tfyarn.core.timing import KEYTAB_RELOGIN_S, KINIT_TIMEOUT_S

PRINCIPAL_VAR = "TFYARN_KRB5_PRINCIPAL"  # a keytab came with the job, for this principal
KEYTAB_FILE = ".tfyarn-krb5.keytab"  # its name in each container's work dir
CCACHE_FILE = ".tfyarn-krb5cc"  # the tasks' ticket cache, next to it


@dataclass(frozen=True)
class KeytabLogin:
    principal: str
    keytab: str
    ccache: str  # FILE:<path>

    @classmethod
    def of_job(cls, job_env: Mapping[str, str], workdir: str) -> KeytabLogin | None:
        """The login a job's env asks for (a keytab submit), else None (tokens only)."""
        principal = job_env.get(PRINCIPAL_VAR)
        if not principal:
            return None
        return cls(principal, os.path.join(workdir, KEYTAB_FILE),
                   f"FILE:{os.path.join(workdir, CCACHE_FILE)}")

    def login(self, env: Mapping[str, str]) -> str | None:
        """kinit from the keytab; why it failed (for the job's one error line), else None."""
        try:
            failed = kinit(self.principal, self.keytab, self.ccache, env)
        except FileNotFoundError:
            return (f"this node has no kinit (MIT Kerberos' krb5-user / krb5-workstation), "
                    f"which --keytab needs for the tasks' own login as {self.principal}; ask "
                    "the cluster's admins to install it, or submit without --keytab (the "
                    "job then lives on delegation tokens)")
        if failed is not None:
            return (f"kinit -kt {KEYTAB_FILE} {self.principal} failed on this node: {failed}; "
                    "check the node's krb5.conf names the principal's realm")
        return None

    def task_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """A task's env logged in by the ticket cache: the token file is dropped, else
        Hadoop's client would pick the tokens (which die) over the login."""
        out = {k: v for k, v in env.items() if k != "HADOOP_TOKEN_FILE_LOCATION"}
        out["KRB5CCNAME"] = self.ccache
        return out

    def keep(self, env: Mapping[str, str], done: threading.Event,
             tell: Callable[[str], None]) -> None:
        """Renew the ticket (a fresh kinit) every KEYTAB_RELOGIN_S until `done`; a failed
        renewal is told, and tried again at the next turn."""
        while not done.wait(KEYTAB_RELOGIN_S):
            problem = self.login(env)
            if problem:
                tell(problem)


def kinit(principal: str, keytab: str, ccache: str, env: Mapping[str, str]) -> str | None:
    """MIT's `kinit -kt KEYTAB -c CCACHE PRINCIPAL`: None when it worked, else its own
    words. FileNotFoundError where `env`'s PATH has no kinit."""
    binary = shutil.which("kinit", path=env.get("PATH"))
    if binary is None:
        raise FileNotFoundError("kinit")
    try:
        r = subprocess.run([binary, "-kt", keytab, "-c", ccache, principal], env=dict(env),
                           capture_output=True, text=True, timeout=KINIT_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    return None if r.returncode == 0 else (r.stderr.strip() or f"exit code {r.returncode}")
