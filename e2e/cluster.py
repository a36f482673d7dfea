"""A real Kubernetes control plane on 127.0.0.1: etcd, kube-apiserver, kube-controller-manager, kube-scheduler and
kwok, built from their Go modules by e2e/tools/build.sh, run in a temporary folder on free ports.

Nodes are kwok's: Node objects whose status, heartbeats and pods kwok simulates (pods become Ready, Job pods
complete, deleted pods go). There is no kubelet, container runtime, CNI or GPU: what runs on a node is never run.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
TOOLS = ROOT / "e2e" / "tools"
BIN = Path(os.environ.get("E2E_TOOLS_BIN", ROOT / ".e2e-cache" / "bin"))
BINARIES = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubectl", "kwok", "promtool",
            "kueue", "karpenter-kwok")
PR_SET_PDEATHSIG = 1  # linux/prctl.h
STOP_SECONDS = 10  # SIGTERM, then SIGKILL after this long
READY_SECONDS = 90
# kwok's own stages (its module's kustomize/stage), the ones kwokctl installs by default: nodes become Ready and keep
# a lease; pods become Ready, Job pods complete, deleted pods are removed.
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")
KWOK_NODE_ANNOTATION = {"kwok.x-k8s.io/node": "fake"}
# Admission as a production API server runs it: the defaults plus NodeRestriction (not on by default).
ADMISSION = ("NamespaceLifecycle,LimitRanger,ServiceAccount,DefaultStorageClass,DefaultTolerationSeconds,"
             "NodeRestriction,PodSecurity,Priority,MutatingAdmissionWebhook,ValidatingAdmissionWebhook,"
             "ValidatingAdmissionPolicy,ResourceQuota")


def _die_with_parent() -> None:
    """In the child before exec: SIGTERM it when the test process dies, however it dies (even SIGKILL)."""
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)


def missing_tools() -> list[str]:
    return [name for name in BINARIES if not os.access(BIN / name, os.X_OK)]


# Each port is chosen free (free_port) and bound by its process seconds later, once etcd and the API server are up;
# meanwhile an outgoing connection may draw it from the same ephemeral range (CI once: the controller manager's
# "bind: address already in use", two workers' planes and engines busy). A start that loses a port so starts again.
START_ATTEMPTS = 3
PORT_TAKEN = "address already in use"


class PortTaken(RuntimeError):
    """A process of the plane could not bind the port chosen for it."""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True, timeout=60)


FRONT_PROXY_CLIENT = "front-proxy-client"


def make_pki(folder: Path) -> None:
    """A CA, the API server's serving certificate, an admin and an aggregator client certificate and the
    service-account key pair."""
    folder.mkdir(parents=True)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=e2e-ca",
             cwd=folder)
    certs = {
        "apiserver": ("/CN=kube-apiserver", "serverAuth", "subjectAltName=IP:127.0.0.1,IP:10.96.0.1,DNS:localhost,"
                      "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
                      "DNS:kubernetes.default.svc.cluster.local"),
        "admin": ("/O=system:masters/CN=e2e-admin", "clientAuth", None),
        # The aggregator's client certificate towards extension API servers (Kueue's visibility server), which trust
        # the identity headers it sends on behalf of the caller.
        "front-proxy-client": (f"/CN={FRONT_PROXY_CLIENT}", "clientAuth", None),
    }
    for name, (subject, usage, san) in certs.items():
        _openssl("req", *ec, "-keyout", f"{name}.key", "-out", f"{name}.csr", "-subj", subject, cwd=folder)
        extensions = folder / f"{name}.ext"
        extensions.write_text(f"extendedKeyUsage={usage}\n" + (f"{san}\n" if san else ""))
        _openssl("x509", "-req", "-in", f"{name}.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
                 "-out", f"{name}.crt", "-days", "2", "-extfile", extensions.name, cwd=folder)
    _openssl("genrsa", "-out", "sa.key", "2048", cwd=folder)
    _openssl("rsa", "-in", "sa.key", "-pubout", "-out", "sa.pub", cwd=folder)


def kubeconfig(pki: Path, server: str) -> str:
    return f"""apiVersion: v1
kind: Config
clusters:
- name: e2e
  cluster: {{server: "{server}", certificate-authority: "{pki / 'ca.crt'}"}}
users:
- name: admin
  user: {{client-certificate: "{pki / 'admin.crt'}", client-key: "{pki / 'admin.key'}"}}
