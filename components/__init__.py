"""The platform's ComponentResources, one per module."""
