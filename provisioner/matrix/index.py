"""A package repository's own index, read: what ``stacks verify`` checks the pins against and
where a host's driver override outside the matrix gets its Ubuntu revision.

Two shapes, as the package managers read them:

- apt (flat or per-distribution): ``Packages.gz`` or ``Packages`` in the directory, stanzas of
  ``Package:`` / ``Version:`` (the version with its epoch, as dpkg compares it);
- dnf: ``repodata/repomd.xml`` naming the ``primary`` metadata (``<package>`` elements with
  ``<name>`` and ``<version epoch= ver= rel=>``) and, where the repository has module streams
  (RHEL 8/9 driver branches), the ``modules`` metadata (modulemd YAML documents whose
  ``artifacts`` list every package release of a stream).

The source is a directory or an http(s) URL of that directory. Nothing here touches a host;
a problem reading the index is one ``InputError`` line naming the source.
"""

from __future__ import annotations

import functools
import gzip
import io
import lzma
import re
import urllib.error
import urllib.request
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from provisioner.errors import InputError

IndexKind = Literal["apt", "dnf"]
# An index larger than this is not a package index (the biggest CUDA repository's primary
# metadata is a few MiB uncompressed).
_MAX_BYTES = 256 * 1024 * 1024
_TIMEOUT_S = 60
_REPO_NS = {"repo": "http://linux.duke.edu/metadata/repo"}
_COMMON_NS = "{http://linux.duke.edu/metadata/common}"


@dataclass
class PackageIndex:
    """Every (name, version) a repository carries; versions as the package manager writes
    them (``1:4.4.0-1`` for apt, ``3:580.95.05-1.el9`` for dnf, epoch 0 left out)."""

    source: str
    kind: IndexKind
    versions: dict[str, set[str]] = field(default_factory=dict)
    # dnf module streams ("nvidia-driver:580-open") -> the package releases they list (NEVRA).
    streams: dict[str, set[str]] = field(default_factory=dict)
    has_module_metadata: bool = False

    def add(self, name: str, version: str) -> None:
        self.versions.setdefault(name, set()).add(version)

    def has(self, name: str, version: str) -> bool:
        return version in self.versions.get(name, ())

    def releases(self, name: str) -> list[str]:
        """Every version of ``name``, oldest first (the package manager's order)."""
        return sorted(self.versions.get(name, ()), key=sort_key(self.kind))

    def stream_has(self, stream: str, name: str, version: str) -> bool:
        """Whether module stream ``stream`` lists ``name`` at ``version`` (dnf only)."""
        return any(_nevra_matches(nevra, name, version) for nevra in self.streams.get(stream, ()))


# --------------------------------------------------------------------------- reading


def load_index(source: str | Path) -> PackageIndex:
    """The index of the repository at ``source`` (a directory or an http(s) URL)."""
    text = str(source)
    reader = _Reader(text)
    packages = reader.first("Packages.gz", "Packages.xz", "Packages")
    if packages is not None:
        index = PackageIndex(source=text, kind="apt")
        for name, version in parse_packages(packages.decode("utf-8", "replace")):
            index.add(name, version)
        return index
    repomd = reader.first("repodata/repomd.xml")
    if repomd is None:
        raise InputError(f"index {text}: no Packages, Packages.gz or repodata/repomd.xml there; "
                         "give the directory of an apt repository's Packages or of a dnf "
                         "repository's repodata/")
    return _dnf_index(text, reader, repomd)


def _dnf_index(text: str, reader: _Reader, repomd: bytes) -> PackageIndex:
    index = PackageIndex(source=text, kind="dnf")
    try:
        root = ET.fromstring(repomd)
    except ET.ParseError as exc:
        raise InputError(f"index {text}: repodata/repomd.xml is not XML ({exc})") from exc
    locations = {data.get("type"): data.find("repo:location", _REPO_NS)
                 for data in root.findall("repo:data", _REPO_NS)}
    primary = locations.get("primary")
    if primary is None or not primary.get("href"):
        raise InputError(f"index {text}: repodata/repomd.xml names no primary metadata")
    for name, version in parse_primary(reader.need(str(primary.get("href")))):
        index.add(name, version)
    modules = locations.get("modules")
    if modules is not None and modules.get("href"):
        index.has_module_metadata = True
        index.streams = parse_modules(reader.need(str(modules.get("href"))).decode("utf-8"))
    return index


