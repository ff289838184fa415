"""gpucourse.hooks: the hooks between the package's helpers and the grader's stand-ins, declared once and looked up by one function."""

import ast
import inspect
from pathlib import Path

import pytest

import gpucourse
from autograder import standins
from gpucourse import hooks
from gpucourse.check import MmaCounted
from gpucourse.hooks import HOOKS, GraderStandIn, stand_in_hook

PACKAGE = Path(gpucourse.__file__).parent
# Which hooks each stand-in must implement: a student's function may be handed to any helper but answers_only (which
# takes a setup function); the others stand for less.
NEEDED = {
    standins.StudentFunction: HOOKS - {"answers_only"},
    standins.ReferenceFunction: {"timed_block", "drive_iterator", "answers_only"},  # a baseline timed or driven; a setup function
    standins._BudgetedCall: {"timed_block"},  # answers_only's calls, timed by compare_speed
    MmaCounted: {"timed_block"},  # its tally started before the clock and read after it
}


def _implemented(cls) -> set[str]:
    return {name for name in HOOKS if getattr(cls, name, None) is not vars(GraderStandIn)[name]}


def test_every_hook_is_declared_once_with_what_it_does():
    assert HOOKS == {"timed_block", "call_profiled", "torch_only", "njit_only", "mma_calls", "mma_counted", "answers_only",
                     "call_with_streams", "drive_iterator", "__kernel_source__", "memory_capped", "numpy_only", "in_place"}
    for name in HOOKS:
        assert "Called by" in inspect.getdoc(getattr(GraderStandIn, name)), f"{name}: say who calls it"
    assert set().union(*NEEDED.values()) == HOOKS, "a hook no stand-in implements"


@pytest.mark.parametrize("cls", NEEDED, ids=lambda cls: cls.__name__)
def test_each_stand_in_implements_the_hooks_it_needs_and_declares_the_interface(cls):
    assert GraderStandIn in cls.__mro__  # a Protocol subclassed explicitly (issubclass needs @runtime_checkable)
    assert _implemented(cls) == set(NEEDED[cls])


def test_every_class_with_a_hook_method_declares_the_interface():
    """A class of the grader's stand-ins or of the package that defines a hook-named method subclasses GraderStandIn
    (else a helper would find it without the interface knowing), and every such class is in NEEDED."""
    import gpucourse.check

    for module in (standins, gpucourse.check):
        for cls in vars(module).values():
            if inspect.isclass(cls) and cls.__module__ == module.__name__ and HOOKS & set(vars(cls)):
                assert GraderStandIn in cls.__mro__ and cls in NEEDED, cls


def test_the_lookup_binds_a_hook_and_finds_none_where_there_is_none():
    student = standins.StudentFunction(None, "f", lambda: 1.0)
    assert stand_in_hook(student, "timed_block").__self__ is student
    assert stand_in_hook(student, "__kernel_source__").__self__ is student
    reference = standins.ReferenceFunction(print, None, "f", lambda: 1.0, None)
    assert stand_in_hook(reference, "njit_only") is None  # the interface's own, not overridden
    with pytest.raises(NotImplementedError, match="no njit_only hook"):
        reference.njit_only()

    def plain():
        pass

    plain.__kernel_source__ = lambda: "not from the type"  # special names are looked up on the type, as Python does
    assert stand_in_hook(plain, "timed_block") is None and stand_in_hook(plain, "__kernel_source__") is None
    with pytest.raises(ValueError, match="not a hook declared"):
        stand_in_hook(student, "timed_blok")


def hook_lookups(source: str, filename: str = "") -> list[str]:
    """What ``source`` does wrong with hooks: looks one up by name outside hooks.stand_in_hook
    (``getattr(fn, "timed_block", None)``, ``hasattr``), or asks stand_in_hook for a name that is not a literal
    declared hook."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Call) or len(node.args) < 2:
            continue
        function = node.func.id if isinstance(node.func, ast.Name) else node.func.attr if isinstance(node.func, ast.Attribute) else ""
        name = node.args[1].value if isinstance(node.args[1], ast.Constant) else None
        if function in ("getattr", "hasattr") and name in HOOKS:
            found.append(f"{filename}:{node.lineno}: {function}(..., {name!r}) instead of hooks.stand_in_hook")
        elif function == "stand_in_hook" and name not in HOOKS:
            found.append(f"{filename}:{node.lineno}: stand_in_hook(..., {ast.unparse(node.args[1])}) is not a declared hook")
    return found


def test_the_scan_finds_lookups_outside_the_interface():
    wrong = ('a = getattr(fn, "timed_block", None)\nb = hasattr(type(k), "__kernel_source__")\n'
             'c = stand_in_hook(fn, "timed_blok")\nd = stand_in_hook(fn, name)\n')
    assert len(hook_lookups(wrong)) == 4, hook_lookups(wrong)
    assert hook_lookups('a = stand_in_hook(fn, "timed_block")\nb = getattr(fn, "__name__", None)\n') == []


def test_the_package_looks_hooks_up_only_through_the_interface_and_uses_each():
    found, used = [], set()
    for path in sorted(PACKAGE.rglob("*.py")):
        if path == Path(hooks.__file__):
            continue
        source = path.read_text()
        found += hook_lookups(source, str(path.relative_to(PACKAGE)))
        used |= {node.args[1].value for node in ast.walk(ast.parse(source)) if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
                 and node.func.id == "stand_in_hook" and len(node.args) > 1 and isinstance(node.args[1], ast.Constant)}
    assert found == []
    assert used == HOOKS, f"declared but never looked up: {sorted(HOOKS - used)}"
