"""The whole stack configuration as strict pydantic models, and the one place that reads Pulumi config.

One module per part of the stack file (cluster, node_profiles, rolls, karpenter, pools, drivers, tenant_networks,
tenants, images, monitoring), the stack as a whole (stack), the field types they share (fields), pydantic's errors
as one line (messages), and reading the config (load). The names other modules use are importable from here.
"""

from stacks.config.cluster import ClusterConfig, DiscoveryConfig
from stacks.config.fields import MAX_ERROR_CHARACTERS, PROJECT, ConfigError, capped
from stacks.config.images import docker_config_json
from stacks.config.load import config_from_stack_file, load_stack_config, parse_stack_config
from stacks.config.messages import PATTERN_FIXES
from stacks.config.pools import NodePoolConfig
from stacks.config.rolls import RollConfig
from stacks.config.stack import StackConfig
from stacks.config.tenant_networks import TenantNetworkConfig
from stacks.config.tenants import TenantConfig

__all__ = ["MAX_ERROR_CHARACTERS", "PATTERN_FIXES", "PROJECT", "ClusterConfig", "ConfigError", "DiscoveryConfig",
           "NodePoolConfig", "RollConfig", "StackConfig", "TenantConfig", "TenantNetworkConfig", "capped",
           "config_from_stack_file", "docker_config_json", "load_stack_config", "parse_stack_config"]
