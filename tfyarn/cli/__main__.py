"""`python -m tfyarn.cli` is `el_submit`."""

from tfyarn.cli.main import el_submit_main

el_submit_main()
