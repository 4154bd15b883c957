# -*- coding: utf-8 -*-
# Copyright: gpu-cluster-provisioner contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""NVIDIA's precompiled kernel module packages of RHEL 8/9: one package per driver release and
kernel, ``kmod-nvidia-${driver}-${kernel}-${kernel_release}`` (kmod-nvidia-440.33.01-4.18.0-
147.5.1 for kernel 4.18.0-147.5.1.el8_1.x86_64; NVIDIA/yum-packaging-precompiled-kmod
README.md "Deliverables", kmod-nvidia.spec Name). The plan gives the name with ``@K@`` for the
kernel (provisioner/matrix/packages.py precompiled_kmod_name); the node fills in its kernels."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

# The dist and architecture tags a RHEL kernel release ends in (.el9_4.x86_64): the package name
# carries the kernel's version and release without them (kmod-nvidia.spec: kmod_kernel_version
# is %{kernel}-%{kernel_release}%{dist}, the name only %{kernel}-%{kernel_release}).
_DIST_ARCH = re.compile(r"(\.el[0-9]+(_[0-9]+)*)?(\.(x86_64|aarch64))?$")


def kernel_part(release):
    """The kernel part of the package name: 5.14.0-427.13.1.el9_4.x86_64 -> 5.14.0-427.13.1;
    a release without those tags (6.1.0-27-amd64) stays as it is."""
    return _DIST_ARCH.sub("", release, count=1)


def kmod_names(template, kernels):
    """{kernel release: its package name} for each of ``kernels``; {} without a template."""
    if not template:
        return {}
    return dict((kernel, template.replace("@K@", kernel_part(kernel))) for kernel in kernels)


def kernel_states(names, present):
    """{kernel release: installed | missing}: whether each kernel's package is among
    ``present`` (package names, e.g. the lines `rpm -q --qf '%{NAME}\\n'` prints)."""
    have = set(line.strip() for line in present)
    return dict((kernel, "installed" if name in have else "missing")
                for kernel, name in names.items())
