"""The stack matrix (provisioner/data/stacks.yml) and the rules that keep every host matched.

- ``schema``: the file's pydantic models, validated once by ``load_matrix``.
- ``resolve``: a host's ``gpu_stack`` and overrides -> ``ResolvedStack``, every rule checked.
- ``packages``: package names and versions (conventions plus the stacks' stated exceptions).
- ``views``: the rows and details ``provisioner stacks`` prints.
- ``versions``: the shared vocabulary (version shapes, flavours, families, components).
"""

from __future__ import annotations

from provisioner.matrix.packages import PackagePin, packages_for
from provisioner.matrix.resolve import ResolvedStack, check_cluster, resolve_stack
from provisioner.matrix.schema import STACKS_FILE, Stack, StackMatrix, load_matrix, stack_sources
from provisioner.matrix.versions import COMPONENTS, FAMILIES, FLAVORS
from provisioner.matrix.views import stack_detail, stack_rows

__all__ = [
    "COMPONENTS",
    "FAMILIES",
    "FLAVORS",
    "STACKS_FILE",
    "PackagePin",
    "ResolvedStack",
    "Stack",
    "StackMatrix",
    "check_cluster",
    "load_matrix",
    "packages_for",
    "resolve_stack",
    "stack_detail",
    "stack_rows",
    "stack_sources",
]
