"""Hook specifications: the whole plugin interface of tiledmm.

Every hook here is documented in docs/plugins.md with its exact signature (a test enforces it).
"""

from __future__ import annotations

from collections.abc import Callable

import pluggy

hookspec = pluggy.HookspecMarker("tiledmm")
hookimpl = pluggy.HookimplMarker("tiledmm")


@hookspec
def register_backends(register: Callable[[object], None]) -> None:
    """Register this plugin's backends: call ``register(backend)`` once per Backend instance.

    Keep it cheap: do not import device libraries here (do that lazily in the backend).
    """
