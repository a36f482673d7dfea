"""Where a pool's GPU nodes come from: one module per placement, each behind the interface of `base.Placement`."""
