#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Fetch repository signing keys, accept each only at its pinned fingerprint, trust them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: signed_keys
short_description: Fetch signing keys, check their pinned fingerprints and trust them, in one round trip
description:
  - Downloads every key of O(keys) into a private scratch directory (mode C(0700), removed
    before the module returns), reads each file with C(gpg --batch --show-keys --with-colons)
    (parses the file only; no keyring is touched) and accepts it only when it holds exactly one
    primary key whose fingerprint is the pinned one.
  - Only when every key is accepted, writes each into O(dir) as C(<name>.asc) (mode C(0644),
    root-owned, atomically), changing only the files whose content differs. One refused key
    leaves every trusted file as it was.
  - Fetched on every run, so a new pinned fingerprint rotates the key. Check mode fetches and
    checks, and writes nothing.
options:
  dir:
    description: The trusted key directory (created with mode C(0755) when missing).
    type: path
    required: true
  keys:
    description:
      - List of C({name, key_url, fingerprint}) (the shape of a repository source in the plan;
        other keys are ignored).
    type: list
    elements: dict
    required: true
  url_username:
    description: Login for the key server (a credentialed mirror).
    type: str
  url_password:
    description: Password for the key server.
    type: str
  retries:
    description: Further tries of a download that failed, C(delay) seconds apart.
    type: int
    default: 3
  delay:
    description: Seconds between download tries.
    type: float
    default: 5
  timeout:
    description: Seconds one download may take.
    type: int
    default: 30
  packages:
    description:
      - The OS's own packages the keys need (C(gnupg) for C(gpg), C(ca-certificates) for an
        https key server), installed first where one is missing, at the distribution's version
        (as M(gpucluster.provisioner.distro_packages) does, one package database query on a
        node that has them). Installs retry a transient mirror error O(retries) times, O(delay)
        seconds before the first retry, doubling after each. Check mode installs nothing.
    type: list
    elements: str
    default: []
  cache_valid_time:
    description: Seconds apt's package lists count as fresh before an install of O(packages).
    type: int
    default: 86400
  lock_timeout:
    description: Seconds apt and dpkg wait for the package manager's lock for O(packages).
    type: int
    default: 300
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: NVIDIA repo | Fetch, check and trust the signing keys
  gpucluster.provisioner.signed_keys:
    dir: /etc/apt/keyrings
    keys:
      - name: nvidia-cuda
        key_url: http://mirror.example/keys/mirror.asc
        fingerprint: 0123456789ABCDEF0123456789ABCDEF01234567  # the mirror key's, pinned
"""

RETURN = r"""
changed_keys:
  description: Names of the keys whose trusted file was (or would be) written.
  returned: always
  type: list
  elements: str
fingerprints:
  description: Name to the fingerprint found in the fetched key.
  returned: always
  type: dict
installed:
  description: The packages of O(packages) that were (or would be) installed.
  returned: always
  type: list
  elements: str
"""

import os
import re
import shutil
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.urls import fetch_url
from ansible_collections.gpucluster.provisioner.plugins.module_utils.gpucluster.distro import (
    bad_names,
    ensure,
)


class _PackageSteps:
    """The module as the package runner reads it (module_utils/gpucluster/pkgrun.py): this
    module's retries, its delay as the first retry's, and apt's lock wait."""

    def __init__(self, module):
        self._module = module
        self.params = {"retries": module.params["retries"], "retry_delay": module.params["delay"],
                       "lock_timeout": module.params["lock_timeout"]}

    def __getattr__(self, name):
        return getattr(self._module, name)


def _redact(url):
    """The URL without a login in it (user:password@)."""
    return re.sub(r"//[^/@]*@", "//", url)


