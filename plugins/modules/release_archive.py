#!/usr/bin/python
# -*- coding: utf-8 -*-
"""Install an upstream release tarball, checksummed, in one round trip."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: release_archive
short_description: Install an upstream release tarball, checksummed, in one round trip
description:
  - Downloads the tarball at O(url), checks its SHA-256 (pinned in O(sha256), or read from the
    release's C(sha256sums.txt)), unpacks its single top directory into O(dest) and points the
    symbolic links of O(links) into it, for software installed from upstream's release tarballs
    (Prometheus, Alertmanager, node_exporter).
  - The top directory is named after the tarball, as upstream names them
    (C(prometheus-2.53.4.linux-amd64.tar.gz) holds C(prometheus-2.53.4.linux-amd64/)); an archive
    whose only top directory is another is refused.
  - After an install, C(<dest>/<top directory>/.release_archive.json) records the (login-free)
    URL, the SHA-256 and the files unpacked. While that record names O(url) (and O(sha256), when
    pinned) and every file it lists is there, nothing is downloaded, not even the checksums
    file; a rerun costs a few C(stat) calls and reports no change when the links are right.
  - The download streams into a temporary file in O(dest) while its SHA-256 is computed; a
    mismatch fails the task and installs nothing. The archive is checked whole before anything is
    unpacked; it is refused (nothing installed) for a member with an absolute path, a C(..)
    component, a path outside the top directory, a hard link, a device, FIFO or other special
    file, or a symbolic link that leads outside the top directory. It is unpacked into a
    temporary directory in O(dest) and renamed into place; a directory of the same name whose
    record differs (or that has none) is replaced.
  - Unpacked files are owned by root (when the module runs as root) with the archive's modes
    less group and other write and less setuid, setgid and sticky bits (C(mode & 0755)).
  - Check mode downloads nothing and changes nothing; it reports a change when the archive
    would be installed or a link set.
options:
  url:
    description: The tarball's C(http://), C(https://) or C(file://) URL; its file name ends in
      C(.tar.gz) or C(.tgz).
    type: str
    required: true
  sha256:
    description:
      - The tarball's pinned SHA-256 (64 hexadecimal digits). Empty, the sum is read from
        O(checksums_url).
    type: str
    default: ""
  checksums_url:
    description:
      - A C(sha256sums.txt)-style file (lines C(<sum>  <file name>)) whose line for the
        tarball's file name gives the sum when O(sha256) is empty. Empty, the file
        C(sha256sums.txt) in the directory of O(url).
    type: str
    default: ""
  dest:
    description: The directory the top directory is unpacked into (created with mode C(0755)
      when missing), e.g. C(/opt).
    type: path
    required: true
  links:
    description:
      - Absolute path of a symbolic link to the path, relative to the unpacked top directory,
        it points to (as an absolute path), e.g. C(/usr/local/bin/prometheus) to C(prometheus).
      - A link replaces a symbolic link or nothing; a file or directory already at a link's path
        is refused before anything changes. The relative path must be in the archive.
    type: dict
    default: {}
  timeout:
    description: Seconds one download may wait for the server.
    type: int
    default: 60
  validate_certs:
    description: Whether an C(https://) server's certificate is checked.
    type: bool
    default: true
notes:
  - The directory of an older version stays beside the new one (its links move to the new
    one); remove it with C(ansible.builtin.file) when it is no longer wanted.
  - A login in O(url) (C(user:password@)) is left out of the record and of messages.
author: gpu-cluster-provisioner maintainers (@gpucluster)
"""

EXAMPLES = r"""
- name: Monitoring | Install Prometheus from upstream's release
  gpucluster.provisioner.release_archive:
    url: https://github.com/prometheus/prometheus/releases/download/v2.53.4/prometheus-2.53.4.linux-amd64.tar.gz
    dest: /opt
    links:
      /usr/local/bin/prometheus: prometheus
      /usr/local/bin/promtool: promtool

- name: Monitoring | Install node_exporter at a pinned sum from a mirror
  gpucluster.provisioner.release_archive:
    url: http://mirror.example/node_exporter-1.8.2.linux-amd64.tar.gz
    sha256: 6809dd0b3ec45fd6e992c19071d6b5253aed3ead7bf0686885a51d85c6643c66
    dest: /opt
    links:
      /usr/local/bin/node_exporter: node_exporter
"""

