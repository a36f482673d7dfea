"""AdmissionGate: proof that the API server enforces the tenant admission policies, before any tenant is bound.

The API server loads a new ValidatingAdmissionPolicy and its binding asynchronously: its policy source rebuilds the
policies it enforces from its informers' caches at most once a second (k8s.io/apiserver v0.34.4,
pkg/admission/plugin/policy/generic/policy_source.go, policyRefreshInterval), later under load. A policy that was
created is therefore not yet a policy in force. The gate is a Job that asks the API server, by server-side dry runs,
to create one object each policy must refuse, and completes only once every one is refused in that policy's name
(`ValidatingAdmissionPolicy '<name>' with binding '<name>' denied request: ...`, validating/dispatcher.go). The
Kubernetes provider waits for a Job to complete (provider/pkg/await/job.go: condition `Complete`); tenants' members
are bound after it.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from components import labels
from components.admission import POLICY_NAME as TENANT_PODS_POLICY
from components.dra_admission import POLICY_NAME as CLAIMS_POLICY
from components.manifests import RESTRICTED_CONTAINER, child_options, metadata, run_once
from components.tenant_network import DEFAULT_NETWORK_ANNOTATION, POLICY_NAME as NETWORK_POLICY
from components.tenant_objects import POLICY_NAME as OBJECTS_POLICY, TOKEN_SECRET
from components.tenant_quota import quota as enforced_quota
from fleet.dra import OPERATOR_CLASSES

# Where the gate's Job runs, and the namespace the tenant policies bind where nothing can be created.
GATE_NAMESPACE, PROBE_NAMESPACE = labels.ADMISSION_GATE_NAMESPACES
ACCOUNT = "admission-gate"
GATE_TIMEOUT_SECONDS = 600
# Kubernetes: an image with sh and curl from registry.k8s.io (a registry the policy pack allows): the project's
# agnhost at the version its v1.34.4 e2e suite pins (test/utils/image/manifest.go: agnhost 2.56), Alpine 3.21 with
# curl and bash (test/images/agnhost/Dockerfile, BASEIMAGE). The release's kubectl image has no shell
# (build/server-image/kubectl/Dockerfile: the binary alone on go-runner), so it could not ask again.
CURL_IMAGE = "registry.k8s.io/e2e-test-images/agnhost:2.56"
NOBODY = 65534  # agnhost's image sets no user (root): the gate runs as nobody


@dataclass(frozen=True)
class Probe:
    """An object (`resource`, `body`) that the policy `policy` refuses in a tenant namespace, and nothing else does."""

    policy: str
    resource: str
    body: dict[str, Any]

    @property
    def group(self) -> str:
        """The object's API group ("" for the core group)."""
        return self.body["apiVersion"].rpartition("/")[0]

    @property
    def path(self) -> str:
        """Where the API server serves the object's group and version."""
        return f"apis/{self.body['apiVersion']}" if self.group else f"api/{self.body['apiVersion']}"

    @property
    def quota_key(self) -> str:
        """The ResourceQuota key that counts objects of this resource: core kinds have names of their own, any other
        `count/<resource>.<group>` (k8s.io/apiserver v0.34.4 pkg/quota/v1/generic/evaluator.go,
        ObjectCountQuotaResourceNameFor, which kubernetes v1.34.4 pkg/quota/v1/evaluator/core/resource_claims.go
        ClaimObjectCountName uses)."""
        return f"count/{self.resource}.{self.group}" if self.group else self.resource


def _pod(name: str, image: str, **spec: Any) -> dict[str, Any]:
    annotations = spec.pop("annotations", None)
    container = {"name": "probe", "image": image, "securityContext": RESTRICTED_CONTAINER,
                 **({"resources": spec.pop("resources")} if "resources" in spec else {})}
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, **({"annotations": annotations} if annotations else {})},
            "spec": {"securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
                     "containers": [container], **spec}}