def fetch(module, url):
    """The key's bytes; fails the module after the last try."""
    tries = module.params["retries"] + 1
    last = ""
    for attempt in range(1, tries + 1):
        resp, info = fetch_url(module, url, timeout=module.params["timeout"])
        # file:// answers have no HTTP status (a local or mounted key file is allowed).
        if resp is not None and (info.get("status") == 200 or url.startswith("file:")):
            return resp.read()
        last = "HTTP %s: %s" % (info.get("status"), info.get("msg", ""))
        if attempt < tries:
            time.sleep(module.params["delay"])
    module.fail_json(msg="cannot download the signing key %s (after %d tries): %s"
                     % (_redact(url), tries, last))
    return b""


def primary_keys(module, path):
    """[(pub record, first fingerprint after it)] of the key file, as gpg lists them."""
    gpg = module.get_bin_path("gpg", required=True)
    rc, out, err = module.run_command([gpg, "--batch", "--show-keys", "--with-colons", path])
    if rc != 0:
        module.fail_json(msg="gpg cannot read the key file %s: %s"
                         % (os.path.basename(path), (err or out).strip()), rc=rc)
    keys = []
    for line in out.splitlines():
        fields = line.split(":")
        if fields[0] == "pub":
            keys.append([line, None])
        elif fields[0] == "fpr" and keys and keys[-1][1] is None and len(fields) > 9:
            keys[-1][1] = fields[9]
    return keys


def _write(path, data):
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(tmp, 0o644)
        if os.geteuid() == 0:  # root-owned; a test run as a user keeps its own
            os.chown(tmp, 0, 0)
        os.rename(tmp, path)
    except OSError:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _current(path):
    try:
        with open(path, "rb") as handle:
            return handle.read()
    except OSError:
        return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            keys=dict(type="list", elements="dict", required=True, no_log=False),
            url_username=dict(type="str"),
            url_password=dict(type="str", no_log=True),
            retries=dict(type="int", default=3),
            delay=dict(type="float", default=5),
            timeout=dict(type="int", default=30),
            packages=dict(type="list", elements="str", default=[]),
            cache_valid_time=dict(type="int", default=86400),
            lock_timeout=dict(type="int", default=300),
        ),
        supports_check_mode=True,
    )
    packages = list(dict.fromkeys(module.params["packages"]))
    bad = bad_names(packages)
    if bad:
        module.fail_json(msg="packages must be package names (no version, architecture, option "
                             "or blank): %r" % (bad,))
    wanted = []
    for key in module.params["keys"]:
        name, url, fpr = (str(key.get(k) or "").strip() for k in ("name", "key_url", "fingerprint"))
        if not name or "/" in name or not url or not fpr:
            module.fail_json(msg="every key needs a name (no '/'), a key_url and a fingerprint: %s"
                             % (name or "(no name)"))
        wanted.append((name, url, fpr.replace(" ", "").upper()))
    installed, _updated, _after = ensure(_PackageSteps(module), packages,
                                         module.params["cache_valid_time"])
    scratch = tempfile.mkdtemp(prefix="gpuc-keys.")  # mode 0700
    accepted = {}
    fingerprints = {}
    try:
        for name, url, fpr in wanted:
            data = fetch(module, url)
            path = os.path.join(scratch, name + ".asc")
            with open(path, "wb") as handle:
                handle.write(data)
            keys = primary_keys(module, path)
            found = keys[0][1] if len(keys) == 1 else None
            fingerprints[name] = found or ""
            if found is None or found.upper() != fpr:
                module.fail_json(
                    msg="the key file at %s is not exactly the pinned key %s (%d primary key(s)%s): "
                        "refusing to trust it" % (
                            _redact(url), fpr, len(keys),
                            ", fingerprint %s" % found if found else ""))
            accepted[name] = data
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    directory = module.params["dir"]
    changed = [name for name, data in accepted.items()
               if _current(os.path.join(directory, name + ".asc")) != data]
    if changed and not module.check_mode:
        if not os.path.isdir(directory):
            os.makedirs(directory)
            os.chmod(directory, 0o755)
        for name in changed:
            _write(os.path.join(directory, name + ".asc"), accepted[name])
    module.exit_json(changed=bool(changed) or bool(installed), changed_keys=changed,
                     fingerprints=fingerprints, installed=installed)


if __name__ == "__main__":
    main()
