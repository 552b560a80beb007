"""Example workers."""