RETURN = r"""
path:
  description: The unpacked top directory, C(<dest>/<tarball name less .tar.gz>).
  returned: always
  type: str
sha256:
  description:
    - The tarball's SHA-256 (the recorded one when nothing was downloaded; in check mode the
      pinned one, or "" when it would be read from the checksums file).
  returned: always
  type: str
downloaded:
  description: Whether the tarball was downloaded (and installed) by this call.
  returned: always
  type: bool
links_changed:
  description: The link paths that were (or would be) set, sorted.
  returned: always
  type: list
  elements: str
"""

import hashlib
import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_native
from ansible.module_utils.urls import open_url

RECORD = ".release_archive.json"
SUFFIXES = (".tar.gz", ".tgz")
CHUNK = 1024 * 1024
SHA256 = re.compile(r"^[0-9a-f]{64}$")


def redact(url):
    """The URL without a login in it (user:password@)."""
    return re.sub(r"//[^/@]*@", "//", url)


def url_basename(url):
    """The file name at the end of the URL's path (query and fragment left out)."""
    path = url.split("#", 1)[0].split("?", 1)[0]
    return path.rstrip("/").rsplit("/", 1)[-1]


def top_directory(name):
    """The top directory upstream's tarball of this name holds, or None."""
    for suffix in SUFFIXES:
        if name.endswith(suffix) and len(name) > len(suffix):
            top = name[:-len(suffix)]
            return None if top in (".", "..") else top
    return None


def default_checksums_url(url):
    path = url.split("#", 1)[0].split("?", 1)[0]
    return path.rsplit("/", 1)[0] + "/sha256sums.txt"


def sum_for(text, name):
    """The sum on the line of ``name`` in a sha256sums.txt-style text (``<sum>  <name>``, or
    ``<sum> *<name>`` as sha256sum -b writes it), lower case, or None."""
    for line in text.splitlines():
        fields = line.strip().split(None, 1)
        if len(fields) != 2:
            continue
        digest, file_name = fields
        if file_name.startswith("*"):
            file_name = file_name[1:]
        if file_name.startswith("./"):
            file_name = file_name[2:]
        if file_name == name and SHA256.match(digest.lower()):
            return digest.lower()
    return None


def _open(module, url):
    """The open response for url, or a one-line failure naming it and the reason."""
    try:
        return open_url(url, timeout=module.params["timeout"],
                        validate_certs=module.params["validate_certs"],
                        http_agent="ansible-httpget", decompress=False)
    except Exception as exc:  # HTTPError, URLError, OSError, ssl errors: one line each
        code = getattr(exc, "code", None)
        reason = getattr(exc, "reason", None)
        if isinstance(code, int):
            text = "HTTP %s %s" % (code, to_native(reason or ""))
        else:
            text = to_native(reason if reason is not None else exc)
        module.fail_json(msg="cannot download %s: %s"
                         % (redact(url), text.strip() or type(exc).__name__))
    return None


def expected_sum(module, url, name):
    """The pinned sum, or the one the checksums file gives for name."""
    pinned = module.params["sha256"].strip().lower()
    if pinned:
        return pinned
    sums_url = module.params["checksums_url"] or default_checksums_url(url)
    resp = _open(module, sums_url)
    try:
        text = resp.read().decode("utf-8", "replace")
    except Exception as exc:
        module.fail_json(msg="cannot download %s: %s" % (redact(sums_url), to_native(exc)))
    finally:
        resp.close()
    digest = sum_for(text, name)
    if digest is None:
        module.fail_json(msg="the checksums file %s has no sha256 line for %s"
                         % (redact(sums_url), name))
    return digest


