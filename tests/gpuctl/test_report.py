"""The review's formats on real renders: readable diff lines, the JSON contract, a valid GitHub comment."""

from __future__ import annotations

import copy
import json

import pytest
from markdown_it import MarkdownIt

from gpuctl import report
from gpuctl.diff import diff_plans
from gpuctl.summary import summarize
from tests.conftest import render_stack, stack_config


def review(old: dict, new: dict, **extra) -> report.Review:
    diff = diff_plans(old, new)
    return report.Review(new["stack"], "origin/main", diff, summarize(old, new, diff), violations=[],
                         resources=len(new["resources"]), preflight="skipped (--offline)", **extra)


def lines(review_: report.Review) -> list[str]:
    return [line.strip() for _, line in report.diff_lines(review_.diff)]


@pytest.fixture(scope="module")
def time_slicing_change():
    base = render_stack("dev").document
    config = stack_config("dev")
    config["gpu-platform:nodePools"][0]["timeSlicingReplicas"] = 8
    return review(base, render_stack("dev", config).document)


def test_a_time_slicing_change_shows_4_to_8_as_a_line_diff(time_slicing_change):
    shown = lines(time_slicing_change)
    assert "+- data.t4-inference:" in shown
    assert "-      replicas: 4" in shown and "+      replicas: 8" in shown


def test_list_elements_are_named_by_their_key(dev_plan):
    new = copy.deepcopy(dev_plan.document)
    driver = next(r for r in new["resources"] if r["type"].endswith(":NVIDIADriver"))
    env = driver["inputs"]["spec"]["manager"]["env"]
    next(item for item in env if item["name"] == "DRAIN_TIMEOUT_SECONDS")["value"] = "600s"
    shown = lines(review(dev_plan.document, new))
    assert '~ spec.manager.env[DRAIN_TIMEOUT_SECONDS].value: "300s" => "600s"' in shown


def test_a_long_value_is_cut_around_its_difference_never_into_sameness():
    before, after = report.value_pair("x" * 500 + "a", "x" * 500 + "b")
    assert before != after and before.endswith('a"') and after.endswith('b"') and before.startswith("...")


def test_user_data_shows_as_decoded_lines():
    import base64

    from gpuctl.diff import Change

    old = base64.b64encode(b"#!/bin/bash\nbootstrap --taint a\n").decode()
    new = base64.b64encode(b"#!/bin/bash\nbootstrap --taint b\n").decode()
    assert report.change_lines(Change("userData", old, new)) == [
        "userData:", "    ...", "     #!/bin/bash", "    -bootstrap --taint a", "    +bootstrap --taint b"]


def test_a_create_shows_its_key_fields_and_each_component_header_once():
    base = render_stack("prod").document
    config = stack_config("prod")
    config["gpu-platform:nodePools"].append({**config["gpu-platform:nodePools"][0], "name": "l4-extra"})
    config["gpu-platform:tenants"].append({"name": "speech", "gpus": 0})
    shown = lines(review(base, render_stack("prod", config).document))
    assert 'instanceType: "g6.xlarge"' in shown and "desiredCapacity: 8" in shown
    assert any(line.startswith('spec.hard: {') for line in shown)
    headers = [line for line in shown if line.startswith("gpu-platform:index:")]
    assert len(headers) == len(set(headers)), headers
    assert any("tenant-speech-namespace  (speech)" in line for line in shown)


def test_json_steps_carry_old_and_new_values_and_the_summary_is_data(time_slicing_change):
    document = report.to_json(time_slicing_change)
    [step] = [s for s in document["steps"] if s["object"].startswith("nvidia-gpu-operator/device-plugin-config-")]
    assert "replicas: 4" in step["old"]["data"]["t4-inference"] and "replicas: 8" in step["new"]["data"]["t4-inference"]
    [change] = [c for c in step["detailedDiff"] if c["path"] == "data.t4-inference"]
    assert "replicas: 8" in change["new"]
    assert json.loads(json.dumps(document["summary"]["capacity"]["kinds_after"])) == {
        "nvidia.com/gpu.shared": [8, 16]}
    json.dumps(document)


def parse(markdown: str):
    return MarkdownIt("commonmark").enable("table").parse(markdown)


def test_markdown_is_a_valid_github_comment():
    base = render_stack("prod").document
    config = stack_config("prod")
    config["gpu-platform:tenants"] = [t for t in config["gpu-platform:tenants"] if t["name"] != "analytics"]
    config["gpu-platform:nodePools"][0].update(kernel="6.8.0-1024-aws")
    text = report.to_markdown(review(base, render_stack("prod", config).document))
    tokens = parse(text)
    types = [token.type for token in tokens]
    assert types.count("table_open") >= 4  # pools, kernels, tenants, capacity
    fences = {token.info: token.content for token in tokens if token.type == "fence"}
    assert set(fences) == {"mermaid", "diff"}
    mermaid = fences["mermaid"].splitlines()
    assert mermaid[0] == "flowchart TD" and any("-->" in line for line in mermaid)
    html = "".join(token.content for token in tokens if token.type == "html_block")
    assert "<details>" in html and "<summary>Full diff:" in html and "</details>" in html
    bold = [children[i + 1].content for token in tokens if token.type == "inline"
            for i, children in [(j, token.children) for j in range(len(token.children or []) - 1)]
            if children[i].type == "strong_open"]
    assert "namespace analytics deleted" in bold  # the destructive list, in bold
    # Each table row has as many cells as its header.
    for line in text.splitlines():
        if line.startswith("| pool |"):
            assert line.count(" | ") == 5


def test_the_mermaid_picture_is_bounded_and_in_apply_order():
    base = render_stack("prod").document
    config = stack_config("prod")
    config["gpu-platform:tenants"] += [{"name": f"team-{i}", "gpus": 0} for i in range(10)]
    diff = diff_plans(base, render_stack("prod", config).document)
    assert len(diff.steps) > 50
    picture = report.mermaid(diff)
    nodes = [line for line in picture if line.strip().startswith("s") and "[" in line]
    assert len(nodes) == 50 and any(line.strip().startswith(f'more["+{len(diff.steps) - 50} more"]')
                                    for line in picture)
    ids = {f"s{index}" for index in range(50)}
    for line in picture:
        if "-->" in line:
            a, b = line.split("-->")
            assert a.strip() in ids and b.strip() in ids
            assert int(a.strip()[1:]) < int(b.strip()[1:]), "edges run in apply order"


def test_a_long_diff_is_cut_to_fit_a_comment_never_the_summary():
    base = render_stack("prod").document
    config = stack_config("prod")
    config["gpu-platform:tenants"] += [{"name": f"team-{i}", "gpus": 0} for i in range(10)]
    full = review(base, render_stack("prod", config).document)
    text = report.to_markdown(full, limit=12000)
    assert len(text) <= 12000
    assert "more lines cut to fit a comment" in text
    assert text.count(" | added | ") == 10  # every changed tenant is still in the summary
    assert text.rstrip().endswith("</details>")
