"""gpuctl as an installed command: --version, and stack files found from any folder of the clone."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml

from gpuctl import __version__
from gpuctl.cli import ROOT, project_root


def test_version_is_printed_and_exits_0() -> None:
    result = subprocess.run([sys.executable, "-m", "gpuctl", "--version"], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 0 and result.stdout.strip() == f"gpuctl {__version__}"


def test_stack_files_are_found_from_a_subfolder_of_a_clone(tmp_path) -> None:
    clone = tmp_path / "clone"
    (clone / "docs" / "deep").mkdir(parents=True)
    (clone / "Pulumi.yaml").write_text("name: gpu-platform\nruntime: python\n")

    assert project_root(clone / "docs" / "deep") == clone


def test_another_pulumi_project_is_not_taken_for_this_one(tmp_path) -> None:
    (tmp_path / "Pulumi.yaml").write_text("name: gpu-platform-tools\nruntime: python\n")

    assert project_root(tmp_path) == ROOT


# -- the registry pull secret, offline ---------------------------------------------------------------------------

PULL_SECRET = '{"auths": {"nvcr.io": {"auth": "c2VjcmV0LXRva2VuLTQyOnh5eg=="}}}'


def render(tmp_path, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "gpuctl", "render", "--stack", "prod", "--offline",
                           "--out", str(tmp_path / "out"), *extra], cwd=ROOT, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=300)


def written(folder) -> str:
    return "".join(path.read_text() for path in folder.rglob("*") if path.is_file())


def test_no_shipped_stack_file_holds_ciphertext_no_secrets_provider_can_read() -> None:
    # A `secure:` value needs the stack's encryptionsalt (passphrase) or secretsprovider; without them every
    # `pulumi preview` of the stack stops before the program runs.
    for path in ROOT.glob("Pulumi.*.yaml"):
        document = yaml.safe_load(path.read_text())
        has_secure = "secure:" in path.read_text()
        assert not has_secure or {"encryptionsalt", "secretsprovider"} & set(document), path.name


def test_a_pull_secret_file_reaches_the_render_only_as_a_secret(tmp_path) -> None:
    secret_file = tmp_path / "config.json"
    secret_file.write_text(PULL_SECRET)
    result = render(tmp_path, "--registry-pull-secret-file", str(secret_file))

    assert result.returncode == 0, result.stderr
    secret = yaml.safe_load((tmp_path / "out" / "manifests" / "secret-gpu-operator-nvidia-registry.yaml").read_text())
    assert secret["type"] == "kubernetes.io/dockerconfigjson"
    assert set(secret["stringData"].values()) == {"[secret]"}
    drivers = [yaml.safe_load(path.read_text()) for path in (tmp_path / "out" / "manifests").glob("nvidiadriver-*")]
    assert drivers and all(d["spec"]["imagePullSecrets"] == [secret["metadata"]["name"]] for d in drivers)
    assert "c2VjcmV0" not in written(tmp_path / "out") + result.stdout + result.stderr


def test_a_pull_secret_from_the_environment_is_used_and_never_shown(tmp_path) -> None:
    result = render(tmp_path, env={"GPU_PLATFORM_REGISTRY_PULL_SECRET": PULL_SECRET})

    assert result.returncode == 0, result.stderr
    assert (tmp_path / "out" / "manifests" / "secret-gpu-operator-nvidia-registry.yaml").is_file()
    assert "c2VjcmV0" not in written(tmp_path / "out") + result.stdout + result.stderr


def test_without_a_pull_secret_the_stack_renders_without_one(tmp_path) -> None:
    result = render(tmp_path, env={"GPU_PLATFORM_REGISTRY_PULL_SECRET": ""})

    assert result.returncode == 0, result.stderr
    assert not (tmp_path / "out" / "manifests" / "secret-gpu-operator-nvidia-registry.yaml").exists()
    drivers = [yaml.safe_load(path.read_text()) for path in (tmp_path / "out" / "manifests").glob("nvidiadriver-*")]
    assert drivers and not any("imagePullSecrets" in d["spec"] for d in drivers)


@pytest.mark.parametrize(("content", "problem"), [
    (None, "no such file"),
    ("", "is empty"),  # not a quiet deploy without a pull secret
    (" \n", "is empty"),
    ('{"auths": {"nvcr.io": "c2VjcmV0"}}', "is not a .dockerconfigjson document"),
])
def test_a_bad_pull_secret_file_is_one_line_naming_the_file(tmp_path, content: str | None, problem: str) -> None:
    secret_file = tmp_path / "config.json"
    if content is not None:
        secret_file.write_text(content)
    result = render(tmp_path, "--registry-pull-secret-file", str(secret_file))

    assert result.returncode == 2
    assert result.stderr == (f"error: --registry-pull-secret-file {secret_file}: {problem}"
                             + ("" if "document" not in problem else ' ({"auths": {"<registry>": {"auth": '
                                '"<base64>"}}})') + "; pass the registry's .dockerconfigjson file\n")
    assert "c2VjcmV0" not in result.stderr and not (tmp_path / "out").exists()


def test_check_and_diff_load_no_pulumi_provider_nor_kubernetes_client(tmp_path) -> None:
    out = tmp_path / "dev"
    subprocess.run([sys.executable, "-m", "gpuctl", "render", "--stack", "dev", "--out", str(out), "--offline"],
                   cwd=ROOT, check=True, capture_output=True)
    loaded = modules_loaded_by([["check", str(out)], ["diff", str(out), str(out)]])
    assert loaded & {"pulumi_aws", "pulumi_kubernetes", "kubernetes"} == set()


def modules_loaded_by(commands: list[list[str]]) -> set[str]:
    """The top-level modules a fresh process holds after running these gpuctl commands in it."""
    probe = ("import sys\nfrom gpuctl.__main__ import main\n"
             + "".join(f"main({command!r})\n" for command in commands)
             + "print(' '.join({name.split('.')[0] for name in sys.modules}))\n")
    result = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return set(result.stdout.splitlines()[-1].split())


def test_control_characters_from_the_input_stay_escaped_on_the_one_error_line(tmp_path) -> None:
    stack = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    stack["config"]["gpu-platform:\r\x1b[2Jcluster"] = 0
    path = tmp_path / "Pulumi.hostile.yaml"
    path.write_text(yaml.safe_dump(stack))

    result = subprocess.run([sys.executable, "-m", "gpuctl", "render", "--config-file", str(path), "--out",
                             str(tmp_path / "out"), "--offline"], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 2
    assert result.stderr.count("\n") == 1 and "\r" not in result.stderr and "\x1b" not in result.stderr
    assert "gpu-platform:\\r\\x1b[2Jcluster: unknown config key" in result.stderr
    assert not (tmp_path / "out").exists()


def test_overlapping_tenant_networks_are_refused_in_one_line(tmp_path) -> None:
    stack = yaml.safe_load((ROOT / "Pulumi.onprem.yaml").read_text())
    stack["config"]["gpu-platform:tenants"][2]["networks"] = [
        {"name": "wire", "type": "macvlan", "master": "ens7", "ipam": {"range": "10.20.0.0/16"}}]
    path = tmp_path / "Pulumi.shared.yaml"
    path.write_text(yaml.safe_dump(stack))

    result = subprocess.run([sys.executable, "-m", "gpuctl", "render", "--config-file", str(path), "--out",
                             str(tmp_path / "out"), "--offline"], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "networks vision/collective and nlp-research/wire overlap" in result.stderr
    assert not (tmp_path / "out").exists()


def test_a_reader_that_stops_early_gets_no_traceback(tmp_path) -> None:
    # The reader closes its end before gpuctl writes anything, as `gpuctl ... | head -c 0` would.
    process = subprocess.Popen([sys.executable, "-m", "gpuctl", "render", "--stack", "prod", "--out",
                                str(tmp_path / "out"), "--offline"], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    process.stdout.close()
    stderr = process.stderr.read()
    process.wait(timeout=120)

    assert "BrokenPipeError" not in stderr and "Traceback" not in stderr
    assert process.returncode == 141


def test_sigterm_exits_143_even_where_the_running_code_turns_it_into_an_error(monkeypatch, tmp_path) -> None:
    import os
    import signal

    from gpuctl import __main__ as entry
    from gpuctl import check

    def swallowing_run(args) -> int:
        try:
            os.kill(os.getpid(), signal.SIGTERM)  # lands here, as inside the SDK's runtime during a render
        except SystemExit:
            raise RuntimeError("the runtime's own error for the interrupted program") from None
        return 0

    monkeypatch.setattr(check, "run", swallowing_run)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        assert entry.main(["check", str(tmp_path)]) == 128 + signal.SIGTERM
    finally:
        signal.signal(signal.SIGTERM, previous)


# -- the checkout gpuctl runs in ----------------------------------------------------------------------------------


def test_gpuctl_of_one_checkout_refuses_to_run_in_another(tmp_path) -> None:
    """Stack files and --base history would come from the other checkout, the code from this one's."""
    other = tmp_path / "other-clone"
    (other / "docs").mkdir(parents=True)
    for name in ("Pulumi.yaml", "Pulumi.dev.yaml"):
        (other / name).write_text((ROOT / name).read_text())

    result = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "dev", "--offline"],
                            cwd=other / "docs", capture_output=True, text=True, timeout=120)

    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr == (f"error: this checkout is {other}, but this gpuctl runs the code of {ROOT}; run the "
                             f"checkout's own: cd {other} && make setup && .venv/bin/gpuctl ...\n")


