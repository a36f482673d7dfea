"""fleet.sysctls: the kubelet's three classes of sysctls, by the cluster's Kubernetes version."""

from __future__ import annotations

import pytest

from fleet.sysctls import classify, is_name, is_node_level, safe_sysctls


@pytest.mark.parametrize(("name", "version", "expected"), [
    ("kernel.shm_rmid_forced", "1.30", "safe"),
    ("net.ipv4.ip_local_port_range", "1.30", "safe"),
    ("net.ipv4.tcp_keepalive_time", "1.30", "safe"),       # safe from 1.29
    ("net.ipv4.tcp_rmem", "1.31", "unsafe"),               # safe only from 1.32: namespaced before
    ("net.ipv4.tcp_rmem", "1.32", "safe"),
    ("net.core.somaxconn", "1.31", "unsafe"),
    ("kernel.shmmax", "1.31", "unsafe"),
    ("kernel.msgmax", "1.31", "unsafe"),
    ("kernel.sem", "1.31", "unsafe"),
    ("fs.mqueue.msg_max", "1.31", "unsafe"),
    ("kernel.shm*", "1.31", "unsafe"),
    ("vm.max_map_count", "1.31", "node"),
    ("kernel.numa_balancing", "1.31", "node"),
    ("kernel.semmni", "1.31", "node"),                     # kernel.sem is an exact name, not a prefix
    ("fs.file-max", "1.31", "node"),
])
def test_classes(name: str, version: str, expected: str) -> None:
    assert classify(name, version) == expected


def test_safe_set_grows_with_the_version() -> None:
    assert len(safe_sysctls("1.30")) == 10 and safe_sysctls("1.30") < safe_sysctls("1.32")


def test_names_and_node_level() -> None:
    assert is_name("vm.max_map_count") and is_name("net.ipv4.conf.all.rp_filter") and is_name("kernel.shm*")
    assert not is_name("vm") and not is_name("VM.swappiness") and not is_name("vm.swappiness=1")
    assert not is_name("net.core.somaxconn\n") and not is_name("kernel.shm*\n")
    assert is_node_level("vm.swappiness") and not is_node_level("net.core.somaxconn")
    assert not is_node_level("kernel.shm_rmid_forced")
