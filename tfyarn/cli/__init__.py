"""The command line: click commands, el_submit flag parsing, job files. Nothing imports
it.

Must not be imported by any other package (checked by import-linter).
"""
