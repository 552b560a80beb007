"""`python -m osrdyne` is the `osrdyne` command."""

from osrdyne.ops.cli import app

app()
