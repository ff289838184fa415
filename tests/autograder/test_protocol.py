"""autograder.protocol's message kinds: declared once, handled by the worker, used by name everywhere, refused when undeclared."""

import ast
import inspect
import os
import pickle
import threading
import time
from pathlib import Path

import pytest

from autograder import protocol
from autograder.protocol import Answer, Reply, Request
from autograder.worker import Worker

AUTOGRADER = Path(protocol.__file__).parent
KINDS = {kind.value for kinds in (Request, Reply, Answer) for kind in kinds}


def test_the_worker_handles_every_request_and_nothing_else():
    handlers = {name.removeprefix("do_") for name in vars(Worker) if name.startswith("do_")}
    assert handlers == {kind.value for kind in Request}


def test_kinds_are_declared_once_and_documented():
    for kinds in (Request, Reply, Answer):
        assert len(kinds.__members__) == len(kinds), f"two of {kinds.__name__}'s kinds share a string"
        source = inspect.getsource(kinds).splitlines()
        for kind in kinds:
            [line] = [line for line in source if line.strip().startswith(f'{kind.name} = "{kind.value}"')]
            assert "# " in line, f"{kinds.__name__}.{kind.name} says nothing about what it does"


def _first_names(function: ast.AST) -> set[str]:
    """Names bound as the first of an unpacked assignment (``kind, value, message = self.pump()``): a message's kind."""
    return {node.targets[0].elts[0].id for node in ast.walk(function) if isinstance(node, ast.Assign)
            and isinstance(node.targets[0], ast.Tuple) and node.targets[0].elts and isinstance(node.targets[0].elts[0], ast.Name)}


def _is_kind(node) -> bool:
    return isinstance(node, ast.Constant) and node.value in KINDS


def bare_kinds(source: str) -> list[str]:
    """Where ``source`` writes a message kind as a bare string: first of a tuple, first argument of send or request,
    or compared with a message's first element (``reply[0]``, or the first name unpacked from a message)."""
    tree, found = ast.parse(source), []
    kind_names = _first_names(tree)
    for node in ast.walk(tree):
        if isinstance(node, ast.Tuple) and node.elts and _is_kind(node.elts[0]):
            found.append(f"line {node.lineno}: a message {node.elts[0].value!r}")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("send", "request") \
                and node.args and _is_kind(node.args[0]):
            found.append(f"line {node.lineno}: {node.func.attr}({node.args[0].value!r})")
        elif isinstance(node, ast.Compare):
            operands = [node.left, *node.comparators]
            constants = [item for operand in operands for item in (operand.elts if isinstance(operand, ast.Tuple | ast.List | ast.Set) else [operand])]
            first = any((isinstance(operand, ast.Subscript) and isinstance(operand.slice, ast.Constant) and operand.slice.value == 0)
                        or (isinstance(operand, ast.Name) and operand.id in kind_names) for operand in operands)
            if first and any(_is_kind(item) for item in constants):
                found.append(f"line {node.lineno}: compared with {[item.value for item in constants if _is_kind(item)]}")
    return found


def test_the_scan_finds_bare_kinds_as_the_grader_once_wrote_them():
    old = ('reply = worker.request(("exec", source), 5)\nif reply[0] == "raise":\n    pass\nself.send("ok")\n'
           'if message[0] in ("cb_return", "cb_raise"):\n    pass\nkind, value, message = self.pump()\nif kind == "stop":\n    pass\n')
    assert len(bare_kinds(old)) == 6, bare_kinds(old)
    assert bare_kinds('for name, kind in kinds.items():\n    ok = kind == "value"\nexec(compile(s, "f", "exec"))\n') == []


@pytest.mark.parametrize("module", sorted(path.name for path in AUTOGRADER.glob("*.py") if path.name != "protocol.py"))
def test_no_module_writes_a_message_kind_as_a_bare_string(module):
    assert bare_kinds((AUTOGRADER / module).read_text()) == [], f"use autograder.protocol's Request, Reply and Answer in {module}"


def test_the_wire_carries_plain_strings_and_undeclared_kinds_are_refused_on_both_sides():
    sent = pickle.loads(protocol.encode_for_worker((Request.CALL, "f", [], {})))
    assert sent == ("call", "f", [], {}) and type(sent[0]) is str
    assert protocol.decode_from_worker(protocol.encode_for_harness((Reply.OK,))) == ("ok",)  # the plain-data reader takes it
    with pytest.raises(ValueError, match="undeclared message kind 'frobnicate'"):
        protocol.encode_for_worker(("frobnicate",))
    with pytest.raises(ValueError, match="undeclared message kind 'call'"):
        protocol.encode_for_harness(("call",))  # a request's kind is no reply


def test_the_worker_refuses_an_undeclared_request_clearly_and_serves_on():
    to_worker_read, to_worker = os.pipe()
    from_worker, from_worker_write = os.pipe()
    serving = threading.Thread(target=Worker(to_worker_read, from_worker_write).serve, daemon=True)
    serving.start()
    try:
        def reply():
            return protocol.decode_from_worker(protocol.read_frame(from_worker, time.monotonic() + 30))

        assert reply() == ("ready",)
        protocol.write_frame(to_worker, pickle.dumps(("frobnicate", 1)))  # past the harness's own check, as a bug would be
        refused = reply()
        assert refused[:2] == ("raise", "ValueError") and "undeclared message kind 'frobnicate'" in refused[2], refused
        protocol.write_frame(to_worker, protocol.encode_for_worker((Request.NAMES, ["print", "nothing"])))
        assert reply() == ("names", {"print": "missing", "nothing": "missing"})
    finally:
        os.close(to_worker)
        serving.join(timeout=10)
        for fd in (to_worker_read, from_worker, from_worker_write):
            os.close(fd)
    assert not serving.is_alive()
