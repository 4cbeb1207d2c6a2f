"""Fixtures shared by the integration tests (beyond tests/conftest.py)."""

import pytest

from infra.prometheus.harness import HarnessError, PrometheusStack, shared_stack
from tests.fixture_http import replay

__all__ = ["prom_stack", "replay"]


@pytest.fixture(scope="session")
def prom_stack() -> PrometheusStack:
    """The real Prometheus (Debian's package) scraping the test exporter, shared by all tests."""
    try:
        return shared_stack()
    except HarnessError as exc:
        pytest.fail(f"the real Prometheus could not be started: {exc}")
