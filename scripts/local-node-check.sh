#!/usr/bin/env bash
# Read one real GPU machine from the machine itself, read-only: `provisioner profiles detect`
# over Ansible's local connection (no SSH), then `validate` of the machine against the profile
# just detected from it, with the given stack's planned versions. Nothing on the node is
# installed or changed. A machine whose driver differs from the stack's fails driver_version,
# as it should: name a stack it runs.
#
#   scripts/local-node-check.sh OUTDIR [STACK]      (STACK default: cuda-13.0)
#
# OUTDIR gets the detected profile (site/profiles.yml), the inventory, detect's stderr, and
# validate's report (validate.json) and console output.
set -u
out=${1:?usage: scripts/local-node-check.sh OUTDIR [STACK]}
stack=${2:-cuda-13.0}
here=$(cd "$(dirname "$0")/.." && pwd)
provisioner() { python3 -c 'import sys; from provisioner.cli import main; sys.exit(main())' "$@"; }
export PYTHONPATH="$here${PYTHONPATH:+:$PYTHONPATH}"
export PROVISIONER_RUNS_DIR="$out/runs"
host=$(hostname -s 2>/dev/null || echo localhost)
mkdir -p "$out/site"
inventory() {  # PROFILE FABRIC
  cat > "$out/hosts.yml" <<YAML
all:
  vars:
    ansible_connection: local
    ansible_python_interpreter: $(command -v python3)
    fabric: $2
    gpu_stack: $stack
  children:
    gpu_nodes:
      vars: {gpu_profile: $1}
      hosts:
        $host: {}
YAML
}
# Detect with any built-in profile named (detect reads the node, not the plan).
inventory hgx-h200-8gpu ethernet
provisioner profiles detect --inventory "$out/hosts.yml" --limit "$host" --name this-node \
  -o "$out/site/profiles.yml" 2> "$out/detect.stderr"
rc=$?
cat "$out/detect.stderr" >&2
[ "$rc" = 0 ] || { echo "local-node-check: detect exited $rc" >&2; exit "$rc"; }
fabric=$(python3 -c 'import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))["profiles"]["this-node"].get("fabric", "ethernet"))' "$out/site/profiles.yml")
inventory this-node "$fabric"
provisioner plan --inventory "$out/hosts.yml" > "$out/plan.txt" 2>&1 || { cat "$out/plan.txt" >&2; exit 2; }
provisioner validate --inventory "$out/hosts.yml" --json > "$out/validate.json" 2> "$out/validate.stderr"
rc=$?
echo "local-node-check: validate exited $rc" >&2
exit "$rc"
