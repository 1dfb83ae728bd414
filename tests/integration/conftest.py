"""Fixtures of the integration tests: Ray's multi-node simulation (tests/support/ray_cluster.py)."""

from tests.support.ray_cluster import cluster  # noqa: F401 (a fixture, found here by pytest)
