"""`python -m tfyarn.runtime.forkserver`: local mode's launchers, forked (proc.ForkServer).

Imports the launcher once; every launcher of a local gang is then a fork of this process.
"""

from __future__ import annotations

from tfyarn.runtime import launcher, proc

if __name__ == "__main__":
    proc.warm()  # what every child would otherwise work out again
    proc.serve_forks(launcher.main)
