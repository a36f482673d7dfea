"""Images and charts: operand image overrides, the chart mirror, the device plugin's options and the registry
pull secret."""

from __future__ import annotations

import json

from pydantic import Field, SecretStr, model_validator
from pydantic.alias_generators import to_camel

from stacks.config.fields import Int, StrictModel


class DevicePluginConfig(StrictModel):
    """Device plugin options. `timeSlicingReplicas` was the whole fleet's; it is each pool's now (refused here)."""

    time_slicing_replicas: Int | None = Field(default=None, ge=2, le=64)

    @model_validator(mode="after")
    def _check(self) -> DevicePluginConfig:
        if self.time_slicing_replicas is not None:
            raise ValueError("timeSlicingReplicas is a pool's choice: move it to nodePools[].timeSlicingReplicas of "
                             "the pools that share their GPUs (the others then take multi-GPU requests)")
        return self


def _image():
    return Field(default=None, pattern=r"^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+"
                                       r"(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}|@sha256:[0-9a-f]{64})$")


class ImagesConfig(StrictModel):
    """Overrides of operand images; each one unset is the image the pinned GPU Operator (or NFD) release ships."""

    nfd: str | None = _image()
    toolkit: str | None = _image()
    device_plugin: str | None = _image()
    dcgm_exporter: str | None = _image()
    validator: str | None = _image()
    driver_manager: str | None = _image()
    mig_manager: str | None = _image()

    def operands(self) -> dict[str, str]:
        """The GPU Operator operand images set here, by ClusterPolicy section (toolkit, devicePlugin, ...).

        GPU feature discovery ships in the device plugin's image (k8s-device-plugin), so it follows that override.
        """
        images = {to_camel(name): image for name, image in self.model_dump().items()
                  if image is not None and name != "nfd"}
        if "devicePlugin" in images:
            images["gfd"] = images["devicePlugin"]
        return images


class ChartsConfig(StrictModel):
    """Where the pinned Helm charts come from (Kubernetes): their public repositories, or one mirror that serves the
    same charts at the same versions (an air-gapped cluster's Harbor, ChartMuseum or OCI registry)."""

    mirror: str | None = Field(default=None, pattern=r"^(oci|https?)://[A-Za-z0-9.-]+(:[0-9]{1,5})?(/[A-Za-z0-9._~-]+)*/?$",
                               description="a Helm repository URL (https://...) or an OCI path (oci://host/path)")


def docker_config_json(secret: SecretStr) -> SecretStr:
    """A `.dockerconfigjson` document: {"auths": {registry: {"auth": ...} | {"username", "password"}}}."""
    try:
        document = json.loads(secret.get_secret_value())
    except (ValueError, RecursionError):  # a document nested thousands deep is not one either
        document = None
    auths = document.get("auths") if isinstance(document, dict) else None
    if not isinstance(auths, dict) or not auths or not all(
            isinstance(entry, dict) and ("auth" in entry or {"username", "password"} <= set(entry))
            for entry in auths.values()):
        # The value is never shown: it is a credential.
        raise ValueError('is not a .dockerconfigjson document ({"auths": {"<registry>": {"auth": "<base64>"}}}); '
                         "set it from the file: pulumi config set --secret registryPullSecret < config.json")
    return secret
