"""A custom import-linter contract: the listed packages import the standard library only.

import-linter's own `forbidden` contract needs every third-party name listed; this one
asks the import graph for each module's direct imports and refuses anything that is
neither tfyarn nor in `sys.stdlib_module_names`, so a new dependency cannot slip in.
"""

from __future__ import annotations

import sys

from importlinter.application import output
from importlinter.domain import fields
from importlinter.domain.contract import Contract, ContractCheck


class StdlibOnlyContract(Contract):
    """Options: `source_modules` (packages whose modules may import only the stdlib)."""

    type_name = "stdlib_only"
    source_modules = fields.ListField(subfield=fields.ModuleField())

    def check(self, graph, verbose: bool) -> ContractCheck:  # noqa: ANN001 (grimp's graph)
        bad = []
        for source in self.source_modules:  # type: ignore[attr-defined]
            for module in sorted(graph.find_descendants(source.name) | {source.name}):
                for imported in sorted(graph.find_modules_directly_imported_by(module)):
                    top = imported.split(".")[0]
                    if top != "tfyarn" and top not in sys.stdlib_module_names:
                        bad.append((module, imported))
        return ContractCheck(kept=not bad, metadata={"bad": bad})

    def render_broken_contract(self, check: ContractCheck) -> None:
        for module, imported in check.metadata["bad"]:
            output.print_error(f"{module} imports {imported}, which is not the standard library")
            output.new_line()