contexts:
- name: e2e
  context: {{cluster: e2e, user: admin}}
current-context: e2e
"""


def kwok_stages(names: tuple[str, ...] = KWOK_STAGES) -> str:
    """kwok's stages of these names, read from its module in the Go module cache (where the tool build put it)."""
    result = subprocess.run(["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/kwok"], cwd=TOOLS / "kwok",
                            capture_output=True, text=True, check=True, timeout=120,
                            env={**os.environ, "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"})
    stages = Path(result.stdout.strip()) / "kustomize" / "stage"
    return "\n---\n".join((stages / stage).read_text() for stage in names)


@dataclass
class Process:
    name: str
    popen: subprocess.Popen
    log: Path

    def stop(self) -> None:
        if self.popen.poll() is not None:
            return
        os.killpg(self.popen.pid, signal.SIGTERM)
        try:
            self.popen.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            os.killpg(self.popen.pid, signal.SIGKILL)
            self.popen.wait(STOP_SECONDS)

    def tail(self, lines: int = 15) -> str:
        text = self.log.read_text(errors="replace").splitlines() if self.log.exists() else []
        return "\n".join(text[-lines:])


@dataclass
class ControlPlane:
    """A running control plane. Use `ControlPlane.start(folder)` as a context manager: every process it started is
    stopped (SIGTERM, SIGKILL after 10 s) when the block ends, however it ends."""

    folder: Path
    stages: tuple[str, ...] = KWOK_STAGES
    server: str = ""
    kubeconfig: Path = Path()
    processes: list[Process] = field(default_factory=list)

    @classmethod
    def start(cls, folder: Path, stages: tuple[str, ...] = KWOK_STAGES, attempts: int = START_ATTEMPTS) -> ControlPlane:
        """Start it in `folder`, kwok simulating `stages` (by default the ones kwokctl installs); on new ports if a
        process loses its port, up to `attempts` starts in all."""
        plane = cls(folder, stages)
        try:
            plane._start()
        except PortTaken:
            plane.stop()
            if attempts <= 1:
                raise
            for made in ("pki", "etcd"):  # made again on the new ports
                shutil.rmtree(folder / made, ignore_errors=True)
            return cls.start(folder, stages, attempts - 1)
        except BaseException:
            plane.stop()
            raise
        return plane

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for process in reversed(self.processes):
            process.stop()
        self.processes.clear()

    def spawn(self, name: str, *args: str, wrapper: tuple[str, ...] = (),
              env: Mapping[str, str] | None = None) -> Process:
        """Run the built tool `name` with `args` (through `wrapper`, which execs it), with `env` added to this
        process's environment; it stops with the plane."""
        log = self.folder / f"{name}.log"
        with log.open("wb") as out:
            popen = subprocess.Popen([*wrapper, str(BIN / name), *args], stdout=out, stderr=subprocess.STDOUT,
                                     stdin=subprocess.DEVNULL, start_new_session=True, cwd=self.folder,
                                     env={**os.environ, **(env or {})}, preexec_fn=_die_with_parent)
        process = Process(name, popen, log)
        self.processes.append(process)
        return process

    def _start(self) -> None:
        pki = self.folder / "pki"
        make_pki(pki)
        etcd_client, etcd_peer, api, kcm, scheduler, kwok = (free_port() for _ in range(6))
        etcd = f"http://127.0.0.1:{etcd_client}"
        self.spawn("etcd", "--name", "e2e", "--data-dir", str(self.folder / "etcd"),
                    "--listen-client-urls", etcd, "--advertise-client-urls", etcd,
                    "--listen-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                    "--initial-advertise-peer-urls", f"http://127.0.0.1:{etcd_peer}",
                    "--initial-cluster", f"e2e=http://127.0.0.1:{etcd_peer}",
                    "--unsafe-no-fsync", "--log-level", "warn")
        self.wait_ready(f"{etcd}/health", lambda body: b'"health":"true"' in body)
        self.server = f"https://127.0.0.1:{api}"
        self.kubeconfig = self.folder / "kubeconfig"
        self.kubeconfig.write_text(kubeconfig(pki, self.server))
        self.spawn("kube-apiserver", f"--etcd-servers={etcd}", "--bind-address=127.0.0.1",
                    f"--secure-port={api}", "--advertise-address=127.0.0.1", "--endpoint-reconciler-type=none",
                    f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
                    f"--client-ca-file={pki / 'ca.crt'}",
                    "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
                    f"--service-account-key-file={pki / 'sa.pub'}",
                    f"--service-account-signing-key-file={pki / 'sa.key'}",
                    "--service-cluster-ip-range=10.96.0.0/16", "--authorization-mode=Node,RBAC",
                    "--allow-privileged=true", f"--enable-admission-plugins={ADMISSION}",
                    # API aggregation as kubeadm sets it up (its front proxy CA is the plane's CA here), routed to an
                    # APIService's endpoints rather than its Service's cluster IP (no kube-proxy here).
                    f"--requestheader-client-ca-file={pki / 'ca.crt'}",
                    f"--requestheader-allowed-names={FRONT_PROXY_CLIENT}",
                    "--requestheader-username-headers=X-Remote-User", "--requestheader-group-headers=X-Remote-Group",
                    "--requestheader-extra-headers-prefix=X-Remote-Extra-",
                    f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
                    f"--proxy-client-key-file={pki / 'front-proxy-client.key'}", "--enable-aggregator-routing=true")
        self.wait_ready(f"{self.server}/readyz", lambda body: body.strip() == b"ok")
        admin = ["--kubeconfig", str(self.kubeconfig), "--authentication-kubeconfig", str(self.kubeconfig),
                 "--authorization-kubeconfig", str(self.kubeconfig), "--bind-address=127.0.0.1",
                 "--leader-elect=false"]
        self.spawn("kube-controller-manager", *admin, f"--secure-port={kcm}",
                    f"--service-account-private-key-file={pki / 'sa.key'}", f"--root-ca-file={pki / 'ca.crt'}",
                    "--use-service-account-credentials=true")
        self.spawn("kube-scheduler", *admin, f"--secure-port={scheduler}")
        stages = self.folder / "kwok-stages.yaml"
        stages.write_text(kwok_stages(self.stages))
        self.spawn("kwok", "--kubeconfig", str(self.kubeconfig), "--config", str(stages),
                    "--manage-all-nodes=false", "--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake",
                    "--cidr=10.0.0.0/16", "--node-ip=10.0.0.1", "--node-lease-duration-seconds=40",
                    f"--server-address=127.0.0.1:{kwok}")
        self.wait_ready(f"https://127.0.0.1:{kcm}/healthz", lambda body: body.strip() == b"ok", insecure=True)
        self.wait_ready(f"https://127.0.0.1:{scheduler}/healthz", lambda body: body.strip() == b"ok", insecure=True)
        self.wait_ready(f"http://127.0.0.1:{kwok}/healthz", lambda body: body.strip() == b"ok")

    def wait_ready(self, url: str, ready: Callable[[bytes], bool], insecure: bool = False) -> None:
        """Poll `url` until `ready(body)`, at most READY_SECONDS; a process that exits meanwhile fails at once."""
        context = ssl.create_default_context(cafile=str(self.folder / "pki" / "ca.crt"))
        if insecure:  # the controllers' self-signed health endpoints
            context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        else:
            context.load_cert_chain(self.folder / "pki" / "admin.crt", self.folder / "pki" / "admin.key")
        deadline = time.monotonic() + READY_SECONDS
        while True:
            for process in self.processes:
                if process.popen.poll() is not None:
                    tail = process.tail()
                    raise (PortTaken if PORT_TAKEN in tail else RuntimeError)(
                        f"{process.name} exited ({process.popen.returncode}):\n{tail}")
            try:
                with urllib.request.urlopen(url, timeout=5, context=context) as response:
                    if ready(response.read()):
                        return
            except OSError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} not ready after {READY_SECONDS} s:\n{self.processes[-1].tail()}")
            time.sleep(0.25)


def kwok_node(name: str, *, labels: dict[str, str], capacity: dict[str, str],
              taints: Iterable[dict[str, str]] = ()) -> dict[str, Any]:
    """A Node that kwok manages: Ready, heartbeating, its pods simulated."""
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": name, "annotations": dict(KWOK_NODE_ANNOTATION),
                     "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                                "kubernetes.io/arch": "amd64", "type": "kwok", **labels}},
        "spec": {"taints": list(taints)},
        "status": {"capacity": capacity, "allocatable": capacity,
                   "nodeInfo": {"architecture": "amd64", "operatingSystem": "linux", "kubeletVersion": "fake"}},
    }
