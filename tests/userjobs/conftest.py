"""Fixtures the job tests share with others: a cloud's metadata server that can give notice."""

from tests.test_emergency import metadata  # noqa: F401 - a fixture, found by its name
