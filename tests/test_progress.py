"""Progress lines on stderr for the client's long steps (local -f copy, env unpack)."""

from __future__ import annotations

import io
import re
import sys
import tarfile

BIG = 70 * 2**20  # over PROGRESS_MIN_BYTES


def test_big_f_copy_says_bytes_and_rate(el_submit, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    with open(data / "blob.bin", "wb") as f:
        f.truncate(BIG)
    out = el_submit("-t", "standalone", "--local", "-f", str(data), "-c", "ls -l data/blob.bin")
    assert out.returncode == 0, out.stderr
    assert "tfyarn: copying -f (1 file) (70 MB) ..." in out.stderr
    assert re.search(r"copying -f \(1 file\): done, 70 MB in [\d.]+ s \(\d+ MB/s\)", out.stderr)


def test_small_steps_stay_quiet(el_submit, tmp_path):
    (tmp_path / "a.py").write_text("print(1)\n")
    out = el_submit("-t", "standalone", "--local", "-f", str(tmp_path / "a.py"), "-c", "true")
    assert out.returncode == 0 and "copying -f" not in out.stderr


def test_env_unpack_says_bytes_and_rate(el_submit, tmp_path):
    archive = tmp_path / "env.tar"
    with tarfile.open(archive, "w") as tar:
        script = f'#!/bin/sh\nexec {sys.executable} "$@"\n'.encode()
        for name, body, mode in (("bin/python", script, 0o755), ("lib/big.bin", None, 0o644)):
            info = tarfile.TarInfo(name)
            info.size, info.mode = (len(body) if body else BIG), mode
            tar.addfile(info, io.BytesIO(body or bytes(BIG)))
    out = el_submit("-t", "standalone", "--local", "-m", "virtual-env", "-m_arg", str(archive),
                    "-c", "true")
    assert out.returncode == 0, out.stderr
    assert re.search(r"unpacking env.tar: done, 70 MB in [\d.]+ s \(\d+ MB/s\)", out.stderr)
