#!/usr/bin/env bash
# ansible-test sanity on the collection as it ships: the tarball `ansible-galaxy collection build`
# makes (galaxy.yml's build_ignore decides what that is), installed into a scratch
# ansible_collections/gpucluster/provisioner, the layout ansible-test requires. There is no .git
# there, so ansible-test checks every file the tarball holds. No container: --local, and
# ansible-test makes its own virtualenv per test (pinned linters from PyPI, cached under
# ~/.ansible/test/venv after the first run).
# Usage: scripts/sanity.sh [more ansible-test sanity options, e.g. --test pylint]
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=$(cd "${BIN:-.venv/bin}" && pwd)
# The controller Python: pyproject's requires-python and ansible-core 2.19's range (3.11-3.13).
PYTHON_VERSION=${PYTHON_VERSION:-3.11}

work=$(mktemp -d "${TMPDIR:-/tmp}/gpuc-sanity.XXXXXX")
trap 'rm -rf "$work"' EXIT
"$BIN/ansible-galaxy" collection build --output-path "$work" . >/dev/null
# From $work, with only $work as collections path: run here, the checkout's ansible.cfg would show
# the checkout as gpucluster.provisioner "already installed" and nothing would be installed.
# --no-deps: community.general comes with the `ansible` package; sanity does not load it.
(cd "$work" && ANSIBLE_COLLECTIONS_PATH="$work" "$BIN/ansible-galaxy" collection install \
  --no-deps -p "$work" "$work"/gpucluster-provisioner-*.tar.gz >/dev/null)

# ansible-test bootstraps pip in each virtualenv with a get-pip.py fetched from a server our
# build machines cannot reach; it uses a copy left at this path instead (see the script's
# docstring). Ours is written only where none is, or over an older copy of ours.
pip_version=$("$BIN/python" -c 'import types
from ansible_test._internal.python_requirements import get_venv_packages
print(get_venv_packages(types.SimpleNamespace(version="'"$PYTHON_VERSION"'"))["pip"])')
get_pip=~/.ansible/test/cache/get_pip_${pip_version//./_}.py
if [[ ! -e $get_pip ]] || grep -qs 'scripts/sanity.sh puts this file' "$get_pip"; then
  mkdir -p "$(dirname "$get_pip")"
  cp scripts/ansible-test-get-pip.py "$get_pip"
fi

cd "$work/ansible_collections/gpucluster/provisioner"
"$BIN/ansible-test" sanity --local --python "$PYTHON_VERSION" --color no "$@"
