"""Every hook spec in tiledmm.core.hookspecs is documented in docs/plugins.md with its exact
signature.

Adding a hook without documenting it (or changing a signature without updating the guide)
fails here.
"""

from __future__ import annotations

import inspect
from pathlib import Path

import pytest

from tiledmm.core import hookspecs

DOC = Path(__file__).resolve().parents[1] / "docs" / "plugins.md"


def _specs() -> list:
    return [
        fn
        for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
        if hasattr(fn, "tiledmm_spec") and fn.__module__ == hookspecs.__name__
    ]


def signature_text(fn) -> str:
    """``def name(args) -> ret`` as written in the source (string annotations unquoted)."""
    return f"def {fn.__name__}{inspect.signature(fn)}".replace("'", "")


def test_there_are_hook_specs():
    assert _specs(), "no hook specs found: did the marker or module change?"


@pytest.mark.parametrize("fn", _specs(), ids=lambda fn: fn.__name__)
def test_hook_documented_with_exact_signature(fn):
    text = DOC.read_text()
    sig = signature_text(fn)
    assert sig in text, f"docs/plugins.md must document the hook as `{sig}`"
    assert f"### {fn.__name__}" in text, f"docs/plugins.md needs a `### {fn.__name__}` section"


def test_every_backend_member_is_documented():
    """Each public member of tiledmm.Backend appears in the guide's contract table."""
    import tiledmm

    text = DOC.read_text()
    members = [m for m in vars(tiledmm.Backend) if not m.startswith("_") and m != "available"]
    missing = [m for m in members if f"`{m}" not in text]
    assert not missing, f"docs/plugins.md does not document Backend.{', '.join(missing)}"
