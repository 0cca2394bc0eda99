"""Deprecated: moved to `sandpool.eval.metrics` (this name works, with a warning, until the next release)."""

from ._moved import alias

alias(__name__, "sandpool.eval.metrics")
