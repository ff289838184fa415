"""The syntax-tree rules the gates share: one scope, one refusal, one literal test, one walk.

A gate reads an answer cell's syntax tree before any of it runs and refuses the first line it cannot
trust, naming the line (:func:`refuse`). The allow-list gates (:mod:`.njit_gate`, :mod:`.torch_gate`)
walk statements, assignments and expressions alike (:class:`Walker`) and differ in what a name, an
attribute, a call, a function and an import may be, which each fills in as a subclass of its own.
:mod:`.kernel_gate` checks text the course's extraction wrote, statement by statement, and shares the
literal test (:func:`is_literal`).
"""

from __future__ import annotations

import ast
import contextlib
from typing import NoReturn


class Refused(ValueError):
    """A gate refused a line; each gate raises it as its own error (:func:`refusals_as`)."""


def refuse(node: ast.AST, why: str) -> NoReturn:
    raise Refused(f"line {getattr(node, 'lineno', '?')}: {why}")


@contextlib.contextmanager
def refusals_as(error: type[ValueError]):
    """Inside, a :class:`Refused` is raised as ``error`` (the gate's own: ``NotOwnLoops``, ``UncountableSource``), same message."""
    try:
        yield
    except Refused as refused:
        raise error(str(refused)) from None


def is_literal(node: ast.expr, *, arithmetic: bool = True) -> bool:
    """An immutable literal: a constant, a tuple of literals, or a sign on one; with ``arithmetic``, also an
    operator between literals (``2 ** 0.5``; ``1 / math.sqrt(2)`` is no literal). Never a list, dict or set:
    a mutable global would keep state between graded calls.

    ``arithmetic=False`` is for text a child process executes before a compiler sees it (:mod:`.kernel_gate`):
    what the course's extraction writes holds no arithmetic, and ``10 ** 10 ** 10`` would keep that child busy.
    """
    if isinstance(node, ast.Constant):
        return True
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub | ast.UAdd):
        return is_literal(node.operand, arithmetic=arithmetic)
    if isinstance(node, ast.BinOp) and arithmetic:
        return is_literal(node.left) and is_literal(node.right)
    if isinstance(node, ast.Tuple):
        return all(is_literal(item, arithmetic=arithmetic) for item in node.elts)
    return False


class Scope:
    """The names a line may use: module aliases (name -> what the gate knows it as), callables, constants,
    the Triton kernels a launcher's cell may launch, and the locals of each function the line is in."""

    def __init__(self, functions=(), constants=(), modules: dict | None = None):
        self.functions, self.constants = set(functions), set(constants)
        self.modules: dict[str, object] = dict(modules or {})
        self.locals: list[set[str]] = []  # innermost function last
        self.kernels: set[str] = set()

    def is_local(self, name: str) -> bool:
        return any(name in frame for frame in self.locals)

    @contextlib.contextmanager
    def frame(self, names: set[str]):
        """Inside, ``names`` are locals: a function's parameters and assignments, a comprehension's targets."""
        self.locals.append(names)
        try:
            yield
        finally:
            self.locals.pop()


def parameters(definition: ast.FunctionDef | ast.Lambda) -> list[ast.arg]:
    arguments = definition.args
    every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs, arguments.vararg, arguments.kwarg]
    return [argument for argument in every if argument is not None]


def literal_defaults(definition: ast.FunctionDef | ast.Lambda, why: str) -> None:
    """Refuse a default argument that is no literal: it runs when the ``def`` does, and a mutable one keeps state."""
    arguments = definition.args
    for default in [*arguments.defaults, *(d for d in arguments.kw_defaults if d is not None)]:
        if not is_literal(default):
            refuse(default, why)


def literal_options(call: ast.Call, options: dict, who: str) -> None:
    """Refuse any keyword of ``call`` but ``options`` (name -> the types its literal may have)."""
    for keyword in call.keywords:
        kind = options.get(keyword.arg or "")
        if kind is None or not isinstance(keyword.value, ast.Constant) or not isinstance(keyword.value.value, kind):
            refuse(keyword, f"{who} may take only literal {', '.join(options)} here (got `{ast.unparse(keyword)}`)")


