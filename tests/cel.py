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


def _sum(values: Any) -> Any:
    """Kubernetes CEL's lists library: `l.sum()` of ints or doubles (k8s.io/apiserver pkg/cel/library/lists.go)."""
    items = list(values)
    return sum(items[1:], items[0]) if items else celpy.celtypes.IntType(0)


KUBERNETES_FUNCTIONS = {"quantity": Quantity,
                        "isGreaterThan": lambda a, b: celpy.celtypes.BoolType(a.value > b.value),
                        "asInteger": lambda q: celpy.celtypes.IntType(int(q.value)),
                        "asApproximateFloat": lambda q: celpy.celtypes.DoubleType(float(q.value)),
                        "sum": _sum,
                        "find": _find}


@cache
def program(expression: str) -> Any:
    return ENVIRONMENT.program(ENVIRONMENT.compile(expression), functions=KUBERNETES_FUNCTIONS)


def _variables(values: Mapping[str, Any]) -> celpy.celtypes.MapType:
    return celpy.celtypes.MapType({celpy.celtypes.StringType(key): value for key, value in values.items()})


def broken_rules(variables: Mapping[str, str], validations: Sequence[tuple[str, str]], obj: dict[str, Any], *,
                 namespace: str = "team", tenant_class: str = "", operation: str = "CREATE",
                 user: str = "alice", old: dict[str, Any] | None = None,
                 namespace_labels: Mapping[str, str] | None = None,
                 options: Mapping[str, Any] | None = None) -> list[str]:
    """The messages of the validations `obj` breaks in `namespace` (a tenant of `tenant_class`, with
    `namespace_labels` besides), sent by `user` (an UPDATE of `old`) with `options` (a DELETE's DeleteOptions)."""
    labels = {**({"gpu-platform.io/priority-class": tenant_class} if tenant_class else {}), **(namespace_labels or {})}
    activation: dict[str, Any] = {
        "object": celpy.json_to_cel(obj),
        "oldObject": celpy.json_to_cel(old),
        "request": celpy.json_to_cel({"operation": operation, "namespace": namespace,
                                       "userInfo": {"username": user}, **({"options": options} if options else {})}),
        "namespaceObject": celpy.json_to_cel({"metadata": {"name": namespace, "labels": labels}}),
    }
    values: dict[str, Any] = {}
    for key, expression in variables.items():
        activation["variables"] = _variables(values)
        values[key] = program(expression).evaluate(activation)
    activation["variables"] = _variables(values)
    return [message for rule, message in validations if not program(rule).evaluate(activation)]