# -- every subcommand fails in one line with a code other than 1 when its output cannot be written -------------


@pytest.fixture(scope="module")
def rendered(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("rendered") / "dev"
    subprocess.run([sys.executable, "-m", "gpuctl", "render", "--stack", "dev", "--out", str(out), "--offline"],
                   cwd=ROOT, check=True, capture_output=True)
    return out


def commands(rendered: Path, out: Path) -> dict[str, list[str]]:
    return {"render": ["render", "--stack", "dev", "--offline", "--out", str(out)],
            "check": ["check", str(rendered)],
            "diff": ["diff", str(rendered), str(rendered)],
            "preview": ["preview", "--stack", "dev", "--offline"],
            "version": ["--version"],
            "help": ["render", "--help"]}


OUTPUTS = {"closed": "exec >&-", "full disk": "exec >/dev/full"}


def test_every_subcommand_reports_an_unwritable_output_in_one_line(rendered: Path, tmp_path: Path) -> None:
    runs = {}
    for output, redirect in OUTPUTS.items():
        for name, args in commands(rendered, tmp_path / f"out-{output.replace(' ', '-')}").items():
            # sh -c: the redirection applies to gpuctl alone, as a user's shell would apply it.
            script = f'{redirect}; exec "$0" -m gpuctl "$@"'
            runs[name, output] = subprocess.Popen(["sh", "-c", script, sys.executable, *args], cwd=ROOT,
                                                  stderr=subprocess.PIPE, text=True)
    for (name, output), process in runs.items():
        stderr = process.communicate(timeout=300)[1]
        assert process.returncode not in (0, 1), (name, output, stderr)
        assert stderr.count("\n") == 1 and stderr.startswith("error: standard output"), (name, output, stderr)
        assert "Traceback" not in stderr
    assert not any(tmp_path.iterdir()), "render wrote its folder though it could not report it"


# -- every file input: special files refused before they are read, bounded in size and nesting -------------------


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.mark.parametrize("option", ["--registry-pull-secret-file", "--observed-nodes", "--config-file",
                                    "--policy-config", "preview --config-file"])
@pytest.mark.parametrize("kind", ["named pipe", "device", "folder"])
def test_a_special_file_is_refused_before_it_is_read(tmp_path: Path, fifo: Path, option: str, kind: str,
                                                     rendered: Path) -> None:
    path = {"named pipe": str(fifo), "device": "/dev/zero", "folder": str(tmp_path)}[kind]
    if option == "--policy-config":
        args = ["check", str(rendered), option, path]
    elif option == "--config-file":
        args = ["render", option, path, "--offline", "--out", str(tmp_path / "out")]
    elif option == "preview --config-file":
        args = ["preview", "--config-file", path, "--base", "HEAD", "--offline"]
    else:
        args = ["render", "--stack", "dev", option, path, "--offline", "--out", str(tmp_path / "out")]

    result = subprocess.run([sys.executable, "-m", "gpuctl", *args], cwd=ROOT, capture_output=True, text=True,
                            timeout=60)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert f"is a {kind}, not a" in result.stderr or "is not a regular file" in result.stderr
    assert "Error" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["check", "diff"])
