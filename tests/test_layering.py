"""The layering of ARCHITECTURE.md, read from every module's imports with ``ast``.

Every ``import`` of the packages and benchmarks is read (at module level and
inside functions, so imports hidden in a function count too) and checked:

* **layers**: ``costmodel`` and ``launch`` import no other ddltune package;
  ``calibration`` imports only ``costmodel`` and ``launch``; ``tuner`` imports
  ``costmodel``, ``launch`` and ``calibration``; ``tuner.cli`` imports those and
  ``tuner`` (not the benchmarks); nothing but ``tuner.cli`` itself (and the
  tests) imports ``tuner.cli``. ``importlib.import_module("m")`` and
  ``__import__("m")`` with a literal name count as imports of ``m``;
* **public faces**: a private module ``P._m`` (a path component starting with
  ``_``) is imported only from inside package ``P``; ``tuner.cli`` and the
  benchmarks import only public faces (no private component at all);
* **no cycles** between modules (a package's ``__init__`` counts as a module:
  ``tuner._report`` importing ``tuner`` while ``tuner`` imports it is a cycle);
* **optional dependencies** (``matplotlib``, ``jinja2``, ``optuna``: the extras
  ``report`` and ``bench``) are imported only inside functions, so the core
  API and ``ddltune predict`` run without them.

Known exceptions would be listed, by name, in :data:`KNOWN` (each entry must
still occur: a stale entry fails); there are none.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("costmodel", "launch", "calibration", "tuner")
#: What each layer may import (besides itself). ``tuner.cli`` is checked apart.
ALLOWED = {
    "costmodel": set(),
    "launch": set(),
    "calibration": {"costmodel", "launch"},
    "tuner": {"costmodel", "launch", "calibration"},
    "tuner.cli": {"costmodel", "launch", "calibration", "tuner"},  # public faces only
    "benchmarks": set(PACKAGES),
}
#: Calls that import the module named by their first (string literal) argument.
IMPORT_CALLS = {"import_module", "__import__"}
OPTIONAL = {"matplotlib": "report", "jinja2": "report", "optuna": "bench"}

#: Violations in other branches' files, being fixed there (issue 11). The lead
#: empties this after merging; an entry that no longer occurs fails the test.
KNOWN: set[str] = set()


# --------------------------------------------------------------------------- reading


def project_modules(root: Path = ROOT) -> dict[str, Path]:
    """``{dotted name: path}`` of every module of the packages and the benchmarks."""
    out = {}
    for top in (*PACKAGES, "benchmarks"):
        for path in sorted((root / top).rglob("*.py")):
            parts = list(path.relative_to(root).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _is_package(name: str, sources: dict[str, str], paths: dict[str, Path]) -> bool:
    p = paths.get(name)
    return p is not None and p.name == "__init__.py"


def imports_of(name: str, source: str, is_package: bool, known: set[str]) -> list[tuple]:
    """``[(target module, line, at_module_level)]`` for every import in ``source``.

    ``from X import y`` counts as an import of ``X.y`` when that is a module
    of ``known``; relative imports are resolved against ``name``.
    """
    tree = ast.parse(source)
    package = name if is_package else name.rpartition(".")[0]
    out = []

    def visit(node, top_level: bool):
        for child in ast.iter_child_nodes(node):
            inside = top_level and not isinstance(
                child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda
            )
            if isinstance(child, ast.Import):
                for a in child.names:
                    out.append((a.name, child.lineno, top_level))
            elif isinstance(child, ast.ImportFrom):
                mod = resolve(child.module, child.level)
                for a in child.names:
                    from_import(mod, a.name, child.lineno, top_level)
            elif (dynamic := dynamic_import(child)) is not None:
                level = len(dynamic) - len(dynamic.lstrip("."))
                target = resolve(dynamic[level:], level) if level else dynamic
                out.append((target, child.lineno, top_level))
            elif top_level and (lazy := lazy_exports(child)) is not None:
                # a lazy public face (PEP 562): ``_EXPORTS = {name: module}`` is
                # read as ``from module import name`` at module level
                for attr, target in lazy:
                    level = len(target) - len(target.lstrip("."))
                    from_import(resolve(target[level:], level), attr, child.lineno, True)
            visit(child, inside)

    def resolve(module: str | None, level: int) -> str:
        if not level:
            return module or ""
        base = package.split(".")
        base = base[: len(base) - (level - 1)]
        return ".".join(base + ([module] if module else []))

    def from_import(mod: str, attr: str, line: int, top_level: bool):
        sub = f"{mod}.{attr}"
        if sub in known:
            out.append((sub, line, top_level))
        elif attr.startswith("_") and not attr.startswith("__"):
            out.append((sub, line, top_level))  # a private name
        else:
            out.append((mod, line, top_level))

    visit(tree, True)
    return out


def dynamic_import(node) -> str | None:
    """The module a call ``importlib.import_module("m")`` / ``__import__("m")`` imports.

    ``None`` when ``node`` is no such call or its first argument is not a string
    literal (a computed name, as in the lazy faces' ``__getattr__``, is checked
    through their ``_EXPORTS`` tables instead). A leading dot is relative to the
    importing module's package, as ``import_module(".m", __name__)`` resolves it.
    """
    if not isinstance(node, ast.Call) or not node.args:
        return None
    f = node.func
    name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
    arg = node.args[0]
    if name in IMPORT_CALLS and isinstance(arg, ast.Constant) and isinstance(arg.value, str):
        return arg.value
    return None


def lazy_exports(node) -> list[tuple[str, str]] | None:
    """``[(name, module)]`` of a lazy package face's ``_EXPORTS = {"name": "module"}``.

    ``None`` when ``node`` is not such an assignment. The module is written as
    in an import (``"._format"``, ``"calibration"``); every key and value must
    be a string literal, so that this reading sees every import the face makes.
    """
    if isinstance(node, ast.Assign) and len(node.targets) == 1:
        target = node.targets[0]
    elif isinstance(node, ast.AnnAssign) and node.value is not None:
        target = node.target
    else:
        return None
    if not (isinstance(target, ast.Name) and target.id == "_EXPORTS"):
        return None
    if not isinstance(node.value, ast.Dict):
        raise ValueError(f"line {node.lineno}: _EXPORTS must be a dict literal")
    pairs = []
    for k, v in zip(node.value.keys, node.value.values, strict=True):
        if not all(isinstance(x, ast.Constant) and isinstance(x.value, str) for x in (k, v)):
            raise ValueError(f"line {node.lineno}: _EXPORTS keys and values must be strings")
        pairs.append((k.value, v.value))
    return pairs


# --------------------------------------------------------------------------- rules


def _layer(module: str) -> str:
    if module == "tuner.cli" or module.startswith("tuner.cli."):
        return "tuner.cli"
    return module.split(".")[0]


def _private_owner(target: str) -> str | None:
    """The package owning the first private component of ``target`` (None: all public)."""
    parts = target.split(".")
    for i, p in enumerate(parts[1:], start=1):
        if p.startswith("_") and not p.startswith("__"):
            return ".".join(parts[:i])
    return None


def check(sources: dict[str, str], paths: dict[str, Path] | None = None) -> list[str]:
    """Every layering violation of the modules ``{dotted name: source}``, as text.

    Each is ``"<kind>: <importer> -> <target> (line N)"``, kind one of
    ``upward``, ``private``, ``cycle`` or ``optional``.
    """
    paths = paths or {}
    known = set(sources)
    problems = []
    edges: dict[str, set[str]] = {m: set() for m in sources}
    for name, src in sources.items():
        is_pkg = _is_package(name, sources, paths) or name in PACKAGES
        layer = _layer(name)
        for target, line, top_level in imports_of(name, src, is_pkg, known):
            root = target.split(".")[0]
            if root in OPTIONAL and top_level:
                problems.append(
                    f"optional: {name} -> {target} (line {line}): import it inside the "
                    f"function that needs it (extra {OPTIONAL[root]!r})"
                )
            if root not in (*PACKAGES, "benchmarks"):
                continue
            # the module itself, or the nearest project module above it
            hit = target
            while hit and hit not in known:
                hit = hit.rpartition(".")[0]
            if hit and hit != name:
                edges[name].add(hit)
            tlayer = _layer(target)
            if tlayer == "tuner.cli" and layer != "tuner.cli":
                problems.append(f"upward: {name} -> {target} (line {line})")
            elif layer == "tuner.cli":
                if tlayer != "tuner.cli" and root not in ALLOWED["tuner.cli"]:
                    problems.append(f"upward: {name} -> {target} (line {line})")
                elif tlayer != "tuner.cli" and _private_owner(target):
                    problems.append(f"private: {name} -> {target} (line {line})")
                continue
            elif root != layer.split(".")[0] and root not in ALLOWED[layer]:
                problems.append(f"upward: {name} -> {target} (line {line})")
            owner = _private_owner(target)
            if owner is None:
                continue
            if layer == "benchmarks" or not (name == owner or name.startswith(owner + ".")):
                problems.append(f"private: {name} -> {target} (line {line})")
    problems += [f"cycle: {', '.join(c)}" for c in _cycles(edges)]
    return list(dict.fromkeys(problems))


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def strong(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))
    for v in sorted(edges):
        if v not in index:
            strong(v)
    return sorted(out)


# --------------------------------------------------------------------------- the tree


def _tree_problems() -> list[str]:
    paths = project_modules()
    sources = {m: p.read_text(encoding="utf-8") for m, p in paths.items()}
    return check(sources, paths)


def test_the_tree_follows_the_layering():
    problems = set(_tree_problems())
    new = sorted(problems - KNOWN)
    assert not new, "layering violations:\n" + "\n".join(new)
    stale = sorted(KNOWN - problems)
    assert not stale, "fixed, remove from KNOWN:\n" + "\n".join(stale)


def test_every_package_and_the_cli_are_read():
    mods = project_modules()
    for m in (*PACKAGES, "tuner.cli", "tuner.cli._predict", "benchmarks.tuner_speed"):
        assert m in mods, m
    # imports inside functions are read too
    found = imports_of("tuner.cli._x", "def f():\n    from tuner import recommend\n", False, set())
    assert found == [("tuner", 2, False)]
    # so are the tables of the lazy public faces (PEP 562), as module-level imports
    known = set(mods)
    for pkg in ("costmodel", "calibration", "tuner"):
        found = imports_of(pkg, mods[pkg].read_text(encoding="utf-8"), True, known)
        assert any(t.startswith(pkg + "._") and top for t, _, top in found), pkg
    found = imports_of("tuner", '_EXPORTS = {"x": "calibration", "y": "._format"}\n', True, known)
    assert found == [("calibration", 1, True), ("tuner._format", 1, True)]


# --------------------------------------------------------------------------- positive controls


@pytest.mark.parametrize(
    ("sources", "expected"),
    [
        ({"costmodel._bad": "from calibration import calibrate\n"}, "upward: costmodel._bad"),
        ({"launch._bad": "def f():\n    import tuner\n"}, "upward: launch._bad -> tuner"),
        ({"calibration._bad": "import tuner._search\n"}, "upward: calibration._bad"),
        ({"tuner._bad": "from tuner.cli import main\n"}, "upward: tuner._bad -> tuner.cli"),
        (
            {"tuner.cli._bad": "from .._report import build_report\n", "tuner._report": ""},
            "private: tuner.cli._bad -> tuner._report",
        ),
        (
            {"tuner._bad": "from calibration._records import read_records\n"},
            "private: tuner._bad -> calibration._records",
        ),
        (
            {
                "costmodel.architectures._bad": "from ..collectives._base import Terms\n",
                "costmodel.collectives._base": "",
            },
            "private: costmodel.architectures._bad -> costmodel.collectives._base",
        ),
        ({"benchmarks.bad": "from tuner._search import evaluate\n"}, "private: benchmarks.bad"),
        (
            {
                "calibration._a": "def f():\n    from ._b import x\n",
                "calibration._b": "from ._a import y\n",
            },
            "cycle: calibration._a, calibration._b",
        ),
        ({"tuner._bad": "import matplotlib.pyplot as plt\n"}, "optional: tuner._bad"),
        # the CLI is a layer too: it may not reach into the benchmarks
        ({"tuner.cli._bad": "import benchmarks.tuner_speed\n"}, "upward: tuner.cli._bad"),
        (
            {"tuner.cli._bad": "def f():\n    from benchmarks import cli_latency\n"},
            "upward: tuner.cli._bad -> benchmarks",
        ),
        # imports by name, through importlib or __import__, at any depth
        (
            {"costmodel._bad": "import importlib\nimportlib.import_module('calibration')\n"},
            "upward: costmodel._bad -> calibration (line 2)",
        ),
        (
            {"launch._bad": "def f():\n    return __import__('tuner._search')\n"},
            "upward: launch._bad -> tuner._search (line 2)",
        ),
        (
            {
                "tuner.cli._bad": "from importlib import import_module as im\nx = 1\n"
                "def f():\n    import importlib\n    importlib.import_module('tuner._report')\n"
            },
            "private: tuner.cli._bad -> tuner._report (line 5)",
        ),  # fmt: skip
        (
            {
                "calibration._a": "import importlib\nimportlib.import_module('._b', __name__)\n",
                "calibration._b": "import calibration._a\n",
            },
            "cycle: calibration._a, calibration._b",
        ),  # fmt: skip
        # a lazy public face's table counts as its imports
        ({"costmodel": '_EXPORTS = {"x": "calibration"}\n'}, "upward: costmodel -> calibration"),
        (
            {"tuner": '_EXPORTS = {"read_records": "calibration._records"}\n'},
            "private: tuner -> calibration._records",
        ),
        (
            {"tuner": '_EXPORTS = {"f": "._a"}\n', "tuner._a": "import tuner\n"},
            "cycle: tuner, tuner._a",
        ),
    ],
)
def test_a_bad_import_is_found(sources, expected):
    problems = check(sources)
    assert any(p.startswith(expected) for p in problems), problems


def test_allowed_imports_pass():
    sources = {
        "costmodel.collectives._ps": "from .._params import ClusterParams\n",  # its parent's
        "costmodel._params": "",
        "calibration._fit": "from costmodel import preset\nimport launch\n",
        "tuner._x": "from calibration import Profile\n"
        "def f():\n    import matplotlib\n",  # optional: inside a function
        "tuner.cli._y": "from tuner import recommend\nfrom ._common import fail\n",
        "tuner.cli._common": "",
        "benchmarks.ok": "from tuner import evaluate\n",
        "calibration": '_EXPORTS = {"calibrate": "._fit", "preset": "costmodel"}\n',
    }
    assert check(sources) == []


# --------------------------------------------------------------------------- JAX settings


def config_updates(source: str) -> list[int]:
    """Lines of every ``jax.config.update(...)`` call in ``source``.

    Also ``config.update(...)`` where ``config`` was imported from jax
    (``from jax import config``); a dict that happens to be called ``config``
    is not JAX's.
    """
    tree = ast.parse(source)
    jax_config_names = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "jax"
        for alias in node.names
        if alias.name == "config"
    }
    lines = []
    for node in ast.walk(tree):
        if not (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr == "update"
        ):
            continue
        target = node.func.value
        is_jax_config = (
            isinstance(target, ast.Attribute)
            and target.attr == "config"
            and isinstance(target.value, ast.Name)
            and target.value.id == "jax"
        ) or (isinstance(target, ast.Name) and target.id in jax_config_names)
        if is_jax_config:
            lines.append(node.lineno)
    return lines


def test_jax_settings_are_chosen_once_at_the_cli_entry():
    # library code never calls jax.config.update; the CLI does it in one place
    # (benchmarks are entry points of their own)
    found = {
        m: config_updates(p.read_text(encoding="utf-8"))
        for m, p in project_modules().items()
        if not m.startswith("benchmarks.")
    }
    assert {m: v for m, v in found.items() if v} == {
        "tuner.cli._common": found["tuner.cli._common"]
    }
    assert config_updates("import jax\njax.config.update('jax_enable_x64', True)\n") == [2]
    assert config_updates("from jax import config as c\nc.update('jax_enable_x64', True)\n") == [2]
    assert config_updates("config = {}\nconfig.update(a=1)\n") == []


# --------------------------------------------------------------------------- optional extras


def test_core_api_and_predict_run_without_the_optional_extras(tmp_path):
    # A fresh interpreter in which matplotlib, jinja2 and optuna cannot be imported
    # (None in sys.modules makes 'import x' raise ImportError): the Python API
    # imports and 'ddltune predict' works; 'ddltune report' says which extra.
    code = (
        "import sys\n"
        "for m in ('matplotlib', 'jinja2', 'optuna'): sys.modules[m] = None\n"
        "import costmodel, launch, calibration, tuner\n"
        "from tuner.cli import main\n"
        "rc = main(['predict', '--preset', 'ethernet-10g', '--model', 'resnet18',\n"
        "           '--arch', 'ring', '--workers', '2', '--json'])\n"
        "assert rc == 0, rc\n"
        "rc = main(['report', '--profile', 'p.json', '--model', 'resnet18', '-o', 'out'])\n"
        "assert rc == 1, rc\n"
    )
    env = dict(os.environ, PYTHONPATH=str(ROOT), DDLTUNE_NO_COMPILATION_CACHE="1")
    res = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        cwd=tmp_path,
    )
    assert res.returncode == 0, res.stderr
    assert '"rows"' in res.stdout
    err = res.stderr.strip().splitlines()
    assert err == [
        "ddltune report: error: ddltune report needs the 'report' extra (matplotlib, jinja2 "
        "are not installed): pip install 'ddltune[report]'"
    ], res.stderr


@pytest.mark.parametrize("command", ["report", "run"])
def test_a_missing_extra_is_one_line_naming_it(monkeypatch, capsys, tmp_path, command):
    from tuner.cli import main

    monkeypatch.setitem(sys.modules, "jinja2", None)  # as if not installed
    argv = [command, "-o", str(tmp_path / "out")]
    argv += ["--profile", str(tmp_path / "p.json"), "--model", "resnet18"] * (command == "report")
    assert main(argv) == 1
    out, err = capsys.readouterr()
    assert out == ""
    assert err.strip() == (
        f"ddltune {command}: error: ddltune {command} needs the 'report' extra (jinja2 is not "
        "installed): pip install 'ddltune[report]'"
    )
    assert not (tmp_path / "out").exists()  # nothing started


def test_pyproject_extras():
    import tomllib

    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    core = " ".join(meta["dependencies"])
    extras = meta["optional-dependencies"]
    for mod, extra in OPTIONAL.items():
        assert mod not in core, mod
        assert any(d.startswith(mod) for d in extras[extra]), (mod, extra)
    # the README's test command installs [test]: it must bring report and bench along
    test = " ".join(extras["test"])
    assert "ddltune[report,bench]" in test.replace(" ", "")
