"""Which GPUs YARN gave this container: its NodeManager's GPU resource page
(`/ws/v1/node/resources/yarn.io%2Fgpu`, Hadoop's NMGpuResourceInfo; the shapes it takes
are in tests/fixtures/hadoop-3.3.6-gpus/), filtered by the container's CONTAINER_ID.

With GPU isolation (cgroups, YARN's docker runtime) the NodeManager assigns each container
its devices and lists them there; a container may use only those, and CUDA must be told
which (CUDA_VISIBLE_DEVICES), or it counts from card 0. Without isolation (the
DefaultContainerExecutor) the page lists none and every card of the node is visible.
Asked once per container by its launcher before its tasks start; on a Kerberized cluster
through SPNEGO as the job's keytab login when it has one.
Must not choose a task's devices (`core.tfconfig.container_devices` does) nor fail a task:
an answer it cannot get is a line in the task's log, saying why.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import urllib.error
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tfyarn.core.timing import REST_TIMEOUT_S
from tfyarn.hdfs import spnego

GPU_PAGE = "/ws/v1/node/resources/yarn.io%2Fgpu"


@dataclass(frozen=True)
class Assignment:
    """The container's devices by YARN's index (nvidia-smi's and CUDA's numbering), or
    None where the node assigns none; `why` says so, for the task's log."""

    devices: tuple[str, ...] | None
    why: str = ""
    card_mib: int | None = None  # the smallest card's memory, where the answer says


def card_mib_in(answer: Mapping[str, Any]) -> int | None:
    """The smallest card's memory (MiB) in the NodeManager's answer, None where it lists
    no card: what a task's --gpu-memory-fraction is a share of."""
    sizes = [int((g.get("gpuMemoryUsage") or {}).get("totalMemoryMiB") or 0)
             for g in ((answer.get("gpuDeviceInformation") or {}).get("gpus") or [])]
    sizes = [s for s in sizes if s > 0]
    return min(sizes) if sizes else None


def local_card_mib(run: Any = subprocess.run) -> int | None:
    """The smallest card's memory (MiB) as this host's nvidia-smi says, None without one
    (a local job's --gpu-memory-fraction then caps PyTorch only)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        out = run([smi, "--query-gpu=memory.total", "--format=csv,noheader,nounits"],
                  capture_output=True, text=True, timeout=REST_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    sizes = [int(x) for x in out.split() if x.strip().isdigit()]
    return min(sizes) if sizes else None


def assigned_in(answer: Mapping[str, Any], container_id: str) -> tuple[str, ...] | None:
    """The indexes the NodeManager's answer assigns to `container_id`, in order; None when
    it lists no device as YARN's (no isolation, or no GPU plugin: `{}`)."""
    if not answer.get("totalGpuDevices"):
        return None
    mine = [d for d in answer.get("assignedGpuDevices") or []
            if d.get("containerId") == container_id]
    return tuple(str(d["index"]) for d in sorted(mine, key=lambda d: int(d["index"])))


def ask_node(env: Mapping[str, str], login: spnego.Negotiator | None) -> Assignment:
    """Ask this container's NodeManager (NM_HOST, NM_HTTP_PORT, CONTAINER_ID: YARN sets
    them in every container) which GPUs it assigned to the container."""
    host, port, cid = env.get("NM_HOST"), env.get("NM_HTTP_PORT"), env.get("CONTAINER_ID")
    if not (host and port and cid):
        return Assignment(None, "not in a YARN container (no NM_HOST, NM_HTTP_PORT, "
                                "CONTAINER_ID)")
    url = f"http://{host}:{port}{GPU_PAGE}"
    try:
        with spnego.urlopen(url, {"Accept": "application/json"}, login,
                            REST_TIMEOUT_S) as resp:
            answer = json.loads(resp.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        if spnego.challenged(exc.code, exc.headers.get("WWW-Authenticate")):
            return Assignment(None, f"{url} asks for a Kerberos login (SPNEGO) and this "
                                    "container has none: submit with --keytab to give it one")
        return Assignment(None, f"{url} answered HTTP {exc.code}")
    except (urllib.error.URLError, OSError, ValueError, spnego.NegotiateRefused,
            spnego.NegotiateUnavailable) as exc:
        return Assignment(None, f"{url} did not answer: {exc}")
    answer = answer if isinstance(answer, dict) else {}
    devices = assigned_in(answer, cid)
    if devices is None:
        return Assignment(None, f"node {host} isolates no GPU (its NodeManager assigns "
                                "devices to no container)", card_mib_in(answer))
    return Assignment(devices, "", card_mib_in(answer))
