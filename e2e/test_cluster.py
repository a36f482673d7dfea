"""e2e.cluster: a control plane whose chosen port another process takes first starts again on new ones."""

from __future__ import annotations

import socket
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from e2e import cluster
from e2e.cluster import ControlPlane, missing_tools

PORTS = 6  # chosen per start: etcd's two, the API server's, the controller manager's (the fourth), ...


@pytest.fixture
def taken() -> Iterator[int]:
    """A port another process listens on."""
    if missing := missing_tools():
        pytest.fail(f"{', '.join(missing)} not built: run `make e2e` (it builds them first)", pytrace=False)
    with socket.socket() as thief:
        thief.bind(("127.0.0.1", 0))
        thief.listen()
        yield thief.getsockname()[1]


def controller_port_taken(monkeypatch, taken: int, starts: int) -> list[int]:
    """Make the controller manager's port `taken` in each of the first `starts` starts; the ports chosen, in order."""
    chosen: list[int] = []
    free_port: Callable[[], int] = cluster.free_port

    def port() -> int:
        start, index = divmod(len(chosen), PORTS)
        chosen.append(taken if index == 3 and start < starts else free_port())
        return chosen[-1]

    monkeypatch.setattr(cluster, "free_port", port)
    return chosen


def test_a_plane_whose_port_was_taken_starts_on_new_ones(tmp_path: Path, monkeypatch, taken: int) -> None:
    chosen = controller_port_taken(monkeypatch, taken, starts=1)
    with ControlPlane.start(tmp_path / "plane") as plane:
        assert len(chosen) == 2 * PORTS, "the plane started twice"
        controller = next(process for process in plane.processes if process.name == "kube-controller-manager")
        assert f"--secure-port={chosen[PORTS + 3]}" in controller.popen.args and chosen[PORTS + 3] != taken


def test_a_plane_that_loses_a_port_every_time_fails_naming_it(tmp_path: Path, monkeypatch, taken: int) -> None:
    controller_port_taken(monkeypatch, taken, starts=2)
    refusal = f"(?s)kube-controller-manager exited.*127.0.0.1:{taken}: bind: {cluster.PORT_TAKEN}"
    with pytest.raises(cluster.PortTaken, match=refusal):
        ControlPlane.start(tmp_path / "plane", attempts=2)
