"""Old homes of moved modules: each stays importable, with a DeprecationWarning, for one release."""

from __future__ import annotations

import importlib
import sys
import warnings


def alias(old: str, new: str) -> None:
    """Makes module `old` (being imported) the module `new` itself, so every name, private ones
    included, resolves as before; warns the importer once."""
    warnings.warn(
        f"{old} moved to {new}; the old name goes in the next release", DeprecationWarning, stacklevel=3
    )
    sys.modules[old] = importlib.import_module(new)
