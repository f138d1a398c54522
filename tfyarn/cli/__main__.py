"""`python -m tfyarn.cli` is `el_submit`."""

from tfyarn.cli.entry import el_submit

el_submit()
