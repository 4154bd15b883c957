# -*- coding: utf-8 -*-
"""Running apt and dnf the way a fleet needs: wait for the package manager's lock, retry a
transient mirror error with backoff, keep changed configuration files without asking, finish
what an interrupted dpkg left half done, and fail with the line that says what went wrong.
Shared by pinned_packages (exact versions, held) and distro_packages (the OS's own packages)."""

from __future__ import annotations

import os
import re
import time

APT_ENV = {"DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}

# What marks a failure as the mirror's or the network's (worth another try), in apt's and dnf's
# output: apt prints "E: Failed to fetch URL  503  Service Unavailable" or "Temporary failure
# resolving", dnf "Curl error (7): Couldn't connect" or "Cannot download ... Status code: 503".
TRANSIENT = re.compile(
    r"Failed to fetch|Temporary failure resolving|Could not resolve|Could not connect|"
    r"Connection (?:failed|timed out|refused)|Unable to connect|Hash Sum mismatch|"
    r"\b(?:500|502|503|504)\b|Curl error|Cannot download|Status code: 5\d\d|"
    r"Some index files failed to download", re.IGNORECASE)
# The lock held by another process past lock_timeout.
LOCKED = re.compile(r"Could not get lock|Unable to acquire the dpkg frontend lock|"
                    r"is another process using it", re.IGNORECASE)


def apt_options(module):
    """apt-get/apt-mark options every call gets: wait for the lock, let apt retry a download
    itself, keep a changed configuration file without asking (a prompt would hang the run)."""
    return ["-o", "DPkg::Lock::Timeout=%d" % module.params["lock_timeout"],
            "-o", "Acquire::Retries=%d" % module.params["retries"],
            "-o", "Dpkg::Options::=--force-confdef", "-o", "Dpkg::Options::=--force-confold"]


def error_line(out, err):
    """The line that says what went wrong: apt's first "E:" line (the last one is often only
    "E: Unable to correct problems" or a summary), dpkg's or dnf's "Error:" line; else the last
    non-empty line of stderr, then of stdout."""
    lines = [ln.strip() for ln in (err or "").splitlines() + (out or "").splitlines()]
    for pattern in (r"^E: (?!Sub-process .* returned an error code)", r"^dpkg: error",
                    r"^Error:", r"^E: "):
        found = [ln for ln in lines if re.match(pattern, ln)]
        if found:
            return found[0]
    for text in (err, out):
        rest = [ln.strip() for ln in (text or "").splitlines() if ln.strip()]
        if rest:
            return rest[-1]
    return "no output"


def run_retrying(module, cmd, what, environ_update=None):
    """Run ``cmd``; on a transient mirror error try again (``retries`` times, backoff from
    ``retry_delay``). Fails the module with the meaningful error line and the tries made."""
    tries = module.params["retries"] + 1
    delay = module.params["retry_delay"]
    attempts = []
    for attempt in range(1, tries + 1):
        rc, out, err = module.run_command(cmd, environ_update=environ_update)
        if rc == 0:
            return out, attempts
        line = error_line(out, err)
        attempts.append(line)
        if LOCKED.search(out + err):
            module.fail_json(
                msg="%s failed: the package manager's lock is held by another process "
                    "(unattended-upgrades at boot?) for more than lock_timeout=%ds: %s"
                    % (what, module.params["lock_timeout"], line),
                rc=rc, stdout=out, stderr=err, cmd=cmd, attempts=attempts)
        if not TRANSIENT.search(out + err) or attempt == tries:
            break
        time.sleep(delay)
        delay *= 2
    suffix = " (after %d tries)" % len(attempts) if len(attempts) > 1 else ""
    module.fail_json(msg="%s failed%s: %s" % (what, suffix, line), rc=rc, stdout=out,
                     stderr=err, cmd=cmd, attempts=attempts)
    return out, attempts


# Files here mean dpkg stopped in the middle of an operation (a node killed or rebooted
# mid-install); apt then refuses everything with "dpkg was interrupted".
DPKG_UPDATES = "/var/lib/dpkg/updates"


def apt_recover(module):
    """Finish what an interrupted dpkg left half done (``dpkg --configure -a``, keeping changed
    configuration files) so the install can go on. True when there was something to finish."""
    dpkg = module.get_bin_path("dpkg", required=True)
    pending = os.path.isdir(DPKG_UPDATES) and bool(os.listdir(DPKG_UPDATES))
    _rc, out, _err = module.run_command([dpkg, "--audit"])  # rc 1 when it found something
    if not pending and not out.strip():
        return False
    if module.check_mode:
        return True
    run_retrying(module, [dpkg, "--force-confdef", "--force-confold", "--configure", "-a"],
                 "dpkg --configure -a (dpkg was interrupted)", APT_ENV)
    return True
