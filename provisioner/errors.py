"""Exceptions of the provisioner library; the CLI maps them to exit codes in one place."""

from __future__ import annotations


class ProvisionerError(Exception):
    """Base class. ``exit_code`` is what the CLI exits with; the message is one line."""

    exit_code = 1


class InputError(ProvisionerError):
    """Bad input (inventory, stack, profile, file): nothing on any host was touched. Exit 2."""

    exit_code = 2


class EnvironmentProblem(ProvisionerError):
    """The controller cannot do the job (podman missing, ansible-runner missing...). Exit 2."""

    exit_code = 2

