"""A render on standby for `gpuctl preview --base`: a fork made as gpuctl starts loads the program and the Kubernetes
SDK (0.7 s, more than half of a cached preview's render) while gpuctl loads its commands and reads the base's cached
plan; then it renders the tenants that changed (`gpuctl/reuse.py`) and hands the plan back over a pipe.

The command line only suggests a standby; nothing depends on it. A preview that renders otherwise (no cached plan,
changed code) stops it at once, and a standby that cannot answer (it died, or the render failed other than on bad
input) leaves the render to gpuctl itself, as without one. It writes no file, and dies with gpuctl.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
import pickle
import traceback
from typing import Any

from gpuctl.children import Child, fork

# The Kubernetes SDK's packages the program's platform resources use (the tenants' objects need none): loaded on
# standby, not in the render. One the program starts to use and this misses loads in the render, only slower
# (tests/gpuctl/test_standby.py names it). The AWS SDK's packages of AWS pools still load in the render: EC2's alone
# takes 0.6 s, which a stack without AWS pools would wait for.
SDK_PACKAGES = (
    "pulumi_kubernetes.admissionregistration.v1", "pulumi_kubernetes.apiextensions.v1", "pulumi_kubernetes.batch.v1",
    "pulumi_kubernetes.core.v1", "pulumi_kubernetes.helm.v3", "pulumi_kubernetes.meta.v1",
    "pulumi_kubernetes.networking.v1", "pulumi_kubernetes.rbac.v1", "pulumi_kubernetes.scheduling.v1",
    "pulumi_kubernetes.yaml",
)


class Standby:
    """The fork, and the pipes to it: one job in, one answer out."""

    def __init__(self, child: Child, jobs: int, answers: int) -> None:
        self.child, self.ends = child, {"jobs": jobs, "answers": answers}

    def ask(self, job: dict[str, Any]) -> tuple[str, Any, str]:
        """Send the job and wait for the answer: (outcome, plan or message, what the render said)."""
        with os.fdopen(self._take("jobs"), "wb") as stream:
            pickle.dump(job, stream)
        with os.fdopen(self._take("answers"), "rb") as stream:
            return pickle.load(stream)

    def _take(self, end: str) -> int:
        """A pipe end, now the caller's to close (each is closed exactly once: its number may be reused)."""
        return self.ends.pop(end)

    def close(self) -> None:
        for end in list(self.ends):
            os.close(self._take(end))
        self.child.kill()


_standby: Standby | None = None


def suggested(argv: list[str]) -> bool:
    """Whether the command line asks for a preview against a base with its cache on and more than one process (a
    guess: argparse decides, later)."""
    if not argv or argv[0] != "preview" or "--no-cache" in argv:
        return False
    if not any(arg == "--base" or arg.startswith("--base=") for arg in argv):
        return False
    for index, arg in enumerate(argv):
        value = arg.split("=", 1)[1] if arg.startswith("--jobs=") else (
            argv[index + 1] if arg == "--jobs" and index + 1 < len(argv) else None)
        if value == "1":
            return False
    return len(os.sched_getaffinity(0)) > 1 if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1) > 1


def start(argv: list[str]) -> None:
    """Fork the standby if the command line suggests one (call before the commands load: the fork must not copy
    them)."""
    global _standby
    if _standby is not None or not suggested(argv):
        return
    ends: list[int] = []
    try:
        ends += os.pipe()
        ends += os.pipe()
        jobs_out, jobs_in, answers_out, answers_in = ends
        online = "--offline" not in argv
        child = fork(lambda: _serve(jobs_out, answers_in, (jobs_in, answers_out), online))
    except OSError:  # no pipe or process to spare (EMFILE, EAGAIN): gpuctl renders itself
        for end in ends:
            os.close(end)
        return
    os.close(jobs_out)
    os.close(answers_in)
    _standby = Standby(child, jobs_in, answers_out)


def stop() -> None:
    """No job for the standby: stop it now (its CPU is the render's)."""
    global _standby
    standby, _standby = _standby, None
    if standby is not None:
        standby.close()


def render(said: io.StringIO, **job: Any) -> dict[str, Any] | None:
    """The plan `render_plan(**job)` gives, rendered on standby, what it said written to `said`; None without a
    standby, or when it could not answer (the caller renders). Bad input is raised as ConfigError, as the render
    raises it."""
    global _standby
    standby, _standby = _standby, None
    if standby is None:
        return None
    try:
        outcome, value, text = standby.ask({**job, "environ": dict(os.environ)})
    except (OSError, EOFError, pickle.UnpicklingError):
        return None
    finally:
        standby.close()
    if outcome == "failed":
        return None
    said.write(text)
    if outcome == "refused":
        from stacks.config import ConfigError
        raise ConfigError(value)
    return value


def load(package: str) -> None:
    """Load an SDK package as the program reaches it, attribute by attribute from the top: the SDKs load their
    packages lazily, on the first attribute read."""
    top, *names = package.split(".")
    module = importlib.import_module(top)
    for name in names:
        module = getattr(module, name)
        getattr(module, "__all__", None)  # any attribute but the module's own name, file and spec


def preload(online: bool) -> None:
    """What the standby loads before its job: the render's own module (not the render command's, which loads the
    schemas and the console too), the program, the Kubernetes SDK's packages and, online, the Kubernetes client."""
    importlib.import_module("gpuctl.runtime")
    importlib.import_module("stacks.program")
    for package in SDK_PACKAGES:
        load(package)
    if online:
        importlib.import_module("stacks.preconditions")


def _serve(jobs: int, answers: int, parents_ends: tuple[int, int], online: bool) -> int:
    """In the fork: load (`preload`), wait for the job (none: end), render it, answer."""
    for end in parents_ends:
        os.close(end)
    quiet = os.open(os.devnull, os.O_WRONLY)  # what the render says goes back in the answer; nothing else is said
    os.dup2(quiet, 1)
    os.dup2(quiet, 2)
    preload(online)
    from gpuctl.runtime import render_plan
    from stacks.config import ConfigError
    with os.fdopen(jobs, "rb") as stream:
        try:
            job = pickle.load(stream)
        except EOFError:
            return 0
    os.environ.clear()
    os.environ.update(job.pop("environ"))  # the fingerprint key of the preview's secrets, among others
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            answer = ("plan", render_plan(**job), said.getvalue())
    except ConfigError as error:
        answer = ("refused", str(error), said.getvalue())
    except Exception:  # gpuctl renders again, and shows it as it shows any failure of its own
        answer = ("failed", traceback.format_exc(), said.getvalue())
    with os.fdopen(answers, "wb") as stream:
        pickle.dump(answer, stream)
    return 0
