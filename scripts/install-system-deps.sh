#!/usr/bin/env bash
# Installs what the controller needs on a fresh Debian 12 machine (run as root), and configures
# podman for hosts like ours (runc instead of crun, ulimits within the host's hard limits).
# Idempotent and quick when everything is already there.
set -euo pipefail

# prometheus: for promtool (make test checks and unit-tests the monitoring role's rules).
# rpm, createrepo-c: the simulated mirror's rpm repository for imitated Rocky 9 nodes.
# chromium: the monitoring e2e test screenshots Prometheus' alerts page with it (headless).
# kmod: real modinfo reads the simulated dkms' signed modules in tests/sim.
# qemu-user-static, binfmt-support: arm64 simulated nodes (`sim up --arch arm64`).
PACKAGES=(podman runc netavark aardvark-dns iptables debootstrap gnupg dpkg-dev apt-utils
          openssh-client make curl prometheus rpm createrepo-c chromium kmod
          qemu-user-static binfmt-support)

missing=()
for pkg in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "error: missing system packages (${missing[*]}): run as root or install them" >&2
    exit 2
  fi
  echo "installing system packages: ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

conf=/etc/containers/containers.conf
if ! grep -qs 'gpu-cluster-provisioner' "$conf"; then
  if [[ -s $conf ]]; then cp "$conf" "$conf.bak-gpuc"; fi
  mkdir -p /etc/containers
  cat > "$conf" <<'CONF'
# Written by gpu-cluster-provisioner scripts/install-system-deps.sh.
# crun fails on hybrid cgroup hosts; the default ulimits exceed some hosts' hard limits.
[containers]
default_ulimits = ["nofile=1024:1024", "nproc=4096:4096"]

[engine]
runtime = "runc"

[network]
network_backend = "netavark"
CONF
  echo "configured $conf (previous copy, if any: $conf.bak-gpuc)"
fi
