"""The store's typed records: one codec, fields checked by name, the format checked."""

from __future__ import annotations

import ast
import dataclasses
import json
from pathlib import Path

import pytest

from tfyarn.core.jobspec import JobSpec, Resources, Role
from tfyarn.core.records import (
    FORMAT,
    Attempt,
    Cluster,
    JobTasks,
    JobView,
    Outcome,
    Rank,
    RankTable,
    RecordError,
    Started,
    TaskEnd,
    TaskRow,
    TensorBoard,
    Wanted,
)
from tfyarn.core.tfconfig import Task
from tfyarn.protocol import kv as kvmod
from tfyarn.protocol import taskstate
from tfyarn.runtime.driver import run

TFYARN = Path(__file__).resolve().parent.parent / "tfyarn"


def test_every_record_comes_back_as_it_went():
    end = TaskEnd(-9, "killed", tail=("Traceback", "  boom"), time=3.5, host="n1",
                  addr="n1:7", rank=2)
    records = [
        end, Started(42, 1.25), Cluster({"ps": ("a:1",), "worker": ("b:2", "c:3")}),
        RankTable({"worker:0": Rank(0, 2, 0, 1, 0, 2, "n1")}, "n1:5", None),
        JobTasks(("ps:0", "worker:0")), TensorBoard(url="http://n1:6006/"),
        Wanted(1, 2, (Attempt(0, "FAILED", "worker:0 exited with code 1", "worker:0",
                              "permanent", {"worker:0": end}),)),
        Outcome("FAILED", "m", "worker:0", -9, ("x",), {"worker:0": end}, "retryable", 1,
                (Attempt(0, "FAILED", "first"),)),
        JobView("j", "tensorflow-ps", "application_1_0001", "FAILED", "2 min", 1, 2,
                (TaskRow("worker:0", "n1:7", "failed", "exit 1", "http://n1:8042/x", "step 9"),
                 TaskRow("ps:0", "-", "stopped", "", None)), "m", "worker:0", ("boom",),
                ("attempt 1: FAILED",), None, False, ("goodput 50%: ...",), "alice", "q",
                1795700000.5, 1795700120.0, ("bob", "group:ml")),
    ]
    for rec in records:
        back = type(rec).from_json(rec.to_json())
        assert back == rec and type(back.to_json()) is str
        # the same text dataclasses.asdict gives (to_json skips its deep copy: #46)
        assert rec.to_json() == json.dumps({"format": FORMAT, **dataclasses.asdict(rec)},
                                           sort_keys=True)
    assert isinstance(Wanted.from_json(records[6].to_json()).earlier[0].tasks["worker:0"],
                      TaskEnd)


def test_a_field_unknown_or_missing_is_named():
    d = json.loads(TaskEnd(0).to_json())
    with pytest.raises(RecordError, match=r"exit/worker:1: a TaskEnd record with unknown "
                                          r"fields gpu; missing fields rank: the gateway"):
        TaskEnd.from_json(json.dumps({**{k: v for k, v in d.items() if k != "rank"},
                                      "gpu": 1}), "exit/worker:1")
    with pytest.raises(RecordError, match=r"status.tasks.worker:0.code: expected int, "
                                          r"found 'three'"):
        Outcome.from_json(Outcome("FAILED", "m", tasks={"worker:0": TaskEnd(3)}).to_json()
                          .replace('"code": 3', '"code": "three"'), "status")


def test_a_kept_page_of_an_older_tfyarn_reads_without_the_fields_added_since():
    """A page kept before `view_acls` existed (JobView.LATER) reads as the owner's alone;
    any other missing field is still named."""
    d = json.loads(JobView("j", "standalone", "application_1_0001", "SUCCEEDED", "1 s", 0, 1,
                           (), user="alice", view_acls=("bob",)).to_json())
    del d["view_acls"]
    assert JobView.from_json(json.dumps(d)).view_acls == ()
    del d["user"]
    with pytest.raises(RecordError, match="missing fields user"):
        JobView.from_json(json.dumps(d))


def test_another_format_fails_loudly_saying_what_to_do():
    newer = json.loads(Started(1, 2.0).to_json()) | {"format": FORMAT + 1}
    with pytest.raises(RecordError) as err:
        Started.from_json(json.dumps(newer), "started/worker:0")
    assert str(err.value).startswith(f"started/worker:0 was written in tfyarn's store format "
                                     f"{FORMAT + 1}, and this tfyarn reads format {FORMAT}")
    assert "install the same tfyarn in both" in str(err.value)
    with pytest.raises(RecordError, match="format None"):  # a record from before formats
        TaskEnd.from_json('{"code": 0, "stopped": false}', "exit/worker:0")
    with pytest.raises(RecordError, match="not a tfyarn record"):
        TaskEnd.from_json("[1, 2]")


def test_a_launcher_of_another_version_fails_the_job_by_name(tmp_path):
    """The driver never reads another version's exit record as a success: the task
    fails, permanently, and the job's message says what to install."""
    spec = JobSpec("t", "tensorflow-worker", (Role("worker", 1, Resources(256, 1)),), "true",
                   max_restarts=2)
    store = kvmod.DirKV(str(tmp_path))
    gang = kvmod.Scoped(store, 0)
    gang.put(kvmod.addr_key(Task("worker", 0)), "127.0.0.1:1")
    gang.put(kvmod.exit_key(Task("worker", 0)), json.dumps({"code": 0, "format": 0}))
    out = run(spec, store)
    assert out.state == "FAILED" and out.cause == "permanent" and out.attempt == 0
    assert out.message.startswith("worker:0: exit/worker:0 was written in tfyarn's store "
                                  f"format 0, and this tfyarn reads format {FORMAT}")
    row = taskstate.current(store)[2][0]
    assert row.state is taskstate.State.FAILED and "store format 0" in row.detail()


def test_only_the_records_module_reads_or_writes_json_where_the_store_is_used():
    """Modules that use the store never build or parse JSON themselves: what crosses
    the store goes through `tfyarn.core.records`."""
    offenders = []
    for path in TFYARN.rglob("*.py"):
        tree = ast.parse(path.read_text())
        names = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)
                 for a in n.names}
        mods = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
        uses_store = "tfyarn.protocol" in mods and "kv" in names or "tfyarn.protocol.kv" in mods
        if uses_store and "json" in names:
            offenders.append(str(path.relative_to(TFYARN)))
    assert offenders == []


def test_a_started_record_from_a_launcher_before_milestones_still_reads():
    """Started's milestones (#46) are LATER fields: an older launcher's record (pid and
    time only) reads, its milestones None; a new one round-trips them."""
    from tfyarn.core.records import FORMAT, FORMAT_KEY, Started

    old = Started.from_json(json.dumps({FORMAT_KEY: FORMAT, "pid": 7, "time": 1.5}))
    assert (old.pid, old.time, old.launched, old.registered, old.cluster) == (7, 1.5, None,
                                                                              None, None)
    new = Started(8, 4.0, launched=1.0, registered=2.0, cluster=3.0)
    assert Started.from_json(new.to_json()) == new
