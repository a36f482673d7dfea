"""Offline tooling: render, check and diff the platform under the Pulumi SDK's mock runtime."""