class _Reader:
    """Files of one repository directory, local or over http(s), decompressed by suffix."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.remote = source.startswith(("http://", "https://"))
        if not self.remote:
            if "://" in source:
                raise InputError(f"index {source}: only a directory or an http(s) URL is "
                                 "understood")
            if not Path(source).is_dir():
                raise InputError(f"index {source}: no such directory")

    def first(self, *names: str) -> bytes | None:
        for name in names:
            data = self._get(name)
            if data is not None:
                return data
        return None

    def need(self, name: str) -> bytes:
        data = self._get(name)
        if data is None:
            raise InputError(f"index {self.source}: {name} is named by the repository "
                             "metadata but cannot be read")
        return data

    def _get(self, name: str) -> bytes | None:
        raw = self._fetch(name) if self.remote else self._read(name)
        if raw is None:
            return None
        return _decompress(self.source, name, raw)

    def _read(self, name: str) -> bytes | None:
        path = Path(self.source) / name
        if not path.is_file():
            return None
        if path.stat().st_size > _MAX_BYTES:
            raise InputError(f"index {self.source}: {name} is over {_MAX_BYTES >> 20} MiB")
        return path.read_bytes()

    def _fetch(self, name: str) -> bytes | None:
        url = self.source.rstrip("/") + "/" + name
        try:
            # Certificates are verified (urllib's default context); plain http is the user's
            # choice for a mirror on their own network.
            with urllib.request.urlopen(url, timeout=_TIMEOUT_S) as response:
                data: bytes = response.read(_MAX_BYTES + 1)
        except urllib.error.HTTPError as exc:
            if exc.code == 404:
                return None
            raise InputError(f"index {url}: HTTP {exc.code} {exc.reason}") from exc
        except (urllib.error.URLError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise InputError(f"index {url}: cannot be read ({reason})") from exc
        if len(data) > _MAX_BYTES:
            raise InputError(f"index {url}: over {_MAX_BYTES >> 20} MiB")
        return data


def _decompress(source: str, name: str, raw: bytes) -> bytes:
    try:
        if name.endswith(".gz"):
            with gzip.GzipFile(fileobj=io.BytesIO(raw)) as fh:
                return _bounded(fh.read(_MAX_BYTES + 1), source, name)
        if name.endswith(".xz"):
            return _bounded(lzma.LZMADecompressor().decompress(raw, _MAX_BYTES + 1), source, name)
    except (OSError, EOFError, lzma.LZMAError) as exc:
        raise InputError(f"index {source}: {name} does not decompress ({exc})") from exc
    if name.endswith((".zst", ".bz2")):
        raise InputError(f"index {source}: {name} is compressed in a way this reader does not "
                         "know; recreate the repository metadata with gzip (createrepo_c "
                         "--general-compress-type=gz)")
    return raw


def _bounded(data: bytes, source: str, name: str) -> bytes:
    if len(data) > _MAX_BYTES:
        raise InputError(f"index {source}: {name} decompresses to over {_MAX_BYTES >> 20} MiB")
    return data


def parse_packages(text: str) -> Iterator[tuple[str, str]]:
    """(Package, Version) of every stanza of an apt ``Packages`` file."""
    name = version = None
    for line in [*text.splitlines(), ""]:
        if not line.strip():
            if name and version:
                yield name, version
            name = version = None
        elif line.startswith("Package:"):
            name = line.split(":", 1)[1].strip()
        elif line.startswith("Version:"):
            version = line.split(":", 1)[1].strip()


def parse_primary(data: bytes) -> Iterator[tuple[str, str]]:
    """(name, [epoch:]version-release) of every package of a dnf ``primary.xml``."""
    try:
        root = ET.fromstring(data)
    except ET.ParseError as exc:
        raise InputError(f"primary metadata is not XML ({exc})") from exc
    for pkg in root.iter(f"{_COMMON_NS}package"):
        name = pkg.findtext(f"{_COMMON_NS}name")
        ver = pkg.find(f"{_COMMON_NS}version")
        if not name or ver is None:
            continue
        yield name, rpm_evr(ver.get("epoch") or "0", ver.get("ver") or "", ver.get("rel") or "")


def rpm_evr(epoch: str, version: str, release: str) -> str:
    """``3:580.95.05-1.el9``; epoch 0 is left out, as dnf and the matrix write it."""
    evr = f"{version}-{release}" if release else version
    return evr if epoch in ("", "0") else f"{epoch}:{evr}"


def parse_modules(text: str) -> dict[str, set[str]]:
    """{"name:stream": artifacts (NEVRA)} of the modulemd documents of a ``modules.yaml``."""
    out: dict[str, set[str]] = {}
    try:
        docs = list(yaml.safe_load_all(text))
    except yaml.YAMLError as exc:
        raise InputError(f"module metadata is not YAML ({exc})") from exc
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("document") != "modulemd":
            continue
        data = doc.get("data") or {}
        stream = f"{data.get('name')}:{data.get('stream')}"
        rpms = ((data.get("artifacts") or {}).get("rpms")) or []
        out.setdefault(stream, set()).update(str(a) for a in rpms)
    return out


def _nevra_matches(nevra: str, name: str, version: str) -> bool:
    """Whether ``name-[epoch:]version-release.arch`` is ``name`` at ``version``."""
    stem, _, _arch = nevra.rpartition(".")
    if not stem.startswith(name + "-"):
        return False
    evr = stem[len(name) + 1:]
    epoch, colon, rest = evr.partition(":")
    if not colon:
        epoch, rest = "0", evr
    version_part, dash, release = rest.rpartition("-")
    if not dash:
        return False
    return rpm_evr(epoch, version_part, release) == version and re.match(r"^\d", rest) is not None


# --------------------------------------------------------------------------- ordering


def compare(kind: IndexKind, a: str, b: str) -> int:
    """<0, 0, >0 as version ``a`` sorts before, with or after ``b``: dpkg's order for apt,
    rpm's for dnf (epoch, then the upstream version, then the revision)."""
    ea, ua, ra = _split_evr(a)
    eb, ub, rb = _split_evr(b)
    if ea != eb:
        return ea - eb
    part = _deb_cmp_part if kind == "apt" else _rpm_cmp_part
    return part(ua, ub) or part(ra, rb)


