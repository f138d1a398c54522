"""Hadoop's *-site.xml files, read the way Hadoop's client does (enough of it for tfyarn).

Sits in the hdfs layer, below the client: WebHDFS, the HDFS cache and the RM REST client
all read the same HADOOP_CONF_DIR.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping


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


def expand(value: str, conf: Mapping[str, str]) -> str:
    """Hadoop's ${name} substitution (one level is all RM addresses use)."""
    return re.sub(r"\$\{([^}]+)\}", lambda m: conf.get(m.group(1), m.group(0)), value)
