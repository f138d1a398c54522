"""Hadoop's *-site.xml files, read the way Hadoop's client does (enough of it for tfyarn).

Sits in the hdfs layer, below the client: WebHDFS, the HDFS cache and the RM REST client
all read the same HADOOP_CONF_DIR. Owns the one decision of how a process reaches a
Hadoop filesystem (`route`).
Must not write the site's own configuration: amended copies only, in dirs of tfyarn's own.
"""

from __future__ import annotations

import os
import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping

HDFS_SITE = "hdfs-site.xml"
YARN_SITE = "yarn-site.xml"
WEB_SCHEMES = ("hdfs", "viewfs")  # what WebHDFS serves, given the NameNode's address


def simple_auth(site: Mapping[str, str]) -> bool:
    """Whether the site's Hadoop takes users by name (no Kerberos): `site` holds
    core-site's values."""
    return site.get("hadoop.security.authentication", "simple").lower() == "simple"


def route(url: str, site: Mapping[str, str], spnego: bool, tf_schemes: tuple[str, ...] = (),
          web_schemes: tuple[str, ...] = WEB_SCHEMES) -> str:
    """How this process reaches `url`: "file" (a local path); "tensorflow" (TF is loaded
    with a filesystem for the scheme: tfyarn's hdfs:// plugin, in a task); "webhdfs"
    (HTTP, no Hadoop install: simple auth, or Kerberos where this process can sign in by
    SPNEGO, when the site has WebHDFS on); else "hadoop" (Hadoop's own client, libhdfs:
    any filesystem, a YARN container's delegation tokens). `site`: core-site and
    hdfs-site's values."""
    scheme = url.split("://", 1)[0] if "://" in url else "file"
    if scheme == "file":
        return "file"
    if scheme in tf_schemes:
        return "tensorflow"
    simple = simple_auth(site)
    web_on = (site.get("dfs.webhdfs.enabled") or "true").lower() == "true"
    return "webhdfs" if web_on and (simple or spnego) and scheme in web_schemes else "hadoop"


def read_site(path: str) -> dict[str, str]:
    """name -> value of a Hadoop *-site.xml (missing file: empty)."""
    try:
        root = ET.parse(path).getroot()
    except (OSError, ET.ParseError):
        return {}
    out = {}
    for prop in root.iter("property"):
        name, value = prop.findtext("name"), prop.findtext("value")
        if name is not None:
            out[name.strip()] = (value or "").strip()
    return out


def kerberized(conf_dir: str | None) -> bool:
    """Whether the cluster at `conf_dir` wants Kerberos from its clients."""
    if not conf_dir:
        return False
    core = read_site(os.path.join(conf_dir, "core-site.xml"))
    return core.get("hadoop.security.authentication", "simple").strip().lower() == "kerberos"


def expand(value: str, conf: Mapping[str, str]) -> str:
    """Hadoop's ${name} substitution (one level is all RM addresses use)."""
    return re.sub(r"\$\{([^}]+)\}", lambda m: conf.get(m.group(1), m.group(0)), value)


# A client closing an HDFS file asks the NameNode to complete it; when the DataNode's
# report of the last block has not arrived yet (about a third of closes on the sandbox),
# the client sleeps `initial.delay.ms` (Hadoop's default: 400 ms) before asking again,
# doubling each time. skein's driver closes 6+ files per submit (one script per
# container), so these sleeps were most of a submit. 10 ms doubling 10 times waits at
# most ~10 s in all, about what the default's 5 retries allow (12.4 s).
CLIENT_DEFAULTS = {
    "dfs.client.block.write.locateFollowingBlock.initial.delay.ms": "10",
    "dfs.client.block.write.locateFollowingBlock.retries": "10",
}


# YARN's client submits, then asks for the application's report until it is past
# SUBMITTED, sleeping the poll interval between (Hadoop's default: 200 ms) even when the
# RM accepts it a few milliseconds later: 3 submits in 5 on the sandbox waited 200 ms
# for nothing.
YARN_CLIENT_DEFAULTS = {
    "yarn.client.app-submission.poll-interval": "20",
}


def with_client_defaults(site_xml: str | None, props: Mapping[str, str]) -> str | None:
    """A *-site.xml's text with `props` first in it, so a value of the site's own
    (later in the file) still wins; None when the text has no <configuration> element."""
    if site_xml is None:
        site_xml = '<?xml version="1.0"?>\n<configuration>\n</configuration>\n'
    added = "".join(f"\n  <property><name>{k}</name><value>{v}</value></property>"
                    for k, v in props.items())
    out, n = re.subn(r"<configuration\b[^>]*?(?<!/)>", lambda m: m.group(0) + added,
                     site_xml, count=1)
    return out if n else None


def client_conf(conf_dir: str, dest: str) -> str:
    """`dest` made a Hadoop client configuration that is `conf_dir`'s (a link to each of
    its entries) with CLIENT_DEFAULTS in hdfs-site.xml and YARN_CLIENT_DEFAULTS in
    yarn-site.xml: what skein's driver is started with. `conf_dir` itself where that
    cannot be made (a site file unreadable or without <configuration>, `dest` not
    writable): only speed is lost."""
    amended = {}
    for name, props in ((HDFS_SITE, CLIENT_DEFAULTS), (YARN_SITE, YARN_CLIENT_DEFAULTS)):
        try:
            with open(os.path.join(conf_dir, name), encoding="utf-8") as f:
                text: str | None = f.read()
        except FileNotFoundError:
            text = None
        except (OSError, UnicodeDecodeError):
            return conf_dir
        out = with_client_defaults(text, props)
        if out is None:
            return conf_dir
        amended[name] = out
    try:
        os.makedirs(dest, exist_ok=True)
        for name in os.listdir(conf_dir):
            if name not in amended:
                os.symlink(os.path.join(os.path.abspath(conf_dir), name),
                           os.path.join(dest, name))
        for name, text in amended.items():
            with open(os.path.join(dest, name), "w", encoding="utf-8") as f:
                f.write(text)
    except OSError:  # unreadable dir, full disk: the site's own configuration serves
        return conf_dir
    return dest
