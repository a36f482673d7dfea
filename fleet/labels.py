"""The Node Feature Discovery labels the fleet facts name: a node's operating system as NFD reports it."""

from __future__ import annotations

NFD_PREFIX = "feature.node.kubernetes.io"
OS_ID_LABEL = f"{NFD_PREFIX}/system-os_release.ID"
OS_VERSION_LABEL = f"{NFD_PREFIX}/system-os_release.VERSION_ID"
# NFD splits VERSION_ID into `.major` and `.minor` (source/system/system.go, GetLabels and splitVersion); the GPU
# Operator selects RHEL nodes by the major (gpu-operator v26.7.0 internal/state/nodepool.go, getNodePools).
OS_VERSION_MAJOR_LABEL = f"{NFD_PREFIX}/system-os_release.VERSION_ID.major"
