"""Kerberos on the gateway: the login checked before anything is staged or submitted.

On a Kerberized cluster (core-site.xml: hadoop.security.authentication=kerberos) a client
with no ticket, an expired one, or a keytab without the principal's key is refused only
deep in skein's Java driver, after staging, with a Java stack trace. Here it is one
`Error:` line (exit 2) naming the principal and what to run. Owns: reading a keytab's
principals (MIT's file format, no JVM), asking the ticket cache (`klist`, where MIT's
tools are), and the words of those errors.
Must not run kinit into the user's own ticket cache, nor write the process environment.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import struct
import subprocess
import tempfile
from collections.abc import Iterator, Mapping

from tfyarn.core.errors import EnvironmentMissing, SpecError
from tfyarn.core.timing import KLIST_TIMEOUT_S
from tfyarn.hdfs.siteconf import kerberized
from tfyarn.hdfs.spnego import Negotiator
from tfyarn.runtime.keytab import kinit


def keytab_principals(path: str) -> list[str]:
    """The principals (`name/inst@REALM`) a keytab holds keys for, in file order, once
    each. MIT's format (version 0x0501/0x0502): entries of a signed 32-bit size (negative:
    a hole), components and realm as counted strings. Raises ValueError on another file."""
    with open(path, "rb") as f:
        data = f.read()
    if len(data) < 2 or data[0] != 5 or data[1] not in (1, 2):
        raise ValueError("not a Kerberos keytab (no MIT keytab header)")
    order = ">" if data[1] == 2 else "="
    out: list[str] = []
    pos = 2
    while pos + 4 <= len(data):
        (size,) = struct.unpack_from(f"{order}i", data, pos)
        pos += 4
        if size <= 0:
            pos += -size
            continue
        entry, pos = data[pos:pos + size], pos + size
        name = _entry_principal(entry, order)
        if name not in out:
            out.append(name)
    return out


def _entry_principal(entry: bytes, order: str) -> str:
    (count,) = struct.unpack_from(f"{order}H", entry, 0)
    if order == "=":  # version 1 counted the realm among the components
        count -= 1
    pos = 2
    parts = []
    for _ in range(count + 1):
        (n,) = struct.unpack_from(f"{order}H", entry, pos)
        parts.append(entry[pos + 2:pos + 2 + n].decode("utf-8", "replace"))
        pos += 2 + n
    realm, components = parts[0], parts[1:]
    return f"{'/'.join(components)}@{realm}"


def check_keytab(principal: str, keytab: str) -> None:
    """--keytab must hold a key for --principal (a realm-less principal matches the
    keytab's entry in any realm)."""
    fix = f"pass the keytab made for {principal}, or check --principal's spelling"
    try:
        held = keytab_principals(keytab)
    except (OSError, ValueError, struct.error) as exc:
        raise SpecError(f"--keytab {keytab}: cannot read it as a keytab ({exc}); {fix}") from None
    wanted = principal if "@" in principal else None
    if not any(h == wanted or (wanted is None and h.split("@")[0] == principal) for h in held):
        raise SpecError(f"--keytab {keytab} holds no key for {principal} (it has: "
                        f"{', '.join(held) or 'none'}); {fix}")


def ticket_problem(env: Mapping[str, str]) -> str | None:
    """Why the ticket cache cannot log in (none, expired), else None; None too where
    MIT's `klist` is not here to ask (skein's driver then says what it finds)."""
    klist = shutil.which("klist", path=env.get("PATH"))
    if klist is None:
        return None
    try:
        valid = subprocess.run([klist, "-s"], env=dict(env), timeout=KLIST_TIMEOUT_S,
                               capture_output=True, check=False).returncode == 0
        if valid:
            return None
        shown = subprocess.run([klist], env=dict(env), timeout=KLIST_TIMEOUT_S,
                               capture_output=True, text=True, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    who = next((x.split(":", 1)[1].strip() for x in shown.stdout.splitlines()
                if x.startswith("Default principal:")), None)
    cache = env.get("KRB5CCNAME") or "the default ticket cache"
    if who is None:
        return f"no Kerberos ticket in {cache}: run kinit YOU@REALM (or kinit -kt KEYTAB " \
               "YOU@REALM), or pass --principal and --keytab"
    return f"the Kerberos ticket of {who} in {cache} has expired: run kinit {who} (or " \
           f"kinit -kt KEYTAB {who}), or pass --principal {who} --keytab KEYTAB"


def login(conf_dir: str | None, principal: str | None, keytab: str | None,
          ccache: str | None) -> Negotiator | None:
    """How this client proves itself to the cluster's web services (SPNEGO): the keytab
    when given, else the ticket cache; None on a cluster without Kerberos."""
    if not kerberized(conf_dir):
        return None
    if principal and keytab:
        return Negotiator(principal, keytab)
    return Negotiator(ccache=ccache)


def check_login(conf_dir: str | None, principal: str | None, keytab: str | None,
                env: Mapping[str, str]) -> None:
    """Refuse, before any I/O to the cluster, a login that cannot work."""
    if principal and keytab:
        check_keytab(principal, keytab)
        return
    if kerberized(conf_dir):
        problem = ticket_problem(env)
        if problem:
            raise SpecError(problem)


@contextlib.contextmanager
def keytab_env(principal: str | None, keytab: str | None,
               env: Mapping[str, str]) -> Iterator[dict[str, str]]:
    """`env` for a Hadoop command tfyarn runs (`yarn logs`): with a keytab, a ticket cache
    of its own, made by `kinit -kt` and removed after (the user's cache is not touched)."""
    if not (principal and keytab):
        yield dict(env)
        return
    with tempfile.TemporaryDirectory(prefix="tfyarn-krb5-") as tmp:
        cache = f"FILE:{os.path.join(tmp, 'ccache')}"
        try:
            failed = kinit(principal, keytab, cache, env)
        except FileNotFoundError:
            raise EnvironmentMissing("--keytab needs MIT Kerberos' kinit here (krb5-user / "
                                     "krb5-workstation); or kinit yourself and drop "
                                     "--keytab") from None
        if failed is not None:
            raise SpecError(f"kinit -kt {keytab} {principal} failed: {failed}; pass the "
                            f"keytab made for {principal}")
        yield {**env, "KRB5CCNAME": cache}
