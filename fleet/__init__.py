"""Fleet facts shared by the stack config and the components: instance types, node OSes, kernels, drivers."""
