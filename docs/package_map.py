"""Draws docs/img/package-map.png: headswap's families (its sub-packages and the modules loose at its root) in
floors, each above every family it imports, with an arrow where one imports another (an arrow that a longer way
implies is left out); read from the code's imports (inside functions too), nothing run. A `__main__` entry is
left out of the floors: it only starts the CLI.

    python docs/package_map.py            # from the repository root; prints the floors too
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "headswap"
OUT = ROOT / "docs" / "img" / "package-map.png"


def family(module: str) -> str | None:
    """headswap.x.y -> x (a sub-package) or the loose module's name; None outside the package or for the face."""
    parts = module.split(".")
    if parts[0] != "headswap" or len(parts) < 2:
        return None
    if (PACKAGE / parts[1]).is_dir():
        return parts[1]
    return parts[1] if (PACKAGE / f"{parts[1]}.py").is_file() else None    # a name from the face (__version__)


def imports() -> dict[str, set[str]]:
    """family -> the families it imports: the module graph tests/test_structure.py checks, one level up."""
    sys.path.insert(0, str(ROOT / "tests"))
    from test_structure import import_graph

    edges: dict[str, set[str]] = {}
    for module, targets in import_graph(PACKAGE).items():
        own = family(module)
        if own is None or module.endswith(".__main__"):
            continue
        edges.setdefault(own, set()).update(f for t in targets if (f := family(t)) not in (None, own))
    return edges


def floors(edges: dict[str, set[str]]) -> list[list[str]]:
    """Families in floors, the ground first: each one floor above the highest family it imports."""
    level: dict[str, int] = {}

    def height(f: str, seen: tuple = ()) -> int:
        if f not in level:
            if f in seen:
                raise SystemExit(f"families import one another in a circle: {' -> '.join(seen + (f,))}")
            level[f] = 1 + max((height(g, seen + (f,)) for g in edges.get(f, ())), default=-1)
        return level[f]
    for f in edges:
        height(f)
    out = [[] for _ in range(max(level.values()) + 1)]
    for f in sorted(level):
        out[level[f]].append(f)
    return out


def reduced(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The arrows no longer way implies (f imports g, and f reaches g through another family too: not drawn)."""
    def reach(f: str) -> set[str]:
        seen, todo = set(), list(edges.get(f, ()))
        while todo:
            g = todo.pop()
            if g not in seen:
                seen.add(g)
                todo.extend(edges.get(g, ()))
        return seen
    return {f: {g for g in gs if not any(g in reach(h) for h in gs - {g})} for f, gs in edges.items()}


def draw(edges, rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    from matplotlib import pyplot as plt
    width = max(len(r) for r in rows)
    fig, ax = plt.subplots(figsize=(1.7 * width + 1, 0.9 * len(rows) + 0.6))
    where = {}
    for y, row in enumerate(rows):
        for i, f in enumerate(row):
            where[f] = ((i + 0.5) * width / len(row), y)
    for f, targets in edges.items():
        for g in targets:
            (x0, y0), (x1, y1) = where[f], where[g]
            ax.annotate("", xy=(x1, y1 + 0.18), xytext=(x0, y0 - 0.18),
                        arrowprops=dict(arrowstyle="->", color="#9aa5b1", lw=0.6, shrinkA=0, shrinkB=0))
    for f, (x, y) in where.items():
        loose = not (PACKAGE / f).is_dir()
        ax.text(x, y, f + (".py" if loose else "/"), ha="center", va="center", fontsize=9,
                bbox=dict(boxstyle="round,pad=0.35", fc="#ffffff" if loose else "#dce9f5", ec="#3b5b7a", lw=0.8))
    ax.set_xlim(-0.2, width + 0.2)
    ax.set_ylim(-0.6, len(rows) - 0.4)
    ax.axis("off")
    ax.set_title("headswap's families: each imports only those on lower floors\n"
                 "(an arrow a longer way implies is not drawn)", fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main() -> None:
    edges = imports()
    rows = floors(edges)
    for n, row in reversed(list(enumerate(rows, 1))):
        print(f"floor {n:2}: {', '.join(row)}")
    draw(reduced(edges), rows, Path(sys.argv[1]) if len(sys.argv) > 1 else OUT)


if __name__ == "__main__":
    main()