def sort_key(kind: IndexKind) -> Callable[[str], Any]:
    return functools.cmp_to_key(lambda a, b: compare(kind, a, b))


def newer(kind: IndexKind, a: str, b: str) -> bool:
    """Whether version ``a`` sorts after ``b`` as dpkg (apt) or rpm (dnf) orders them."""
    return compare(kind, a, b) > 0


def _split_evr(version: str) -> tuple[int, str, str]:
    epoch, colon, rest = version.partition(":")
    if not colon or not epoch.isdigit():
        epoch, rest = "0", version
    upstream, dash, revision = rest.rpartition("-")
    if not dash:
        upstream, revision = rest, ""
    return int(epoch), upstream, revision


def _deb_order(char: str) -> int:
    if char == "~":
        return -1
    if char.isalpha():
        return ord(char)
    return ord(char) + 256


def _deb_cmp_part(a: str, b: str) -> int:
    """dpkg's verrevcmp: non-digit runs by its character order (~ first, letters before
    other characters), then digit runs as numbers."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _deb_order(a[i]) if i < len(a) and not a[i].isdigit() else 0
            bc = _deb_order(b[j]) if j < len(b) and not b[j].isdigit() else 0
            if ac != bc:
                return ac - bc
            i += 1
            j += 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i += 1
            j += 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return first_diff
    return 0


def _rpm_cmp_part(a: str, b: str) -> int:
    """rpmvercmp: alphanumeric segments; ~ sorts before everything, ^ after the end."""
    if a == b:
        return 0
    sa: list[str] = re.findall(r"~|\^|\d+|[A-Za-z]+", a)
    sb: list[str] = re.findall(r"~|\^|\d+|[A-Za-z]+", b)
    for x, y in zip(sa, sb, strict=False):
        if x == y:
            continue
        if x == "~" or y == "~":
            return -1 if x == "~" else 1
        if x == "^" or y == "^":  # a caret sorts after the end, before any segment
            return -1 if x == "^" else 1
        if x.isdigit() and y.isdigit():
            return (int(x) > int(y)) - (int(x) < int(y))
        if x.isdigit() != y.isdigit():
            return 1 if x.isdigit() else -1
        return (x > y) - (x < y)
    rest_a, rest_b = sa[len(sb):], sb[len(sa):]
    if rest_a:
        return -1 if rest_a[0] == "~" else 1
    if rest_b:
        return 1 if rest_b[0] == "~" else -1
    return 0


def versions_of_release(index: PackageIndex, names: Iterable[str], release: str) -> dict[str, str]:
    """{name: full version} of each of ``names`` the index carries at upstream ``release``
    (``580.126.09`` -> ``580.126.09-1ubuntu1``); the newest revision when several."""
    out: dict[str, str] = {}
    for name in names:
        matching = [v for v in index.releases(name) if _split_evr(v)[1] == release]
        if matching:
            out[name] = matching[-1]
    return out
