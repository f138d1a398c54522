# %% [markdown]
# # Census from a notebook, through tfyarn's Python API
#
# The cells of a Jupyter notebook on the cluster's gateway, kept as a script (`# %%`
# cells): VS Code and Jupytext open it as a notebook (`jupytext --to ipynb
# census_api.py`), and `python census_api.py` runs it. It submits the census example
# (`examples/census`), follows its output, waits for the outcome and reads the accuracy
# from the logs. It runs the job locally (`local=True`); to submit it to the cluster that
# HADOOP_CONF_DIR names, pass `--yarn` to the script or set CENSUS_ON_YARN=1.

# %%
import os
import sys
from pathlib import Path

import tfyarn

# a script knows its file; a notebook's kernel starts in the notebook's dir, and its
# sys.argv is the kernel's own
SCRIPT = globals().get("__file__")
HERE = Path(SCRIPT).resolve().parent if SCRIPT else Path.cwd()
CENSUS = HERE.parent / "census"
ON_YARN = os.environ.get("CENSUS_ON_YARN") == "1" or (SCRIPT is not None and "--yarn" in sys.argv)
EPOCHS = os.environ.get("CENSUS_EPOCHS", "2")

# %% submit: el_submit's options by their Python names
job = tfyarn.submit(
    kind="tensorflow-ps", name="census_api", ps=1, workers=2, exit_ps=True,
    ps_memory="2g", worker_memory="2g", files=[f"{CENSUS}/."],
    command=f"python census_single.py --epochs {EPOCHS}",
    python=sys.executable if ON_YARN else None, local=not ON_YARN)
print("submitted", job.id)

# %% follow every task's output as it comes, each line once
accuracy = None
for line in job.logs(follow=True):
    if "eval_accuracy=" in line:
        accuracy = float(line.rsplit("eval_accuracy=", 1)[1])
    if "epoch" in line or "eval_accuracy" in line:
        print(line)

# %% wait for the outcome: JobFailed (naming the failing task) if it did not succeed;
# progress=True shows the job's live line on training meanwhile (here it has ended)
outcome = job.wait(progress=True)
print(outcome.state, "-", outcome.message)
for task in job.tasks():
    print(f"  {task.task!s:<10} {task.state.value}")

# %% the chief's accuracy
print(f"eval_accuracy={accuracy}")
assert accuracy is not None and accuracy > 0.8, accuracy

# %% the training as data: each task's reported steps and loss (`tfyarn.progress`), for
# your own plots; `job` alone in a cell shows the plots of the job's page
rows = job.metrics()
losses = [r for r in rows if "loss" in r]
print(f"progress rows: {len(rows)}; " + (f"last loss {losses[-1]['loss']:.3f} at step "
                                         f"{losses[-1]['step']}" if losses else "no loss"))
try:
    import matplotlib.pyplot as plt
except ImportError:
    plt = None  # pip install matplotlib to plot them here
if plt is not None and losses:
    for task in sorted({r["task"] for r in losses}):
        mine = [r for r in losses if r["task"] == task]
        plt.plot([r["step"] for r in mine], [r["loss"] for r in mine], "o-", label=task)
    plt.xlabel("step")
    plt.ylabel("loss")
    plt.legend()
    if SCRIPT:  # no screen: a file
        import tempfile

        plt.savefig(Path(tempfile.gettempdir()) / "census_api_loss.png")
        print("loss plot:", Path(tempfile.gettempdir()) / "census_api_loss.png")
    else:
        plt.show()
