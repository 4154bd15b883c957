"""The CLI in-process, one file per module of provisioner/commands (and test_cli.py for
provisioner/cli.py). A package, so that its modules are imported by their package name and do
not clash with tests/unit's test_upgrade.py, test_stacks.py and test_profiles.py, nor with
tests/integration/test_cli.py."""
