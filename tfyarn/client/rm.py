"""The ResourceManager's REST API, for lifecycle commands that need no JVM.

`tfyarn status` and `tfyarn ls` only read application reports; starting skein's Java
driver for that costs seconds, one HTTP GET costs milliseconds. Owns: finding the RM's
web address(es) in HADOOP_CONF_DIR (HA and HTTPS included) and reading reports. On a
Kerberized cluster an RM that answers 401 `Negotiate` is asked again with a SPNEGO token
(`hdfs.spnego`) of the client's login. Raises `Unavailable` where REST cannot serve (no
configuration, no answer, no GSS-API library here), and the caller falls back to skein;
a login that cannot make a token is the caller's error (`spnego.NegotiateRefused`).
Must not write to the cluster: reports and lists only (a kill goes through skein).
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfyarn.core import capacity
from tfyarn.core.appreport import ACTIVE_STATES, ALL_STATES, AppReport
from tfyarn.core.timing import REST_TIMEOUT_S
from tfyarn.hdfs import spnego
from tfyarn.hdfs.siteconf import expand, read_site

__all__ = ["ACTIVE_STATES", "ALL_STATES", "NotFound", "RestClient", "Unavailable"]


class Unavailable(Exception):
    """REST cannot answer here; use skein instead."""


class NotFound(Exception):
    """The RM answered: no such application."""


def web_addresses(conf: Mapping[str, str]) -> list[str]:
    """Base URLs of the RM web service(s), active-first order unknown (HA: all of them)."""
    https = conf.get("yarn.http.policy", "HTTP_ONLY").upper() == "HTTPS_ONLY"
    key, port, scheme = (("yarn.resourcemanager.webapp.https.address", 8090, "https") if https
                         else ("yarn.resourcemanager.webapp.address", 8088, "http"))
    ids = [""]
    if conf.get("yarn.resourcemanager.ha.enabled", "false").lower() == "true":
        ids = [f".{i.strip()}" for i in conf.get("yarn.resourcemanager.ha.rm-ids", "").split(",")
               if i.strip()] or [""]
    urls = []
    for rid in ids:
        host = conf.get(f"yarn.resourcemanager.hostname{rid}") or conf.get(
            "yarn.resourcemanager.hostname", "0.0.0.0")
        addr = expand(conf.get(f"{key}{rid}") or conf.get(key) or f"{host}:{port}",
                       {**conf, "yarn.resourcemanager.hostname": host})
        urls.append(f"{scheme}://{addr.replace('0.0.0.0', 'localhost')}")
    return urls


@dataclass(frozen=True)
class RestClient:
    """Reads application reports from the RM over HTTP."""

    bases: tuple[str, ...]
    user: str
    login: spnego.Negotiator | None = None  # a Kerberized cluster's: SPNEGO when asked

    @classmethod
    def from_conf_dir(cls, conf_dir: str | None, user: str,
                      login: spnego.Negotiator | None = None) -> RestClient:
        if not conf_dir or not os.path.isdir(conf_dir):
            raise Unavailable("no HADOOP_CONF_DIR")
        yarn_conf = read_site(os.path.join(conf_dir, "yarn-site.xml"))
        return cls(tuple(web_addresses(yarn_conf)), user, login)

    def get(self, path: str, params: Mapping[str, str] | None = None) -> Any:
        query = urllib.parse.urlencode({**(params or {}), "user.name": self.user})
        last: Exception | None = None
        for base in self.bases:
            url = f"{base}/ws/v1/cluster/{path}?{query}"
            try:
                return self._read(url)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise NotFound(path) from None
                last = exc
            except spnego.NegotiateRefused:  # a SpecError (so a ValueError): the login's
                raise
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
        raise Unavailable(f"ResourceManager REST API did not answer: {last}")

    def _read(self, url: str) -> Any:
        """GET `url` as JSON; asked for SPNEGO (401 Negotiate), once more with a token."""
        try:
            with spnego.urlopen(url, {"Accept": "application/json"}, self.login,
                                REST_TIMEOUT_S) as resp:
                return json.loads(resp.read().decode("utf-8"))
        except spnego.NegotiateUnavailable as exc:
            raise Unavailable(str(exc)) from None

    def app(self, app_id: str) -> AppReport:
        return AppReport.from_rest(self.get(f"apps/{app_id}")["app"])

    def max_allocation_mb(self, queue: str | None) -> int | None:
        """The largest container `queue` (default: `default`) gives, in MB, as the
        Capacity Scheduler reports it (each queue's `maximumAllocation`); None where the
        scheduler does not say (another scheduler, no such queue)."""
        return max_allocation_mb(self.get("scheduler"), queue or "default")

    def apps(self, tag: str, states: tuple[str, ...]) -> list[AppReport]:
        found = self.get("apps", {"applicationTags": tag, "states": ",".join(states)})
        return [AppReport.from_rest(a) for a in ((found or {}).get("apps") or {}).get("app")
                or []]


def max_allocation_mb(scheduler: Mapping[str, Any], queue: str) -> int | None:
    """A queue's `maximumAllocation` memory in a `/ws/v1/cluster/scheduler` answer,
    found by its name or path (`default`, `root.default`)."""
    most = capacity.queue_maximum(scheduler, queue)
    return most.memory_mb if most is not None and most.memory_mb > 0 else None
