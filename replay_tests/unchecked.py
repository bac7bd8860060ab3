"""Registering a flow under a name registration now refuses (ADR 0002, amended "flow
names"): a log written before names were checked, or an imported bundle, can still hold such
a name, and what reads the log must stay safe with it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from loom_runtime import FlowRegistry, Loom
from loom_runtime.flow import Flow


def register_unchecked(
    where: Loom | FlowRegistry, name: str
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """``@register_unchecked(loom, name)``: ``@loom.flow(name)`` without the name's check."""
    registry = where.flows if isinstance(where, Loom) else where

    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        registry._flows[name] = Flow(fn, name=name, version=None)
        return fn

    return register
