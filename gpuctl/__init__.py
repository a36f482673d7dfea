"""Offline tooling: render, check and diff the platform under the Pulumi SDK's mock runtime."""

__version__ = "0.1.0"
