"""Every patch a test makes still patches something: pytest's ``monkeypatch.setattr`` refuses a name
its target does not have (``raising=True``, the default), so a patch left behind by a move (a
method of the session moved to one of its parts) fails its test instead of patching nothing. This
holds only while no test turns that off."""
import ast
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]


def patches_that_may_patch_nothing() -> list[str]:
    found = []
    for path in sorted(TESTS.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "setattr"
                    and any(keyword.arg == "raising" for keyword in node.keywords)):
                found.append(f"{path.relative_to(TESTS)}:{node.lineno}")
    return found


def test_no_test_lets_a_patch_miss_its_name():
    assert patches_that_may_patch_nothing() == []


def test_a_patch_of_a_name_that_is_gone_fails(monkeypatch):
    from harness.session.suite import Suite

    with pytest.raises(AttributeError):
        monkeypatch.setattr(Suite, "_baseline_environment", lambda self, result: None)  # moved to Confirming
