"""Generated documentation stays in sync with the code."""

from __future__ import annotations

from pathlib import Path

from osrdyne.ops import _config_doc

DOCS = Path(__file__).resolve().parent.parent / "docs"


def test_configuration_page_documents_every_option() -> None:
    current = (DOCS / "configuration.md").read_text()
    assert current == _config_doc.render(), (
        "docs/configuration.md is stale: "
        "run python -m osrdyne.ops._config_doc > docs/configuration.md"
    )
