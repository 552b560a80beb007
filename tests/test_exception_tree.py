"""Every exception class the controller and the client define is an `OsrdyneError`, so that a
caller, an operator's script or a log filter can tell ours from a library's with one class; an
error that is also a standard one (a lost lease is a `ConnectionError`) keeps that base beside
it. `osrdyne.wire` sits below `osrdyne.exceptions` (the import contracts) and keeps the
standard bases (`Unconfirmed` is a `TimeoutError`); the worker library's and the Spark
workers' errors are a worker's answers (`HandlerError`, the pipeline's `PipelineError`)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import osrdyne.client
import osrdyne.controller
from osrdyne.exceptions import OsrdyneError


def _modules() -> list[str]:
    return sorted(
        info.name
        for package in (osrdyne.controller, osrdyne.client)
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}.")
    )


def _exceptions() -> list[type[BaseException]]:
    found = []
    for name in _modules():
        module = importlib.import_module(name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == name:
                found.append(value)
    return found


def test_the_walk_finds_the_controller_s_exceptions() -> None:
    names = {cls.__name__ for cls in _exceptions()}
    assert {"NotLeader", "KeyRefused", "LeaseExpired", "ComponentDied", "QueueBusy"} <= names


@pytest.mark.parametrize("cls", _exceptions(), ids=lambda cls: f"{cls.__module__}.{cls.__name__}")
def test_every_exception_of_osrdyne_is_an_osrdyne_error(cls: type[BaseException]) -> None:
    assert issubclass(cls, OsrdyneError), f"{cls.__module__}.{cls.__name__}: {cls.__mro__}"
