"""The NVIDIA repositories' deb822 files (plugins/filter/deb822_sources.py): the text
deb822_repository wrote on a converged node, and refusals of names and URIs that could add
fields."""

from __future__ import annotations

import pytest
from ansible.errors import AnsibleFilterError

from tests.unit.collection_module import load_plugin

mod = load_plugin("filter", "deb822_sources")

# Read back from a simulated node that ansible.builtin.deb822_repository configured (the nvidia_repo
# role, before this filter): the same arguments must give the same bytes.
WRITTEN_BY_DEB822_REPOSITORY = (
    "X-Repolib-Name: nvidia-container-toolkit\n"
    "Signed-By: /etc/apt/keyrings/nvidia-container-toolkit.asc\n"
    "Suites: /\n"
    "Types: deb\n"
    "URIs: http://gpuc-sim-mirror:8080/libnvidia-container/stable/deb/$(ARCH)/\n")


def test_the_text_is_what_deb822_repository_wrote() -> None:
    got = mod.deb822_sources(
        [{"name": "nvidia-cuda", "uri": " http://m/cuda/debian12/x86_64/\n"},
         {"name": "nvidia-container-toolkit",
          "uri": "http://gpuc-sim-mirror:8080/libnvidia-container/stable/deb/$(ARCH)/"}],
        "/etc/apt/keyrings")
    assert list(got) == ["/etc/apt/sources.list.d/nvidia-cuda.sources",
                         "/etc/apt/sources.list.d/nvidia-container-toolkit.sources"]
    assert got["/etc/apt/sources.list.d/nvidia-container-toolkit.sources"] == WRITTEN_BY_DEB822_REPOSITORY
    assert got["/etc/apt/sources.list.d/nvidia-cuda.sources"].endswith(
        "URIs: http://m/cuda/debian12/x86_64/\n")  # trimmed


def test_another_directory() -> None:
    assert list(mod.deb822_sources([{"name": "a", "uri": "http://m/"}], "/k", "/tmp/s")) == [
        "/tmp/s/a.sources"]


@pytest.mark.parametrize(("repo", "message"), [
    ({"name": "../etc/passwd", "uri": "http://m/"}, "is not a plain repository name"),
    ({"name": "", "uri": "http://m/"}, "is not a plain repository name"),
    ({"name": "a", "uri": "http://m/\nTrusted: yes"}, "empty or has white space"),
    ({"name": "a", "uri": "http://m/ x"}, "empty or has white space"),
    ({"name": "a"}, "empty or has white space"),
    ("nvidia-cuda", "is not a dict with name and uri"),
])
def test_refused(repo: object, message: str) -> None:
    with pytest.raises(AnsibleFilterError, match=message):
        mod.deb822_sources([repo], "/etc/apt/keyrings")
