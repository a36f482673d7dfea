"""Stand-ins for what the engine's lifecycle needs and this machine cannot have: a chart repository and OLM.

- `StandInCharts`: a Helm repository on 127.0.0.1 serving, under each pinned chart's name and version, a stand-in
  chart built here (one ConfigMap, no operator). The real charts cannot be fetched (no registry is reachable) and a
  third-party chart is never committed, so the stack's `charts.mirror` points at this: it exercises the Helm release
  lifecycle (install, upgrade on a values change, uninstall), not what the charts deploy.
- `StandInOlm`: does the one thing OLM does that `pulumi up` waits for: it resolves each Subscription to the CSV it
  starts at (`status.currentCSV`). kwok completes the install-plan approver's Job pod, which stands in for the plan
  being approved and the CSV installed; no operator runs and no install plan exists.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import threading
from datetime import datetime, timezone
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import yaml
from kubernetes.dynamic.exceptions import ApiException
from urllib3.exceptions import HTTPError

from components import labels
from e2e.kube import Kube

CHART_TEMPLATE = """apiVersion: v1
kind: ConfigMap
metadata:
  name: {{ .Release.Name }}-stand-in
  namespace: {{ .Release.Namespace }}
data:
  chart: {{ .Chart.Name }}-{{ .Chart.Version }}
  values: {{ toJson .Values | quote }}
"""


def chart_archive(chart: labels.HelmChart) -> bytes:
    """A packaged chart (`helm package` layout: <name>/Chart.yaml, <name>/templates/...) with the pinned name and
    version, whose only object records the values it was installed with."""
    files = {
        "Chart.yaml": yaml.safe_dump({"apiVersion": "v2", "name": chart.chart, "version": chart.version,
                                      "description": "stand-in chart for the end-to-end suite"}),
        "templates/stand-in.yaml": CHART_TEMPLATE,
    }
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{chart.chart}/{name}")
            info.size = len(data)
            archive.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


class _Quiet(SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
        pass


class StandInCharts:
    """A Helm repository (index.yaml and the archives) served from `folder` on a free loopback port."""

    def __init__(self, folder: Path, charts: list[labels.HelmChart]):
        folder.mkdir(parents=True, exist_ok=True)
        entries: dict[str, list[dict]] = {}
        for chart in charts:
            archive = f"{chart.chart}-{chart.version}.tgz"
            data = chart_archive(chart)
            (folder / archive).write_bytes(data)
            entries.setdefault(chart.chart, []).append({
                "apiVersion": "v2", "name": chart.chart, "version": chart.version, "urls": [archive],
                "digest": hashlib.sha256(data).hexdigest(), "created": "2026-01-01T00:00:00Z"})
        (folder / "index.yaml").write_text(yaml.safe_dump({"apiVersion": "v1", "entries": entries,
                                                          "generated": "2026-01-01T00:00:00Z"}))
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), partial(_Quiet, directory=str(folder)))
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StandInOlm:
    """Resolves every Subscription to its startingCSV, as OLM records the CSV a Subscription progresses to."""

    def __init__(self, kubeconfig: Path, interval: float = 1.0):
        self.kube = Kube(kubeconfig)
        self.interval = interval
        self.stopped = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        while not self.stopped.wait(self.interval):
            try:
                self.resolve()
            except (ApiException, HTTPError):
                continue  # deleted between the list and the patch, or the cluster stopping: the next round tells

    def resolve(self) -> None:
        subscriptions = self.kube.resource("operators.coreos.com/v1alpha1", "Subscription")
        for sub in subscriptions.get().to_dict()["items"]:
            csv = sub["spec"].get("startingCSV")
            if csv and sub.get("status", {}).get("currentCSV") != csv:
                now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
                subscriptions.status.patch(  # lastUpdated: the one field the CRD requires of a status
                    name=sub["metadata"]["name"], namespace=sub["metadata"]["namespace"],
                    body={"status": {"currentCSV": csv, "state": "UpgradePending", "lastUpdated": now}},
                    content_type="application/merge-patch+json")

    def close(self) -> None:
        self.stopped.set()
        self.thread.join(timeout=10)
        self.kube.close()
