"""The package metadata that installers and scanners read."""

from __future__ import annotations

import tomllib
from pathlib import Path

_ROOT = Path(__file__).parent.parent


def test_the_license_is_an_spdx_expression_with_its_file() -> None:
    """setuptools stops building a ``project.license`` table after 2027-02-18 (PEP 639)."""
    project = tomllib.loads((_ROOT / "pyproject.toml").read_text())["project"]
    assert project["license"] == "Apache-2.0"
    for name in project["license-files"]:
        text = (_ROOT / name).read_text()
        assert "Apache License" in text and "Version 2.0" in text