def test_a_folder_named_plan_json_is_one_line_naming_it(tmp_path: Path, rendered: Path, command: str) -> None:
    (tmp_path / "plan.json").mkdir()
    args = [str(tmp_path)] if command == "check" else [str(rendered), str(tmp_path)]

    result = subprocess.run([sys.executable, "-m", "gpuctl", command, *args], cwd=ROOT, capture_output=True,
                            text=True, timeout=60)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: {tmp_path / 'plan.json'}: is a folder, not a regular file; render one")


def test_a_deeply_nested_pull_secret_is_one_line(tmp_path: Path) -> None:
    secret = tmp_path / "config.json"
    secret.write_text("[" * 100_000 + "]" * 100_000)

    result = render(tmp_path, "--registry-pull-secret-file", str(secret))

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert "is not a .dockerconfigjson document" in result.stderr and "RecursionError" not in result.stderr


def test_an_offline_render_loads_no_kubernetes_client(tmp_path) -> None:
    loaded = modules_loaded_by([["render", "--stack", "onprem", "--out", str(tmp_path / "out"), "--offline"]])
    assert "pulumi_kubernetes" in loaded and "kubernetes" not in loaded


@pytest.mark.parametrize("target", ["folder", "full disk"])
def test_a_json_file_that_cannot_be_written_is_one_line(tmp_path: Path, target: str) -> None:
    path = str(tmp_path) if target == "folder" else "/dev/full"

    result = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "dev", "--offline", "--json-file",
                             path], cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: --json-file {path}: ") and "Traceback" not in result.stderr