def download(module, url, directory, name):
    """(temporary file in directory holding the tarball, its sha256); the temporary file is
    removed when the download fails."""
    resp = _open(module, url)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % name, suffix=".part", dir=directory)
    digest = hashlib.sha256()
    error = None
    try:
        with os.fdopen(fd, "wb") as handle:
            while True:
                chunk = resp.read(CHUNK)
                if not chunk:
                    break
                digest.update(chunk)
                handle.write(chunk)
    except Exception as exc:  # a dropped connection, a full disk
        error = to_native(exc) or type(exc).__name__
    finally:
        resp.close()
    if error is not None:
        _remove(tmp)
        module.fail_json(msg="cannot download %s: %s" % (redact(url), error))
    return tmp, digest.hexdigest()


def _remove(path):
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        elif os.path.lexists(path):
            os.unlink(path)
    except OSError:
        pass


def _parts(name):
    """The member name's components, without empty and '.' ones."""
    return [p for p in name.split("/") if p not in ("", ".")]


def check_members(members, top):
    """The archive's members as [(relative path below top, member)] in archive order, or the
    reason (one line) it is refused. Nothing is unpacked before this says yes."""
    checked = []
    seen = set()
    tops = set()
    links = set()
    for member in members:
        name = member.name
        if name.startswith("/"):
            return "member %r has an absolute path" % name
        parts = _parts(name)
        if ".." in parts:
            return "member %r has a '..' component" % name
        if not parts:
            if member.isdir():
                continue  # "./": the archive's root itself
            return "member %r has no name" % name
        if member.islnk():
            return "member %r is a hard link" % name
        if len(parts) == 1 and not member.isdir():
            return "member %r is not a directory at the top" % name
        if not (member.isreg() or member.isdir() or member.issym()):
            return "member %r is a device, FIFO or other special file" % name
        tops.add(parts[0])
        rel = "/".join(parts[1:])
        if rel in seen:
            return "member %r appears twice" % name
        seen.add(rel)
        if member.issym():
            target = member.linkname
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname("/".join(parts)), target))
            if target.startswith("/") or not (resolved == parts[0]
                                              or resolved.startswith(parts[0] + "/")):
                return "symbolic link %r points outside the top directory (%s)" % (name, target)
            links.add(rel)
        checked.append((rel, member))
    if len(tops) > 1:
        return "it has more than one top directory (%s), not the single %s/" % (
            ", ".join(sorted(tops)), top)
    if tops != {top}:
        return "its top directory is %s/, not %s/ (expected from the file name)" % (
            ", ".join(sorted(tops)) or "(none)", top)
    for rel, _member in checked:
        parts = rel.split("/")
        for depth in range(1, len(parts)):
            if "/".join(parts[:depth]) in links:
                return "member %r lies under the symbolic link %r" % (
                    top + "/" + rel, top + "/" + "/".join(parts[:depth]))
    return checked


def _own(path, follow=True):
    if os.geteuid() == 0:  # root-owned; a test run as a user keeps its own
        if follow:
            os.chown(path, 0, 0)
        else:
            os.lchown(path, 0, 0)


def _make_parents(root, rel, directories):
    """Create the missing directories above root/rel (mode 0755 in the end)."""
    path = root
    for part in rel.split("/")[:-1]:
        path = os.path.join(path, part)
        if not os.path.isdir(path):
            os.mkdir(path, 0o700)
            _own(path)
            directories.append((path, 0o755, None))


def unpack(tar, checked, root):
    """Write the checked members under root (the top directory, a new empty directory):
    directories and files first, symbolic links last, so that nothing is written through a
    link; directory modes last, so that a read-only one can be filled. The files and links
    unpacked, relative to root."""
    _own(root)
    directories = [(root, 0o755, None)]
    files = []
    for rel, member in checked:
        if member.issym():
            continue
        if not rel:  # the top directory's own entry: mode 0755 whatever it says
            directories.append((root, 0o755, member.mtime))
            continue
        path = os.path.join(root, rel)
        _make_parents(root, rel, directories)
        if member.isdir():
            if not os.path.isdir(path):
                os.mkdir(path, 0o700)
                _own(path)
            directories.append((path, member.mode & 0o755, member.mtime))
            continue
        source = tar.extractfile(member)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0),
                     0o600)
        with os.fdopen(fd, "wb") as handle:
            shutil.copyfileobj(source, handle, CHUNK)
        _own(path)
        os.chmod(path, member.mode & 0o755)
        os.utime(path, (member.mtime, member.mtime))
        files.append(rel)
    for rel, member in checked:
        if member.issym():
            _make_parents(root, rel, directories)
            path = os.path.join(root, rel)
            os.symlink(member.linkname, path)
            _own(path, follow=False)
            files.append(rel)
    # Deepest first: a directory's time is set after its contents are written.
    for path, mode, mtime in reversed(directories):
        os.chmod(path, 0o755 if path == root else mode)
        if mtime is not None:
            os.utime(path, (mtime, mtime))
    return sorted(files)


