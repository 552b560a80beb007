"""The console's files, checked on the source: every file shipped is served and every file
served is shipped (package data), and nothing in them can turn data into markup or code: no
`innerHTML` and its kin, no `eval`, no inline script, style or event handler in the page (the
Content-Security-Policy would block them anyway; this keeps them from being written)."""

from __future__ import annotations

import importlib.resources
import re
import tomllib
from pathlib import Path

from osrdyne.ops import _console

CONSOLE = importlib.resources.files("osrdyne.ops") / "console"
REPO = Path(__file__).resolve().parent.parent.parent

FORBIDDEN_JS = [
    "innerHTML",
    "outerHTML",
    "insertAdjacentHTML",
    "document.write",
    "eval(",
    "new Function",
    'setAttribute("style"',
    "javascript:",
]


def test_every_shipped_file_is_served_and_every_served_file_is_shipped() -> None:
    shipped = {p.name for p in CONSOLE.iterdir() if p.is_file()}
    assert shipped == set(_console.ASSETS)
    package_data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"][
        "package-data"
    ]
    assert "console/*" in package_data["osrdyne.ops"]


def test_no_script_turns_data_into_markup_or_code() -> None:
    for name in _console.ASSETS:
        if not name.endswith(".js"):
            continue
        # Without line comments (which may name what is not done).
        source = re.sub(r"(^|\s)//.*$", "", (CONSOLE / name).read_text(), flags=re.M)
        for word in FORBIDDEN_JS:
            assert word not in source, f"{name} uses {word}"


def test_the_page_has_no_inline_script_style_or_handler() -> None:
    page = (CONSOLE / "index.html").read_text()
    for tag in re.findall(r"<script\b[^>]*>", page):
        assert 'src="' in tag, tag
    assert not re.search(r"<script\b[^>]*>\s*[^<\s]", page), "inline script"
    assert "<style" not in page and " style=" not in page
    assert not re.search(r"\son[a-z]+=", page), "inline event handler"
