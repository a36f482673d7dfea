"""A ValidatingAdmissionPolicy's CEL evaluated as the API server does, with cel-python: variables first, in order,
then each validation; Kubernetes' own library functions the policies call are added."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import celpy
from kubernetes.utils.quantity import parse_quantity

ENVIRONMENT = celpy.Environment()


class Quantity:
    """Kubernetes CEL's quantity type, for the functions the policies use (parsed as the kubernetes client parses
    quantities)."""

    def __init__(self, text: Any):
        self.value = parse_quantity(str(text))


def _find(text: Any, pattern: Any) -> celpy.celtypes.StringType:
    """Kubernetes CEL's regex library: `s.find(re)` is the first match of `re` in `s`, or "" (k8s.io/apiserver
    pkg/cel/library/regex.go)."""
    match = re.search(str(pattern), str(text))
    return celpy.celtypes.StringType(match.group(0) if match else "")


KUBERNETES_FUNCTIONS = {"quantity": Quantity,
                        "isGreaterThan": lambda a, b: celpy.celtypes.BoolType(a.value > b.value),
                        "find": _find}


@cache
def program(expression: str) -> Any:
    return ENVIRONMENT.program(ENVIRONMENT.compile(expression), functions=KUBERNETES_FUNCTIONS)


def _variables(values: Mapping[str, Any]) -> celpy.celtypes.MapType:
    return celpy.celtypes.MapType({celpy.celtypes.StringType(key): value for key, value in values.items()})


def broken_rules(variables: Mapping[str, str], validations: Sequence[tuple[str, str]], obj: dict[str, Any], *,
                 namespace: str = "team", tenant_class: str = "", operation: str = "CREATE",
                 user: str = "alice", old: dict[str, Any] | None = None,
                 namespace_labels: Mapping[str, str] | None = None) -> list[str]:
    """The messages of the validations `obj` breaks in `namespace` (a tenant of `tenant_class`, with
    `namespace_labels` besides), sent by `user` (an UPDATE of `old`)."""
    labels = {**({"gpu-platform.io/priority-class": tenant_class} if tenant_class else {}), **(namespace_labels or {})}
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel({"operation": operation, "namespace": namespace,
                                       "userInfo": {"username": user}}),
        "namespaceObject": celpy.json_to_cel({"metadata": {"name": namespace, "labels": labels}}),
    }
    values: dict[str, Any] = {}
    for key, expression in variables.items():
        activation["variables"] = _variables(values)
        values[key] = program(expression).evaluate(activation)
    activation["variables"] = _variables(values)
    return [message for rule, message in validations if not program(rule).evaluate(activation)]
