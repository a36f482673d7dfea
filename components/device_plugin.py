"""DevicePluginStack: container toolkit, RuntimeClass, device plugin, GPU feature discovery and a CUDA check."""

from __future__ import annotations

from dataclasses import dataclass

import pulumi
import pulumi_kubernetes as k8s
import yaml

from components import labels
from components.driver import READY_FILE
from components.manifests import child_options, daemonset_spec, host_path, metadata, node_agent_pod

RUNTIME_CLASS = "nvidia"
DRIVER_ROOT = "/run/nvidia/driver"
TOOLKIT_ROOT = "/usr/local/nvidia"


@dataclass(frozen=True)
class DevicePluginStackArgs:
    """Images, the container runtime of the nodes, and optional GPU time-slicing."""

    toolkit_image: str
    device_plugin_image: str
    validator_image: str
    cuda_sample_image: str
    container_runtime: str
    time_slicing_replicas: int | None = None
    await_validation: bool = True
    namespace: str = labels.GPU_SYSTEM_NAMESPACE


class DevicePluginStack(pulumi.ComponentResource):
    """Makes GPUs schedulable: `nvidia.com/gpu` on every GPU node whose driver is up, proven by vectorAdd."""

    runtime_class: str
    validation: k8s.batch.v1.Job

    def __init__(self, name: str, args: DevicePluginStackArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:DevicePluginStack", name, None, opts)
        self.namespace = args.namespace
        self.runtime_class = RUNTIME_CLASS
        child = child_options(self, opts)
        runtime_class = k8s.node.v1.RuntimeClass(
            f"{name}-runtime-class", metadata=metadata(RUNTIME_CLASS), handler=RUNTIME_CLASS,
            scheduling={"nodeSelector": dict(labels.GPU_NODE_SELECTOR), "tolerations": [dict(labels.GPU_TOLERATION)]},
            opts=child)
        toolkit = self._toolkit(name, args, child)
        after_toolkit = child_options(self, opts, toolkit, runtime_class)
        plugin = self._device_plugin(name, args, after_toolkit)
        gfd = self._feature_discovery(name, args, after_toolkit)
        self.validation = self._validation(name, args, child_options(self, opts, plugin, gfd))
        self.register_outputs({"runtimeClass": self.runtime_class})

    def _wait_for_driver(self, image: str) -> dict:
        return {
            "name": "wait-for-driver", "image": image, "command": ["sh", "-c"],
            "args": [f"until [ -f {READY_FILE} ]; do echo waiting for the driver; sleep 5; done"],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "run-nvidia", "mountPath": "/run/nvidia", "readOnly": True}],
        }

    def _service_account(self, name: str, account: str, opts: pulumi.ResourceOptions, *,
                         api_access: bool = False) -> None:
        k8s.core.v1.ServiceAccount(f"{name}-sa-{account}", metadata=metadata(account, self.namespace),
                                   automount_service_account_token=api_access, opts=opts)

    def _toolkit(self, name: str, args: DevicePluginStackArgs, opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
        account = "nvidia-container-toolkit"
        self._service_account(name, account, opts)
        runtime = args.container_runtime
        config_dir = "/etc/crio/crio.conf.d" if runtime == "crio" else "/etc/containerd"
        socket_dir = "/run/crio" if runtime == "crio" else "/run/containerd"
        container = {
            "name": "nvidia-container-toolkit",
            "image": args.toolkit_image,
            "command": ["nvidia-toolkit"],
            "args": [TOOLKIT_ROOT],
            "env": [
                {"name": "RUNTIME", "value": runtime},
                {"name": "NVIDIA_DRIVER_ROOT", "value": DRIVER_ROOT},
                {"name": "DRIVER_ROOT_CTR_PATH", "value": "/driver-root"},
                {"name": "RUNTIME_CONFIG_DIR", "value": "/runtime/config-dir"},
                {"name": "RUNTIME_SOCKET", "value": f"/runtime/sock-dir/{runtime}.sock"},
                {"name": "CONTAINERD_RUNTIME_CLASS", "value": RUNTIME_CLASS},
                {"name": "CDI_ENABLED", "value": "true"},
            ],
            "securityContext": {"privileged": True, "seLinuxOptions": {"level": "s0"}},
            "volumeMounts": [
                {"name": "run-nvidia", "mountPath": "/run/nvidia", "mountPropagation": "Bidirectional"},
                {"name": "driver-root", "mountPath": "/driver-root", "mountPropagation": "HostToContainer",
                 "readOnly": True},
                {"name": "toolkit-install-dir", "mountPath": TOOLKIT_ROOT},
                {"name": "runtime-config", "mountPath": "/runtime/config-dir"},
                {"name": "runtime-socket", "mountPath": "/runtime/sock-dir"},
                {"name": "cdi-root", "mountPath": "/var/run/cdi"},
            ],
        }
        pod = node_agent_pod(
            account, service_account=account, containers=[container], hostPID=True,
            initContainers=[self._wait_for_driver(args.validator_image)],
            volumes=[host_path("run-nvidia", "/run/nvidia", "DirectoryOrCreate"),
                     host_path("driver-root", DRIVER_ROOT, "DirectoryOrCreate"),
                     host_path("toolkit-install-dir", TOOLKIT_ROOT, "DirectoryOrCreate"),
                     host_path("runtime-config", config_dir, "DirectoryOrCreate"),
                     host_path("runtime-socket", socket_dir),
                     host_path("cdi-root", "/var/run/cdi", "DirectoryOrCreate")])
        return k8s.apps.v1.DaemonSet(f"{name}-toolkit", metadata=metadata(account, self.namespace),
                                     spec=daemonset_spec(account, pod), opts=opts)

    def _device_plugin(self, name: str, args: DevicePluginStackArgs,
                       opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
        account = "nvidia-device-plugin"
        self._service_account(name, account, opts)
        env = [{"name": "NVIDIA_DRIVER_ROOT", "value": DRIVER_ROOT},
               {"name": "DEVICE_LIST_STRATEGY", "value": "envvar"},
               {"name": "DEVICE_ID_STRATEGY", "value": "uuid"},
               {"name": "FAIL_ON_INIT_ERROR", "value": "true"}]
        mounts = [{"name": "device-plugins", "mountPath": "/var/lib/kubelet/device-plugins"},
                  {"name": "driver-root", "mountPath": DRIVER_ROOT, "mountPropagation": "HostToContainer",
                   "readOnly": True}]
        volumes = [host_path("device-plugins", "/var/lib/kubelet/device-plugins"),
                   host_path("driver-root", DRIVER_ROOT, "DirectoryOrCreate")]
        config_map = None
        if args.time_slicing_replicas:
            config = {"version": "v1", "flags": {"migStrategy": "none"}, "sharing": {"timeSlicing": {
                "resources": [{"name": labels.GPU_RESOURCE, "replicas": args.time_slicing_replicas}]}}}
            config_map = k8s.core.v1.ConfigMap(
                f"{name}-time-slicing", metadata=metadata("nvidia-device-plugin-config", self.namespace),
                data={"config.yaml": yaml.safe_dump(config, sort_keys=False)}, opts=opts)
            env.append({"name": "CONFIG_FILE", "value": "/config/config.yaml"})
            mounts.append({"name": "config", "mountPath": "/config", "readOnly": True})
            volumes.append({"name": "config", "configMap": {"name": "nvidia-device-plugin-config"}})
        container = {
            "name": "nvidia-device-plugin", "image": args.device_plugin_image,
            "command": ["nvidia-device-plugin"], "env": env, "volumeMounts": mounts,
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "resources": {"requests": {"cpu": "10m", "memory": "64Mi"}},
        }
        pod = node_agent_pod(account, service_account=account, containers=[container], volumes=volumes,
                             runtimeClassName=RUNTIME_CLASS)
        depends = [config_map] if config_map else []
        return k8s.apps.v1.DaemonSet(f"{name}-device-plugin", metadata=metadata(account, self.namespace),
                                     spec=daemonset_spec(account, pod),
                                     opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(depends_on=depends)))

    def _feature_discovery(self, name: str, args: DevicePluginStackArgs,
                           opts: pulumi.ResourceOptions) -> k8s.apps.v1.DaemonSet:
        """GFD publishes GPU model, memory and CUDA labels through NFD's NodeFeature API: it needs only that."""
        account = "nvidia-gpu-feature-discovery"
        self._service_account(name, account, opts, api_access=True)
        k8s.rbac.v1.Role(f"{name}-gfd-role", metadata=metadata(account, self.namespace), rules=[
            {"apiGroups": [labels.NFD_API_GROUP], "resources": ["nodefeatures"], "verbs": ["create", "get", "update"]}],
            opts=opts)
        k8s.rbac.v1.RoleBinding(
            f"{name}-gfd-binding", metadata=metadata(account, self.namespace),
            subjects=[{"kind": "ServiceAccount", "name": account, "namespace": self.namespace}],
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": account}, opts=opts)
        container = {
            "name": "gpu-feature-discovery", "image": args.device_plugin_image,
            "command": ["gpu-feature-discovery"],
            "env": [{"name": "NVIDIA_DRIVER_ROOT", "value": DRIVER_ROOT},
                    {"name": "GFD_SLEEP_INTERVAL", "value": "60s"},
                    {"name": "GFD_USE_NODE_FEATURE_API", "value": "true"},
                    {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
                    {"name": "KUBERNETES_NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}}],
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
            "volumeMounts": [{"name": "driver-root", "mountPath": DRIVER_ROOT, "readOnly": True}],
        }
        pod = node_agent_pod(account, service_account=account, containers=[container],
                             automountServiceAccountToken=True, runtimeClassName=RUNTIME_CLASS,
                             volumes=[host_path("driver-root", DRIVER_ROOT, "DirectoryOrCreate")])
        return k8s.apps.v1.DaemonSet(f"{name}-gfd", metadata=metadata(account, self.namespace),
                                     spec=daemonset_spec(account, pod), opts=opts)

    def _validation(self, name: str, args: DevicePluginStackArgs, opts: pulumi.ResourceOptions) -> k8s.batch.v1.Job:
        annotations = {} if args.await_validation else {labels.SKIP_AWAIT: "true"}
        container = {
            "name": "cuda-vectoradd", "image": args.cuda_sample_image,
            "resources": {"limits": {labels.GPU_RESOURCE: "1"}, "requests": {labels.GPU_RESOURCE: "1"}},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }
        return k8s.batch.v1.Job(
            f"{name}-validation",
            metadata=metadata("nvidia-device-plugin-validation", self.namespace, annotations=annotations),
            spec={"backoffLimit": 6, "template": {"spec": {
                "restartPolicy": "OnFailure", "runtimeClassName": RUNTIME_CLASS,
                "tolerations": [dict(labels.GPU_TOLERATION)], "containers": [container]}}},
            opts=pulumi.ResourceOptions.merge(opts, pulumi.ResourceOptions(
                replace_on_changes=["spec"], delete_before_replace=True)),
        )
