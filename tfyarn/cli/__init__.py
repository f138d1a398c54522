"""The command line: click commands, el_submit flag parsing, job files. Nothing imports
it."""
