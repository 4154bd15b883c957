#!/usr/bin/env bash
# `make molecule-fast`: every molecule scenario with its converge, idempotence and verify steps
# under `up --fast`'s strategy (Mitogen's mitogen_linear, the settings runner.fast_env gives).
# Create, prepare and destroy stay on Ansible's own strategy: they are the podman driver's
# scaffolding, not our content, and its create playbook's async podman tasks never finish under
# Mitogen's local connection (found when the whole `molecule test` ran under it).
set -uo pipefail
cd "$(dirname "$0")/.."
BIN=.venv/bin
fast_env=$("$BIN/python" -c 'from provisioner.runner import fast_env
print(" ".join(f"{k}={v}" for k, v in fast_env().items()))') || exit 2
prep=$("$BIN/python" -m provisioner.sim.molecule_prep) || exit 2
export $prep
status=0
for dir in molecule/*/molecule.yml; do
  scenario=$(basename "$(dirname "$dir")")
  # A scenario's own test_sequence may leave idempotence out (default does: see its file).
  if grep -q 'test_sequence' "$dir" && ! grep -q '^ *- idempotence' "$dir"; then
    steps=(converge verify)
  else
    steps=(converge idempotence verify)
  fi
  echo "== molecule-fast: $scenario (${steps[*]} under: $fast_env)"
  "$BIN/molecule" destroy -s "$scenario" >/dev/null
  if "$BIN/molecule" create -s "$scenario" && "$BIN/molecule" prepare -s "$scenario"; then
    for step in "${steps[@]}"; do
      if ! env $fast_env "$BIN/molecule" "$step" -s "$scenario"; then
        echo "== molecule-fast: $scenario: $step FAILED"; status=1; break
      fi
    done
  else
    echo "== molecule-fast: $scenario: create/prepare FAILED"; status=1
  fi
  "$BIN/molecule" destroy -s "$scenario" >/dev/null
done
"$BIN/python" -m provisioner.sim.molecule_prep --cleanup
echo "== molecule-fast: $([ $status = 0 ] && echo passed || echo FAILED)"
exit $status
