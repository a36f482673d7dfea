"""Kernel parameters (sysctls) in the three classes the kubelet knows: safe, unsafe (namespaced), node-level.

- safe: namespaced and isolated; any pod may set them in `spec.securityContext.sysctls`, no node setting needed.
  The kubelet's allowlist (kubernetes pkg/kubelet/sysctl/safe_sysctls.go) and the Pod Security baseline check
  (staging/src/k8s.io/pod-security-admission/policy/check_sysctls.go: sysctlsAllowedV1Dot0, V1Dot27, V1Dot29,
  V1Dot32) grow with the Kubernetes minor; the set here is the one of the cluster's version.
- unsafe: namespaced (kubernetes pkg/kubelet/sysctl/namespace.go, `NamespacedBy`: kernel.sem, kernel.shm*,
  kernel.msg*, fs.mqueue.*, net.*), so a pod may set them, but only on a kubelet that lists them in
  `allowedUnsafeSysctls`: they can affect other pods on the node.
- node-level: everything else (vm.*, kernel.numa_balancing, fs.file-max, ...). Not namespaced, so no pod may
  set them; only the node's own configuration may (Tuned on OpenShift, the boot configuration on AWS).
"""

from __future__ import annotations

import re
from typing import Literal

SysctlClass = Literal["safe", "unsafe", "node"]

# The safe set by the Kubernetes minor that added each name.
_SAFE_SINCE: dict[str, int] = {
    "kernel.shm_rmid_forced": 0,
    "net.ipv4.ip_local_port_range": 0,
    "net.ipv4.tcp_syncookies": 0,
    "net.ipv4.ping_group_range": 0,
    "net.ipv4.ip_unprivileged_port_start": 0,
    "net.ipv4.ip_local_reserved_ports": 27,
    "net.ipv4.tcp_keepalive_time": 29,
    "net.ipv4.tcp_fin_timeout": 29,
    "net.ipv4.tcp_keepalive_intvl": 29,
    "net.ipv4.tcp_keepalive_probes": 29,
    "net.ipv4.tcp_rmem": 32,
    "net.ipv4.tcp_wmem": 32,
}
# The kubelet's namespaced sysctls: exact names, then prefixes.
_NAMESPACED_NAMES = ("kernel.sem",)
_NAMESPACED_PREFIXES = ("kernel.shm", "kernel.msg", "fs.mqueue.", "net.")
# A sysctl name as sysctl(8) writes it (dots; `/` also separates on the command line, never here); a trailing
# `*` is a kubelet pattern (allowedUnsafeSysctls accepts `prefix*`).
_NAME = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]+)+")
_PATTERN = re.compile(r"[a-z][a-z0-9_-]*(\.[a-z0-9_-]*)*\*")


def safe_sysctls(kubernetes_version: str) -> frozenset[str]:
    """The kubelet's safe sysctls for a Kubernetes minor ("1.31")."""
    minor = int(kubernetes_version.split(".")[1])
    return frozenset(name for name, since in _SAFE_SINCE.items() if since <= minor)


def is_name(name: str) -> bool:
    """Whether `name` is a sysctl name (dotted, lowercase) or, with a trailing `*`, a kubelet pattern."""
    return bool(_NAME.fullmatch(name) or _PATTERN.fullmatch(name))


def classify(name: str, kubernetes_version: str) -> SysctlClass:
    """safe, unsafe or node for a sysctl name (or a `prefix*` pattern, classified by its prefix)."""
    if name in safe_sysctls(kubernetes_version):
        return "safe"
    stem = name.removesuffix("*")
    if stem in _NAMESPACED_NAMES or any(stem.startswith(prefix) for prefix in _NAMESPACED_PREFIXES):
        return "unsafe"
    return "node"


def is_node_level(name: str) -> bool:
    """Whether no pod may set this sysctl, on any Kubernetes version (it is not namespaced)."""
    return classify(name, "1.0") == "node" and name not in _SAFE_SINCE
