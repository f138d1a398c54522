"""The `el_submit` console script's first step: `el_submit --help` (or `-h`) prints the
help kept by `cli.helpcache` when there is one; anything else, or a help not rendered
yet, goes to the CLI (`cli.main`). Must not import anything beyond `sys` and `helpcache`
before it knows the help is kept (click and the flag table are what it saves).
"""

from __future__ import annotations

import sys

from tfyarn.cli.helpcache import HELP_ARGS, read_help


def el_submit() -> None:
    """`el_submit`'s entry point (pyproject's console script, `python -m tfyarn.cli`)."""
    if sys.argv[1:] in HELP_ARGS and (text := read_help("el_submit")) is not None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    from tfyarn.cli.main import el_submit_main

    el_submit_main()
