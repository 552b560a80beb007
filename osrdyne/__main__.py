"""`python -m osrdyne` is the `osrdyne` command."""

from osrdyne.cli import app

app()
