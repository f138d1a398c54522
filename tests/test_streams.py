"""Children's output pumped into sinks: on a thread per pump, or many pumps on one
`PumpHub` thread (a local launcher serving hundreds of tasks), with the same result."""

from __future__ import annotations

import io
import subprocess
import time

from tfyarn.system import streams

# three whole lines, a line longer than what a pump reads at once, and a last line
# without its newline
SCRIPT = ('printf "one %s\\ntwo\\n" "$I"; head -c 200000 /dev/zero | tr "\\0" x; '
          'printf "\\nLOOK here\\n"; printf "last %s" "$I"')


def pumped(n: int, hub: streams.PumpHub | None) -> list[tuple[bytes, list[str], bool]]:
    """What n real children's stdout became: each pump's sink, tail and notice."""
    children = [subprocess.Popen(["bash", "-c", SCRIPT], stdout=subprocess.PIPE,
                                 env={"I": str(i), "PATH": "/usr/bin:/bin"}) for i in range(n)]
    sinks = [io.BytesIO() for _ in children]
    pumps = [streams.LinePump(c.stdout, sink, keep=3, prefix=f"[{i}] ".encode(),
                              notice=lambda line: line.startswith("LOOK"), hub=hub)
             for i, (c, sink) in enumerate(zip(children, sinks, strict=True))]
    for child, pump in zip(children, pumps, strict=True):
        assert child.wait(timeout=30) == 0
        pump.join(timeout=30)
        assert pump.ended.is_set() and pump.stream.closed
    return [(sink.getvalue(), list(p.tail), p.noticed) for sink, p in zip(sinks, pumps,
                                                                         strict=True)]


def test_one_hub_pumps_many_children_as_a_thread_each_does():
    hub = streams.PumpHub()
    together, alone = pumped(40, hub), pumped(40, None)
    # the same output; of a line longer than one read only its first piece is kept
    # (cut), and the pieces may differ
    assert [(out, noticed) for out, _, noticed in together] == \
        [(out, noticed) for out, _, noticed in alone]
    for i, (out, tail, noticed) in enumerate(together):
        lines = out.split(b"\n")
        assert lines[:2] == [f"[{i}] one {i}".encode(), f"[{i}] two".encode()]
        assert lines[2] == f"[{i}] ".encode() + b"x" * 200000  # one prefix for a long line
        assert lines[3:] == [f"[{i}] LOOK here".encode(), f"[{i}] last {i}".encode(), b""]
        assert tail[-2:] == ["LOOK here", f"last {i}"] and noticed
    assert hub.thread is not None and hub.thread.is_alive()  # the one thread, for all


def test_a_failed_sink_is_dropped_and_the_child_still_drained():
    class Broken(io.BytesIO):
        def write(self, data: bytes) -> int:
            raise BrokenPipeError

    child = subprocess.Popen(["bash", "-c", "head -c 1000000 /dev/zero; echo; echo end"],
                             stdout=subprocess.PIPE)
    pump = streams.LinePump(child.stdout, Broken(), hub=streams.PumpHub())
    assert child.wait(timeout=30) == 0  # never blocked on a full pipe
    pump.join(timeout=30)
    assert list(pump.tail)[-1] == "end" and pump.sink.out is None


def until(predicate) -> None:
    deadline = time.monotonic() + 30
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_a_line_written_in_two_parts_stays_whole_in_a_shared_log():
    """A task writes a line's text, then its newline (print, unbuffered); another task's
    line comes in between. One hub pumps both into one log: each line stays whole."""
    hub, log = streams.PumpHub(), io.BytesIO()
    first = subprocess.Popen(["bash", "-c", 'printf "half"; read -r; printf " done\\n"'],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    second = subprocess.Popen(["bash", "-c", "read -r; echo other"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE)
    pumps = [streams.LinePump(first.stdout, log, prefix=b"[a] ", hub=hub),
             streams.LinePump(second.stdout, log, prefix=b"[b] ", hub=hub)]
    until(lambda: pumps[0].held == b"half")  # read, and held: its line has not ended
    for child, pump in zip((second, first), reversed(pumps), strict=True):
        child.stdin.write(b"go\n")
        child.stdin.close()  # (communicate would read the pipe the pump reads)
        assert child.wait(timeout=30) == 0
        pump.join(timeout=30)
    assert log.getvalue() == b"[b] other\n[a] half done\n"
