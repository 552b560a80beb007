"""Generated documentation stays in sync with the code."""

from __future__ import annotations

from pathlib import Path

from osrdyne import config_doc

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_configuration_page_documents_every_option() -> None:
    current = (DOCS / "configuration.md").read_text()
    assert current == config_doc.render(), (
        "docs/configuration.md is stale: run python -m osrdyne.config_doc > docs/configuration.md"
    )
