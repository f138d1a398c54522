"""Keras users on YARN: the tutorials' `model.fit` under MultiWorkerMirroredStrategy and
ParameterServerStrategy trains through Keras 2 (tf-keras, TF_USE_LEGACY_KERAS=1)."""

from __future__ import annotations

import re

import pytest
from conftest import REPO, aggregated_logs

pytestmark = pytest.mark.concurrent  # may share the cluster (integration/conftest.py)

EXAMPLE = REPO / "examples" / "keras"
SIZE = ("-wc", "1", "-wm", "1024", "-pc", "1", "-pm", "1024")


def losses(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"final_loss=([0-9.]+)", text)]


def test_model_fit_under_multi_worker_mirrored_strategy_on_yarn(el_submit):
    out, app_id = el_submit("-t", "tensorflow-worker", "-wn", "2", *SIZE, "--env",
                            "TF_USE_LEGACY_KERAS=1", "-f", f"{EXAMPLE}/.", "-c",
                            "python keras_fit.py")
    assert out.returncode == 0, out.stderr[-3000:]
    found = losses(aggregated_logs(app_id))
    assert len(found) == 2 and max(found) < 5.0, found


def test_model_fit_under_parameter_server_strategy_on_yarn(el_submit):
    out, app_id = el_submit("-t", "tensorflow-ps", "-pn", "1", "-wn", "3", "-x", "True", *SIZE,
                            "--env", "TF_USE_LEGACY_KERAS=1", "-f", f"{EXAMPLE}/.", "-c",
                            "python keras_fit.py")
    assert out.returncode == 0, out.stderr[-3000:]
    found = losses(aggregated_logs(app_id, "chief:0"))
    assert len(found) == 1 and found[0] < 5.0, found
