"""auto's time rules live in one place: headswap.auto.budget. Every other module of auto/ asks the Budget (or the
arms' Share of it) a question and compares the answer with what it needs; none does arithmetic on what is left, keeps
a deadline, applies the one-third cap or sets what the budget keeps back. A step's own duration (perf_counter around
a fit, a slice's end less its start) is a measurement, not time left, and is not counted."""

from __future__ import annotations

import ast
from pathlib import Path

AUTO = Path(__file__).resolve().parents[1] / "src" / "headswap" / "auto"
HOME = "budget.py"
# A Budget's (or the arms' Share's) own numbers, on an object held under one of these names: arithmetic on them is a
# time rule too, and so is setting them.
HOLDERS = {"budget", "share"}
FIELDS = {"seconds", "ship", "finish", "margin", "started", "cheap_from"}


def readings(home: Path) -> set[str]:
    """What reads the time: the clock, and every method of the classes in `home` that answers seconds (returns a
    float: left, spare, room, cap, ...), wherever it is called."""
    tree = ast.parse(home.read_text(encoding="utf-8"))
    return {"clock"} | {f.name for c in tree.body if isinstance(c, ast.ClassDef) for f in c.body
                        if isinstance(f, ast.FunctionDef) and f.returns is not None and ast.unparse(f.returns) == "float"}


def _held_by(node: ast.AST) -> str | None:
    """The last name of `node` (budget for self.climb.budget), or None."""
    return node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None


class _TimeArithmetic(ast.NodeVisitor):
    def __init__(self, readings: set[str]):
        self.readings = readings
        self.found: list[tuple[int, str]] = []
        self.scopes: list[set[str]] = [set()]      # per function: names bound to a reading

    def reading(self, node: ast.AST) -> bool:
        """Whether `node` is what the budget says of the time: a reading call, a budget's field, or a name bound to
        either in this function."""
        if isinstance(node, ast.Call):
            return _held_by(node.func) in self.readings
        if isinstance(node, ast.Attribute):
            return node.attr in FIELDS and _held_by(node.value) in HOLDERS
        if isinstance(node, ast.Name):
            return node.id in self.scopes[-1] or node.id == "budget_seconds"
        return False

    def say(self, node: ast.AST, what: str) -> None:
        self.found.append((node.lineno, what))

    def visit_FunctionDef(self, node):
        self.scopes.append(set())
        self.generic_visit(node)
        self.scopes.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_Assign(self, node):
        if self.reading(node.value):
            for target in node.targets:
                for name in ast.walk(target):
                    if isinstance(name, ast.Name):
                        self.scopes[-1].add(name.id)
        for target in node.targets:
            if isinstance(target, ast.Attribute) and _held_by(target.value) in HOLDERS:
                self.say(node, f"sets {ast.unparse(target)} (what the budget keeps is set by the budget)")
        self.generic_visit(node)

    def visit_AugAssign(self, node):
        if self.reading(node.target) or self.reading(node.value):
            self.say(node, f"time arithmetic: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_BinOp(self, node):
        if self.reading(node.left) or self.reading(node.right):
            self.say(node, f"time arithmetic: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_UnaryOp(self, node):
        if isinstance(node.op, ast.USub) and self.reading(node.operand):
            self.say(node, f"time arithmetic: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_Call(self, node):
        if _held_by(node.func) in ("min", "max") and any(self.reading(a) for a in node.args):
            self.say(node, f"time arithmetic: {ast.unparse(node)}")
        self.generic_visit(node)

    def visit_Name(self, node):
        if node.id == "deadline":
            self.say(node, "a deadline of its own")
        elif node.id == "CAP" and isinstance(node.ctx, ast.Load):
            self.say(node, "the cap's CAP (Budget.cap)")

    def visit_Attribute(self, node):
        if node.attr == "deadline":
            self.say(node, "a deadline of its own")
        self.generic_visit(node)

    def visit_ImportFrom(self, node):
        if any(alias.name == "CAP" for alias in node.names):
            self.say(node, "the cap's CAP (Budget.cap)")


def time_arithmetic(folder: Path, home: str = HOME) -> list[str]:
    """'file:line: what' for each time rule in `folder`'s modules outside `home`."""
    found, said = [], readings(folder / home)
    for path in sorted(folder.glob("*.py")):
        if path.name == home:
            continue
        visitor = _TimeArithmetic(said)
        visitor.visit(ast.parse(path.read_text(encoding="utf-8"), str(path)))
        found += [f"{path.name}:{line}: {what}" for line, what in sorted(visitor.found)]
    return found


def test_time_left_is_counted_in_budget_py_alone():
    assert (AUTO / HOME).is_file()
    assert time_arithmetic(AUTO) == [], "ask headswap.auto.budget (add the rule there)"


def test_time_arithmetic_outside_the_budget_is_found(tmp_path):
    (tmp_path / "budget.py").write_text(
        "class Budget:\n"
        "    def spare(self) -> float: ...\n"
        "    def room(self, reserve: float) -> float: ...\n"
        "    def probe_room(self, guess: float) -> tuple[float, float]: ...\n"
        "class Share:\n"
        "    def left(self) -> float:\n"
        "        return self.deadline - self.budget.clock()\n"
        "    def whole_epochs(self, epoch: float) -> int: ...\n")
    assert readings(tmp_path / "budget.py") == {"clock", "spare", "room", "left"}
    (tmp_path / "rules.py").write_text(
        "from headswap.auto.budget import CAP\n"                         # 1
        "def run(self, est, planned):\n"
        "    if self.budget.spare() <= 0 or est > self.budget.room(3.0):\n"   # 3: comparing an answer: fine
        "        return None\n"
        "    left = self.share.left()\n"
        "    took = self.end - self.share.whole_epochs(2.0)\n"          # 6: not seconds: fine
        "    limit = min(planned, left)\n"                              # 7
        "    half = self.budget.room(est) / 2\n"                        # 8
        "    self.budget.ship = est\n"                                  # 9
        "    cap = CAP * self.budget.seconds\n"                         # 10
        "    return limit, half, cap, self.deadline - clock(), took\n"  # 11
        "def other(left):\n"
        "    return left - 1.0\n")                                      # 13: a parameter, not a reading: fine
    assert time_arithmetic(tmp_path) == [
        "rules.py:1: the cap's CAP (Budget.cap)",
        "rules.py:7: time arithmetic: min(planned, left)",
        "rules.py:8: time arithmetic: self.budget.room(est) / 2",
        "rules.py:9: sets self.budget.ship (what the budget keeps is set by the budget)",
        "rules.py:10: the cap's CAP (Budget.cap)",
        "rules.py:10: time arithmetic: CAP * self.budget.seconds",
        "rules.py:11: a deadline of its own",
        "rules.py:11: time arithmetic: self.deadline - clock()"]


MAX_FUNCTION_LINES = 80     # a function over this reads as several steps: name each


def long_functions(folder: Path, most: int = MAX_FUNCTION_LINES) -> list[str]:
    """'file:function: lines' for each function (or method) of `folder`'s modules over `most` lines."""
    found = []
    for path in sorted(folder.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and \
                    (n := node.end_lineno - node.lineno + 1) > most:
                found.append(f"{path.name}:{node.name}: {n}")
    return found


def test_no_function_in_auto_is_over_80_lines(tmp_path):
    assert long_functions(AUTO) == [], "split it into the steps it takes"
    (tmp_path / "long.py").write_text("class A:\n    def f(self):\n" + "        x = 1\n" * 80 + "def g():\n    pass\n")
    assert long_functions(tmp_path) == ["long.py:f: 81"]