def escaping_link(root, files):
    """A unpacked symbolic link that, resolved on disk, leads outside root, or None."""
    real_root = os.path.realpath(root)
    for rel in files:
        path = os.path.join(root, rel)
        if os.path.islink(path):
            real = os.path.realpath(path)
            if real != real_root and not real.startswith(real_root + os.sep):
                return rel
    return None


def read_record(path):
    try:
        with open(os.path.join(path, RECORD)) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if (not isinstance(record, dict) or not isinstance(record.get("files"), list)
            or not all(isinstance(f, str) for f in record["files"])):
        return None
    return record


def installed(record, path, url, pinned):
    """Whether the record says this URL (and pinned sum) is unpacked at path, all of it."""
    return (record is not None and record.get("url") == redact(url)
            and (not pinned or record.get("sha256") == pinned)
            and all(os.path.lexists(os.path.join(path, f)) for f in record["files"]))


def in_archive(rel, names):
    return rel in names or any(n.startswith(rel + "/") for n in names)


def _tarball(module, path, url):
    try:
        return tarfile.open(path, "r:*")
    except (tarfile.TarError, OSError) as exc:
        module.fail_json(msg="%s is not a readable tarball: %s" % (redact(url), exc))
    return None


def install(module, url, dest, top, path, links):
    """Download, check and unpack the tarball; its sha256."""
    name = url_basename(url)
    if os.path.lexists(path) and (os.path.islink(path) or not os.path.isdir(path)):
        module.fail_json(msg="%s exists and is not a directory: refusing to replace it" % path)
    digest_expected = expected_sum(module, url, name)
    if not os.path.isdir(dest):
        try:
            os.makedirs(dest, 0o755)
        except OSError as exc:
            module.fail_json(msg="cannot create %s: %s" % (dest, exc))
    tmp, digest = download(module, url, dest, name)
    scratch = None
    try:
        if digest != digest_expected:
            module.fail_json(msg="checksum mismatch for %s: expected %s, got %s"
                             % (redact(url), digest_expected, digest))
        with _tarball(module, tmp, url) as tar:
            try:
                checked = check_members(tar.getmembers(), top)
            except (tarfile.TarError, OSError, EOFError) as exc:
                module.fail_json(msg="%s is not a readable tarball: %s" % (redact(url), exc))
            if isinstance(checked, str):
                module.fail_json(msg="refusing to unpack %s: %s" % (redact(url), checked))
            names = set(rel for rel, _member in checked)
            missing = sorted(rel for rel in links.values() if not in_archive(rel, names))
            if missing:
                module.fail_json(msg="links point to %s, not in %s" % (", ".join(missing),
                                                                       redact(url)))
            scratch = tempfile.mkdtemp(prefix=".%s." % top, dir=dest)
            root = os.path.join(scratch, top)
            os.mkdir(root, 0o700)
            try:
                files = unpack(tar, checked, root)
            except (tarfile.TarError, OSError, EOFError) as exc:
                module.fail_json(msg="cannot unpack %s: %s" % (redact(url), exc))
        bad = escaping_link(root, files)
        if bad is not None:
            module.fail_json(msg="refusing to unpack %s: symbolic link %r leads outside the top "
                                 "directory" % (redact(url), top + "/" + bad))
        with open(os.path.join(root, RECORD), "w") as handle:
            json.dump({"url": redact(url), "sha256": digest, "files": files}, handle,
                      indent=1, sort_keys=True)
            handle.write("\n")
        os.chmod(os.path.join(root, RECORD), 0o644)
        _own(os.path.join(root, RECORD))
        if os.path.lexists(path):
            # The older directory goes into the scratch directory (removed below); put back
            # when the new one cannot take its place.
            old = os.path.join(scratch, top + ".old")
            os.rename(path, old)
            try:
                os.rename(root, path)
            except OSError:
                os.rename(old, path)
                raise
        else:
            os.rename(root, path)
    except OSError as exc:
        module.fail_json(msg="cannot install %s into %s: %s" % (redact(url), path, exc))
    finally:
        _remove(tmp)
        if scratch is not None:
            _remove(scratch)
    return digest