def test_a_karpenter_pool_on_openshift_is_refused_in_one_line(tmp_path) -> None:
    stack = yaml.safe_load((ROOT / "Pulumi.dev.yaml").read_text())
    stack["config"]["gpu-platform:nodePools"][1]["karpenter"] = {"disruptionBudget": "1"}
    path = tmp_path / "Pulumi.dev-karpenter.yaml"
    path.write_text(yaml.safe_dump(stack))

    result = subprocess.run([sys.executable, "-m", "gpuctl", "render", "--config-file", str(path), "--out",
                             str(tmp_path / "out"), "--offline"], cwd=ROOT, capture_output=True, text=True)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("error: gpu-platform:nodePools[1].karpenter: applies to Kubernetes clusters on AWS")
    assert not (tmp_path / "out").exists()


# -- every file output: never a file gpuctl did not make, a pipe or a device ---------------------------------------


@pytest.mark.parametrize("target", ["the stack file", "a render's plan.json", "a user's file", "a named pipe",
                                    "a link to a user's file"])
def test_json_file_never_replaces_a_file_gpuctl_did_not_write(tmp_path: Path, rendered: Path, fifo: Path,
                                                              target: str) -> None:
    """As `render --out` protects a user's folder: refused in one line before anything renders, the file unchanged."""
    mine = tmp_path / "notes.json"
    mine.write_text('{"mine": true}\n')
    if target == "a link to a user's file":
        (tmp_path / "link.json").symlink_to(mine)
    path = {"the stack file": ROOT / "Pulumi.dev.yaml", "a render's plan.json": rendered / "plan.json",
            "a user's file": mine, "a named pipe": fifo, "a link to a user's file": tmp_path / "link.json"}[target]
    before = {file: file.read_bytes() for file in (ROOT / "Pulumi.dev.yaml", rendered / "plan.json", mine)}

    result = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "dev", "--offline", "--json-file",
                             str(path)], cwd=ROOT, capture_output=True, text=True, timeout=120)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(f"error: --json-file {path}: ") and "refusing" in result.stderr, result.stderr
    assert result.stdout == "" and {file: file.read_bytes() for file in before} == before


def test_json_file_replaces_the_review_an_earlier_run_wrote(tmp_path: Path) -> None:
    review = tmp_path / "review.json"
    for _ in range(2):
        result = subprocess.run([sys.executable, "-m", "gpuctl", "preview", "--stack", "dev", "--offline",
                                 "--json-file", str(review)], cwd=ROOT, capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
    assert json.loads(review.read_text())["changeSummary"]["create"] > 0
    assert [path.name for path in tmp_path.iterdir()] == ["review.json"]


# -- stack names as Pulumi accepts them ---------------------------------------------------------------------------


@pytest.mark.parametrize(("source", "problem"), [
    (["--stack", ""], "--stack '': is not a stack name Pulumi accepts"),
    (["--stack", "a b"], "--stack 'a b': is not a stack name Pulumi accepts"),
    (["--stack", "a\nb"], "--stack 'a\\nb': is not a stack name Pulumi accepts"),
    (["--stack", "../Pulumi.dev"], "--stack '../Pulumi.dev': is not a stack name Pulumi accepts"),
    (["--config-file", ""], "--config-file: empty; pass the Pulumi.<stack>.yaml file"),
    (["--config-file", "Pulumi.a b.yaml"], "the stack name 'a b' (from the file name) is not a stack name Pulumi "
                                           "accepts")])
@pytest.mark.parametrize("command", ["render", "preview"])
def test_a_stack_name_pulumi_refuses_is_one_line(tmp_path: Path, source: list[str], problem: str,
                                                command: str) -> None:
    if source[-1] == "Pulumi.a b.yaml":
        (tmp_path / source[-1]).write_text((ROOT / "Pulumi.onprem.yaml").read_text())
        source = ["--config-file", str(tmp_path / source[-1])]
    extra = ["--out", str(tmp_path / "out")] if command == "render" else []

    result = subprocess.run([sys.executable, "-m", "gpuctl", command, *source, "--offline", *extra], cwd=ROOT,
                            capture_output=True, text=True, timeout=120)

    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert problem in result.stderr and "None" not in result.stderr and not (tmp_path / "out").exists()
