"""`python -m tfyarn` is the `tfyarn` command; `python -m tfyarn.cli` is `el_submit`."""

from tfyarn.cli.main import tfyarn_main

tfyarn_main()