def check_links(module):
    """The links as {absolute link path: normalised relative target}, refused (one line) when
    a path or target is malformed or a link path holds a file or directory."""
    links = {}
    for link, rel in sorted(module.params["links"].items()):
        if not os.path.isabs(link) or os.path.normpath(link) != link or link == "/":
            module.fail_json(msg="links: %r is not a normalised absolute path" % (link,))
        if not isinstance(rel, str) or not rel or rel.startswith("/") or ".." in _parts(rel):
            module.fail_json(msg="links: the target of %s must be a path inside the top "
                                 "directory (relative, no '..'): %r" % (link, rel))
        if os.path.lexists(link) and not os.path.islink(link):
            kind = "a directory" if os.path.isdir(link) else "a file"
            module.fail_json(msg="links: %s is %s, not a symbolic link: refusing to replace it"
                             % (link, kind))
        links[link] = "/".join(_parts(rel))
    return links


def set_link(link, target):
    parent = os.path.dirname(link)
    if not os.path.isdir(parent):
        os.makedirs(parent, 0o755)
    tmp = os.path.join(parent, ".%s.%d.tmp" % (os.path.basename(link), os.getpid()))
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    try:
        os.rename(tmp, link)
    except OSError:
        os.unlink(tmp)
        raise


def main():
    module = AnsibleModule(
        argument_spec=dict(
            url=dict(type="str", required=True),
            sha256=dict(type="str", default=""),
            checksums_url=dict(type="str", default=""),
            dest=dict(type="path", required=True),
            links=dict(type="dict", default={}),
            timeout=dict(type="int", default=60),
            validate_certs=dict(type="bool", default=True),
        ),
        supports_check_mode=True,
    )
    url = module.params["url"]
    dest = os.path.normpath(module.params["dest"])
    name = url_basename(url)
    top = top_directory(name)
    if top is None:
        module.fail_json(msg="the file name of %s must end in .tar.gz or .tgz" % redact(url))
    pinned = module.params["sha256"].strip().lower()
    if pinned and not SHA256.match(pinned):
        module.fail_json(msg="sha256 must be 64 hexadecimal digits, not %r"
                             % module.params["sha256"])
    links = check_links(module)
    path = os.path.join(dest, top)
    record = read_record(path)
    done = installed(record, path, url, pinned)
    if done:
        missing = sorted(rel for rel in links.values() if not in_archive(rel, record["files"]))
        if missing:
            module.fail_json(msg="links point to %s, not in %s" % (", ".join(missing),
                                                                   redact(url)))
        digest = record.get("sha256", "")
    elif module.check_mode:
        digest = pinned
    else:
        digest = install(module, url, dest, top, path, links)
    changed_links = []
    for link, rel in sorted(links.items()):
        target = os.path.join(path, rel)
        current = os.readlink(link) if os.path.islink(link) else None
        if current == target:
            continue
        changed_links.append(link)
        if not module.check_mode:
            try:
                set_link(link, target)
            except OSError as exc:
                module.fail_json(msg="cannot link %s to %s: %s" % (link, target, exc))
    module.exit_json(changed=not done or bool(changed_links), path=path, sha256=digest,
                     downloaded=not done and not module.check_mode, links_changed=changed_links)


if __name__ == "__main__":
    main()
