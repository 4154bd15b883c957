"""Bootstrap pip into an empty virtualenv, as ansible-test's get-pip.py does.

ansible-test (2.19) makes one virtualenv per sanity test and bootstraps pip there with a
get-pip.py it downloads from the Ansible project's CI file server; our build machines reach
PyPI only. scripts/sanity.sh puts this file where ansible-test looks for a manually downloaded
copy (~/.ansible/test/cache/get_pip_<version>.py). Same contract as get-pip.py: the arguments
are pip options and the packages to install (e.g. ``pip==24.2``), pip itself comes from PyPI.
"""

from __future__ import annotations

import subprocess
import sys

# get-pip.py's own switches: it would otherwise add setuptools and wheel; ensurepip adds no wheel
# and pip is told to install exactly what ansible-test asked for.
OWN_SWITCHES = {"--no-setuptools", "--no-wheel"}


def main() -> int:
    args = [a for a in sys.argv[1:] if a not in OWN_SWITCHES]
    # ensurepip in a child process: in-process it clears pip's configuration from os.environ
    # (PIP_CONFIG_FILE=/dev/null), and the install below needs it (the CA bundle, the index).
    rc = subprocess.call([sys.executable, "-m", "ensurepip", "--upgrade", "--default-pip"])
    return rc or subprocess.call([sys.executable, "-m", "pip", "install", *args])


if __name__ == "__main__":
    sys.exit(main())