class Walker:
    """A gate's walk over an answer cell, statement by statement: what every allow-list gate reads alike.

    A gate subclasses it and says what may stand at the top of the cell (:meth:`top_level_other`,
    :meth:`imports`), what a function (:meth:`function`), a name read (:meth:`load`), an attribute
    (:meth:`attribute`) and a call (:meth:`call`, then :meth:`call_arguments`) may be, and which other
    statements and expressions it allows (:meth:`statement_other`, :meth:`expression_other`).
    The ``*_rule`` texts are its refusals' words.
    """

    names_rule = "the name `{}` is not allowed here"
    attributes_rule = "`.{}`: private and special attributes are not allowed"
    statements_rule = "a {} statement is not allowed here"
    targets_rule = "only local names may be assigned to"
    kwargs_rule = "`**kwargs` is not allowed here"
    starred = False  # whether `*x` may be passed to a call, or assigned to

    def __init__(self, scope: Scope):
        self.scope = scope

    def walk(self, module: ast.Module) -> None:
        for statement in module.body:
            self.top_level(statement)

    def top_level(self, statement: ast.stmt) -> None:
        if isinstance(statement, ast.Import | ast.ImportFrom):
            self.imports(statement)
        elif isinstance(statement, ast.FunctionDef):
            self.function(statement)
        elif isinstance(statement, ast.Expr) and isinstance(statement.value, ast.Constant):
            return  # a docstring
        else:
            self.top_level_other(statement)

    def statement(self, statement: ast.stmt) -> None:
        if isinstance(statement, ast.Assign | ast.AugAssign | ast.AnnAssign):
            for target in statement.targets if isinstance(statement, ast.Assign) else [statement.target]:
                self.target(target)
            if statement.value is not None:
                self.expression(statement.value)
        elif isinstance(statement, ast.Return | ast.Expr):
            if statement.value is not None:
                self.expression(statement.value)
        elif isinstance(statement, ast.If | ast.While | ast.For):
            if isinstance(statement, ast.For):
                self.target(statement.target)
                self.expression(statement.iter)
            else:
                self.expression(statement.test)
            for inner in [*statement.body, *statement.orelse]:
                self.statement(inner)
        elif isinstance(statement, ast.Raise | ast.Assert):
            for child in ast.iter_child_nodes(statement):
                self.expression(child)
        elif not isinstance(statement, ast.Pass | ast.Break | ast.Continue) and not self.statement_other(statement):
            refuse(statement, self.statements_rule.format(type(statement).__name__))

    def target(self, target: ast.expr) -> None:
        """Assignments bind locals, or write into a local array or tensor (``out[i] = ...``): never an attribute or a global."""
        if isinstance(target, ast.Name):
            self.name(target.id, target)
        elif isinstance(target, ast.Tuple | ast.List):
            for item in target.elts:
                self.target(item)
        elif isinstance(target, ast.Starred) and self.starred:
            self.target(target.value)
        elif isinstance(target, ast.Subscript) and isinstance(target.value, ast.Name) and self.scope.is_local(target.value.id):
            self.expression(target.slice)
        else:
            refuse(target, self.targets_rule)

    def expression(self, node: ast.expr) -> None:
        if isinstance(node, ast.Call):
            self.call(node)
        elif isinstance(node, ast.Name):
            self.load(node)
        elif isinstance(node, ast.Attribute):
            self.attribute(node)
        elif not self.expression_other(node):
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self.expression(child)
                elif isinstance(child, ast.keyword | ast.comprehension | ast.arguments):
                    for inner in ast.iter_child_nodes(child):
                        if isinstance(inner, ast.expr):
                            self.expression(inner)

    def call_arguments(self, node: ast.Call) -> None:
        for argument in node.args:
            self.expression(argument.value if self.starred and isinstance(argument, ast.Starred) else argument)
        for keyword in node.keywords:
            if keyword.arg is None:
                refuse(keyword, self.kwargs_rule)
            self.expression(keyword.value)

    def name(self, name: str, node: ast.AST) -> str:
        if name.startswith("__"):
            refuse(node, self.names_rule.format(name))
        return name

    def attribute_name(self, node: ast.Attribute) -> str:
        if node.attr.startswith("_"):
            refuse(node, self.attributes_rule.format(node.attr))
        return node.attr

    # What each gate fills in.

    def top_level_other(self, statement: ast.stmt) -> None:
        """Check a statement at the top of the cell that is no import, function or docstring."""
        raise NotImplementedError

    def imports(self, statement: ast.Import | ast.ImportFrom) -> None:
        raise NotImplementedError

    def function(self, definition: ast.FunctionDef) -> None:
        raise NotImplementedError

    def statement_other(self, statement: ast.stmt) -> bool:
        """Check a statement the walk does not know; False where the gate does not allow it either."""
        return False

    def expression_other(self, node: ast.expr) -> bool:
        """Check an expression that is no call, name or attribute; False to have its parts walked."""
        return False

    def load(self, node: ast.Name) -> None:
        raise NotImplementedError

    def attribute(self, node: ast.Attribute) -> None:
        """An attribute read (not called)."""
        raise NotImplementedError

    def call(self, node: ast.Call) -> None:
        """A call: its function, then :meth:`call_arguments`."""
        raise NotImplementedError


def walk_cell(text: str, walker: type[Walker], error: type[ValueError], modules: dict) -> None:
    """Walk the answer cell ``text`` with ``walker`` (an allow-list gate), its scope the cell's own functions and
    ``modules``; a refusal, or a cell that does not parse, is raised as ``error``."""
    try:
        module = ast.parse(text)
    except SyntaxError as failure:
        raise error(f"the cell does not parse ({failure.msg}, line {failure.lineno})") from None
    scope = Scope({node.name for node in module.body if isinstance(node, ast.FunctionDef)}, modules=modules)
    with refusals_as(error):
        walker(scope).walk(module)


def free_names(source: str) -> list[str]:
    """Names a cell reads that it never binds anywhere (a global it needs from elsewhere: ``lstm_cell`` in a
    cell that calls it), in the order first read. A name bound anywhere in the cell counts as its own."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    bound, read = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            read.append((node.lineno, node.col_offset, node.id))
        elif isinstance(node, ast.Name):
            bound.add(node.id)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return [name for name in dict.fromkeys(name for *_, name in sorted(read)) if name not in bound]