def _claim(name: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "resource.k8s.io/v1", "kind": name, "metadata": {"name": "names-a-class"}, "spec": spec}


def tenant_probes(image: str, queue: bool, dra: bool = False) -> tuple[Probe, ...]:
    """One object per policy a tenant is held to, each breaking that policy only (the API server names only the first
    policy that refuses) and Pod Security `restricted` not at all. In allocation mode dra, a claim and a claim
    template naming a DeviceClass: the probe namespace is given none."""
    probes = [
        Probe(TENANT_PODS_POLICY, "pods", _pod("tolerates-gpu-taint", image, tolerations=[
            {"key": labels.GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}])),
        Probe(NETWORK_POLICY, "pods", _pod("swaps-cluster-network", image, annotations={
            DEFAULT_NETWORK_ANNOTATION: "default/probe"})),
        Probe(f"{OBJECTS_POLICY}-secrets", "secrets", {
            "apiVersion": "v1", "kind": "Secret", "type": TOKEN_SECRET,
            "metadata": {"name": "token", "annotations": {"kubernetes.io/service-account.name": "default"}}}),
        Probe(f"{OBJECTS_POLICY}-services", "services", {
            "apiVersion": "v1", "kind": "Service", "metadata": {"name": "node-port"},
            "spec": {"type": "NodePort", "ports": [{"port": 80}]}}),
    ]
    if queue:
        probes.append(Probe(labels.QUEUE_POLICY_NAME, "pods", _pod("gpu-outside-queue", image, resources={
            "limits": {labels.GPU_RESOURCE: "1"}})))
    if dra:
        # The operator's class of whole GPUs: one no tenant is given.
        devices = {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": OPERATOR_CLASSES[0]}}]}}
        probes += [Probe(f"{CLAIMS_POLICY}-resourceclaims", "resourceclaims", _claim("ResourceClaim", devices)),
                   Probe(f"{CLAIMS_POLICY}-resourceclaimtemplates", "resourceclaimtemplates",
                         _claim("ResourceClaimTemplate", {"spec": devices}))]
    return tuple(probes)


# POSIX sh. Each probe is a dry-run create in the probe namespace; the API server's answer is searched for the
# policy's refusal, and until then (the object admitted, or refused by the probe namespace's quota) asked again.
# With `oc` (OpenShift's CLI image) the request is oc's; else curl's, with the pod's service-account token.
# APISERVER and ACCOUNT_DIR default to what a pod sees.
GATE_SCRIPT_HEAD = """set -u
api=${APISERVER:-https://kubernetes.default.svc}
sa=${ACCOUNT_DIR:-/var/run/secrets/kubernetes.io/serviceaccount}
dry_run() {
  if command -v oc >/dev/null 2>&1; then
    printf '%s' "$3" | oc create --dry-run=server -n "$NAMESPACE" -f - 2>&1
  else
    curl -sS --max-time 10 --cacert "$sa/ca.crt" -H "Authorization: Bearer $(cat "$sa/token")" \\
      -H 'Content-Type: application/json' --data-binary "$3" "$api/$1/namespaces/$NAMESPACE/$2?dryRun=All" 2>&1
  fi
}
refused_by() {
  echo "waiting for $1 to refuse $3 in $NAMESPACE"
  until dry_run "$2" "$3" "$4" | grep -q "ValidatingAdmissionPolicy '$1' with binding"; do sleep 2; done
  echo "$1 is in force"
}
"""


def gate_script(probes: tuple[Probe, ...]) -> str:
    """The gate's shell script: every probe refused by its policy, in order."""
    bodies = [json.dumps(probe.body, separators=(",", ":")) for probe in probes]
    if any("'" in body for body in bodies):
        raise ValueError("a probe's body may not hold a single quote (the script quotes it so)")
    return GATE_SCRIPT_HEAD + "".join(f"refused_by {probe.policy} {probe.path} {probe.resource} '{body}'\n"
                                      for probe, body in zip(probes, bodies))


@dataclass(frozen=True)
class AdmissionGateArgs:
    """The objects the policies must refuse, the image that asks (with sh and curl, or `oc`), and whether the
    cluster is OpenShift (whose restricted SCC picks the gate's user)."""

    probes: tuple[Probe, ...]
    image: str
    openshift: bool = False


class AdmissionGate(pulumi.ComponentResource):
    """A probe namespace the tenant policies bind (labelled as a tenant's) where a quota of 0 keeps any object from
    being created, and a Job whose service account may only create there (its dry runs need that verb), run
    after the policies: it completes once each refuses its probe. `ready` is what tenants' bindings wait for."""

    ready: k8s.batch.v1.Job

    def __init__(self, name: str, args: AdmissionGateArgs, opts: pulumi.ResourceOptions | None = None):
        super().__init__("gpu-platform:index:AdmissionGate", name, None, opts)
        restricted = {"pod-security.kubernetes.io/enforce": "restricted"}
        probe_namespace = k8s.core.v1.Namespace(f"{name}-probe-namespace", metadata=metadata(
            PROBE_NAMESPACE, extra_labels={labels.TENANT_LABEL: PROBE_NAMESPACE, labels.ADMISSION_PROBE_LABEL: "true",
                                           **restricted}), opts=child_options(self, opts))
        in_probe = child_options(self, opts, probe_namespace)
        # A dry run is authorised as the create it stands for, so the gate holds `create` on what it probes with; this
        # quota of 0 of each (checked after the policies) refuses every real one. Its status must be written before it
        # refuses anything.
        quota = enforced_quota(f"{name}-probe-quota", "nothing", PROBE_NAMESPACE,
                               {"hard": {probe.quota_key: "0" for probe in args.probes}}, in_probe)
        namespace = k8s.core.v1.Namespace(f"{name}-namespace", metadata=metadata(
            GATE_NAMESPACE, extra_labels=restricted), opts=child_options(self, opts))
        in_gate = child_options(self, opts, namespace)
        account = k8s.core.v1.ServiceAccount(f"{name}-sa", metadata=metadata(ACCOUNT, GATE_NAMESPACE), opts=in_gate)
        groups = sorted({probe.group for probe in args.probes})
        role = k8s.rbac.v1.Role(f"{name}-role", metadata=metadata(ACCOUNT, PROBE_NAMESPACE), rules=[
            {"apiGroups": [group], "resources": sorted({p.resource for p in args.probes if p.group == group}),
             "verbs": ["create"]} for group in groups], opts=in_probe)
        binding = k8s.rbac.v1.RoleBinding(
            f"{name}-binding", metadata=metadata(ACCOUNT, PROBE_NAMESPACE),
            subjects=[{"kind": "ServiceAccount", "name": ACCOUNT, "namespace": GATE_NAMESPACE}],
            role_ref={"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": ACCOUNT}, opts=in_probe)
        script = gate_script(args.probes)
        # Named after what it proves: a change of the probes is a new Job, run before the old one goes.
        digest = hashlib.sha256(f"{args.image}\n{script}".encode()).hexdigest()[:10]
        self.ready = k8s.batch.v1.Job(
            f"{name}-job", metadata=metadata(f"admission-gate-{digest}", GATE_NAMESPACE, annotations={
                labels.TIMEOUT_SECONDS: str(GATE_TIMEOUT_SECONDS)}),
            spec=run_once(ACCOUNT, GATE_TIMEOUT_SECONDS, {
                "name": "gate",
                "image": args.image,
                "command": ["/bin/sh", "-c", script],
                "env": [{"name": "NAMESPACE", "value": PROBE_NAMESPACE}],
                "resources": {"requests": {"cpu": "10m", "memory": "32Mi"}, "limits": {"memory": "64Mi"}},
            }, pod_security=None if args.openshift else {"runAsUser": NOBODY}),
            opts=child_options(self, opts, account, role, binding, quota))
        self.register_outputs({"job": self.ready.metadata["name"]})
