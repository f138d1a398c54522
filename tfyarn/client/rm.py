"""The ResourceManager's REST API, for lifecycle commands that need no JVM.

`tfyarn status` and `tfyarn ls` only read application reports; starting skein's Java
driver for that costs seconds, one HTTP GET costs milliseconds. Owns: finding the RM's
web address(es) in HADOOP_CONF_DIR (HA and HTTPS included) and reading reports, lost
nodes, and each node's log aggregation (from the RM's web page: no REST call has it). On a
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
from html.parser import HTMLParser
from typing import Any

from tfyarn.core import capacity
from tfyarn.core.appreport import ACTIVE_STATES, ALL_STATES, AppReport
from tfyarn.core.timing import REST_TIMEOUT_S
from tfyarn.hdfs import spnego
from tfyarn.hdfs.siteconf import expand, read_site

__all__ = ["ACTIVE_STATES", "AGGREGATED", "ALL_STATES", "NotFound", "RestClient", "Unavailable",
           "aggregation_by_node", "in_vain"]


# a node's (or the application's) log aggregation that will not change (not NOT_START: an
# application just ended has not started it yet)
AGGREGATED = ("SUCCEEDED", "FAILED", "TIME_OUT", "DISABLED")


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
        """The REST API's answer at `ws/v1/cluster/PATH`, as JSON."""
        return json.loads(self._fetch(f"ws/v1/cluster/{path}", params, "application/json"))

    def _fetch(self, path: str, params: Mapping[str, str] | None, accept: str) -> str:
        query = urllib.parse.urlencode({**(params or {}), "user.name": self.user})
        last: Exception | None = None
        for base in self.bases:
            url = f"{base}/{path}?{query}"
            try:
                return self._read(url, accept)
            except urllib.error.HTTPError as exc:
                if exc.code == 404:
                    raise NotFound(path) from None
                last = exc
            except spnego.NegotiateRefused:  # a SpecError (so a ValueError): the login's
                raise
            except (urllib.error.URLError, OSError, ValueError) as exc:
                last = exc
        raise Unavailable(f"ResourceManager REST API did not answer: {last}")

    def _read(self, url: str, accept: str) -> str:
        """GET `url`; asked for SPNEGO (401 Negotiate), once more with a token."""
        try:
            with spnego.urlopen(url, {"Accept": accept}, self.login, REST_TIMEOUT_S) as resp:
                return resp.read().decode("utf-8")
        except spnego.NegotiateUnavailable as exc:
            raise Unavailable(str(exc)) from None

    def app(self, app_id: str) -> AppReport:
        return AppReport.from_rest(self.get(f"apps/{app_id}")["app"])

    def max_allocation_mb(self, queue: str | None) -> int | None:
        """The largest container `queue` (default: `default`) gives, in MB, as the
        Capacity Scheduler reports it (each queue's `maximumAllocation`); None where the
        scheduler does not say (another scheduler, no such queue)."""
        return max_allocation_mb(self.get("scheduler"), queue or "default")

    def lost_nodes(self) -> set[str]:
        """The nodes the RM counts as LOST (no heartbeat within its expiry), by node id."""
        return {n["id"] for n in listed(self.get("nodes", {"states": "LOST"}), "nodes", "node")}

    def aggregation_by_node(self, app_id: str) -> dict[str, str]:
        """Each node's log aggregation status for an application, while any is pending
        (`aggregation_by_node`, from the RM's own page)."""
        return aggregation_by_node(self._fetch(f"cluster/logaggregationstatus/{app_id}", None,
                                               "text/html"))

    def apps(self, tag: str, states: tuple[str, ...]) -> list[AppReport]:
        found = self.get("apps", {"applicationTags": tag, "states": ",".join(states)})
        return [AppReport.from_rest(a) for a in listed(found, "apps", "app")]


def listed(answer: Any, outer: str, inner: str) -> list[dict[str, Any]]:
    """The items of a REST list answer (`{"nodes": {"node": [...]}}`): the RM sends null
    for none and, from some calls, one item bare instead of a list of one."""
    items = ((answer or {}).get(outer) or {}).get(inner) or []
    return [items] if isinstance(items, dict) else list(items)


class _AggregationTable(HTMLParser):
    """The rows of the page's `LogAggregationStatus` table, each a list of its cells."""

    def __init__(self) -> None:
        super().__init__()
        self.rows: list[list[str]] = []
        self._inside = self._cell = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "table":
            self._inside = ("id", "LogAggregationStatus") in attrs
        elif self._inside and tag == "tr":
            self.rows.append([])
        elif self._inside and tag == "td" and self.rows:
            self.rows[-1].append("")
            self._cell = True

    def handle_endtag(self, tag: str) -> None:
        if tag == "td":
            self._cell = False
        elif tag == "table":
            self._inside = False

    def handle_data(self, data: str) -> None:
        if self._cell:
            self.rows[-1][-1] += data.strip()


def aggregation_by_node(page: str) -> dict[str, str]:
    """Node id -> its log aggregation status (NOT_START, RUNNING, SUCCEEDED...), from the
    RM's `cluster/logaggregationstatus/APP` page: Hadoop 3.3's REST API gives only the
    application's overall status, which stays RUNNING while one node never uploads (a
    lost one). Its table lists the nodes still reporting (none once all have)."""
    table = _AggregationTable()
    table.feed(page)
    return {row[0]: row[1] for row in table.rows if len(row) >= 2 and row[0]}


def in_vain(by_node: Mapping[str, str], lost: set[str]) -> list[str]:
    """The nodes still to upload (`aggregation_by_node`) when every one of them is lost:
    a lost node never uploads, so waiting on is in vain (YARN itself waits out its
    log-aggregation-status time-out, 10 minutes by default); [] while a live one is
    still at it."""
    pending = {node for node, status in by_node.items() if status not in AGGREGATED}
    return sorted(pending) if pending and pending <= lost else []


def max_allocation_mb(scheduler: Mapping[str, Any], queue: str) -> int | None:
    """A queue's `maximumAllocation` memory in a `/ws/v1/cluster/scheduler` answer,
    found by its name or path (`default`, `root.default`)."""
    most = capacity.queue_maximum(scheduler, queue)
    return most.memory_mb if most is not None and most.memory_mb > 0 else None
