"""Planting a bug in the real source text of a module (issue 14 item 5).

A planted bug must test the code as it is today. A mutated copy of a function keeps testing the
copy after the original changes; a `SourcePatch` is instead an exact edit of the module's real
source file, checked every time it is planted: `old` must occur exactly once in the file and the
edit must change the text, else `PlantError` names the module and the text. A kernel edit that
removes the text therefore fails loudly instead of silently testing stale code.

There are two ways to plant patches:

- **In process**, `planted(patches)`, a context manager undone on exit (also on an exception).
  For each patch it finds the top-level definition of the module's source that contains `old`
  (a function with its decorators, or a top-level assignment such as a table), applies the edit
  to that definition's text only and executes it in the real module's namespace. The new
  function's globals are the module's, and its decorators (for the kernel, the icontract
  `@transition`) are applied exactly as they were to the original. Then every place that looks
  the old object up at call time is re-bound to the new one, found by identity: module
  attributes of every module in `scope` (by default the patched module's top-level package, so
  `mark_lost` imported by two kernel modules is re-bound in both), and the values of module-level
  dicts and mapping proxies there, such as `kernel.transitions.TRANSITIONS`, the command ->
  function table that `apply` dispatches through (a mapping proxy is replaced by a copy, and
  every module attribute holding it is re-bound).
- **At load**, `install_at_load(patches)`, an import hook that edits a module's source text
  before the module is first executed, so a whole process (for example a pytest run with
  `-p model_tests.quality.plant_plugin` and `QL3_PLANT=<name>`) runs against the mutated code.
  It refuses a module that is already imported: planting then would leave the already imported
  objects unpatched.

This module imports nothing from the code it plants into, so that it can be loaded before it.
"""

from __future__ import annotations
import __future__

import ast
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import CodeType, MappingProxyType, ModuleType
from unittest import mock

__all__ = [
    "Definition",
    "LoadPlanter",
    "PlantError",
    "SourcePatch",
    "definition_of",
    "install_at_load",
    "modules_in",
    "planted",
    "rebound",
    "source_path",
]


class PlantError(Exception):
    """A patch that cannot be planted: its text is missing, repeated or unchanged, it is not
    inside one top-level definition, or its module was imported before a load-time plant."""


def source_path(module: str) -> Path:
    """The real source file of `module` (a dotted name), found without importing it when it is
    not imported yet: importing a package to ask where its submodule lives would execute the
    package's `__init__`, which may import the very module a load-time plant must reach first."""
    loaded = sys.modules.get(module)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None)
        if origin is None:
            raise PlantError(f"{module}: the module has no source file")
        return Path(origin)
    parts = module.split(".")
    for entry in sys.path:
        base = Path(entry or ".").joinpath(*parts)
        for candidate in (base.with_suffix(".py"), base / "__init__.py"):
            if candidate.is_file():
                return candidate
    raise PlantError(f"{module}: no source file on sys.path")


def read_source(module: str) -> str:
    return source_path(module).read_text(encoding="utf-8")


@dataclass(frozen=True, slots=True)
class SourcePatch:
    """Replace the exact text `old` by `new` in the real source file of `module` (a dotted
    module name, so that naming a patch imports nothing)."""

    module: str
    old: str
    new: str

    def apply_to(self, text: str, *, where: str = "source") -> str:
        """`text` with `old` replaced by `new`; `old` must occur exactly once and the result
        must differ from `text`."""
        count = text.count(self.old)
        if count != 1:
            raise PlantError(
                f"{self.module}: the patch text occurs {count} times in its {where}, "
                f"not exactly once: {self.old!r}"
            )
        out = text.replace(self.old, self.new)
        if out == text:
            raise PlantError(f"{self.module}: the patch changes nothing: {self.old!r}")
        return out

    def check(self) -> None:
        """Raise `PlantError` unless the patch still applies to the current source file."""
        self.apply_to(read_source(self.module))


# -- in process -------------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Definition:
    """A top-level definition of a module's source: a function (with its decorators) or an
    assignment to one name. `text` is its whole lines, `first_line` is 1-based."""

    module: str
    name: str
    first_line: int
    last_line: int
    text: str
    future_flags: int  # the module's `from __future__` compiler flags


def _future_flags(tree: ast.Module) -> int:
    flags = 0
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.module == "__future__":
            for alias in node.names:
                flags |= getattr(__future__, alias.name).compiler_flag
    return flags


def _defined_name(node: ast.stmt) -> str | None:
    if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
        return node.name
    if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
        return node.target.id
    if (
        isinstance(node, ast.Assign)
        and len(node.targets) == 1
        and isinstance(node.targets[0], ast.Name)
    ):
        return node.targets[0].id
    return None


def definition_of(patch: SourcePatch) -> Definition:
    """The top-level definition of the patch's module that contains its `old` text."""
    source = read_source(patch.module)
    patch.apply_to(source)  # exactly once, and a change
    start = source.index(patch.old)
    first = source.count("\n", 0, start) + 1
    # The line of the text's last character (a trailing newline ends its own line).
    last = source.count("\n", 0, start + len(patch.old) - 1) + 1
    tree = ast.parse(source)
    for node in tree.body:
        decorators = getattr(node, "decorator_list", [])
        top = min([node.lineno, *(d.lineno for d in decorators)])
        end = node.end_lineno if node.end_lineno is not None else node.lineno
        if not top <= first <= last <= end:
            continue
        name = _defined_name(node)
        if name is None:
            raise PlantError(
                f"{patch.module}: the patch text is in a top-level {type(node).__name__} at "
                f"line {top}, not in a function or an assignment to one name: {patch.old!r}"
            )
        lines = source.splitlines(keepends=True)[top - 1 : end]
        return Definition(patch.module, name, top, end, "".join(lines), _future_flags(tree))
    raise PlantError(
        f"{patch.module}: the patch text is not inside one top-level definition: {patch.old!r}"
    )


def modules_in(scope: str) -> list[ModuleType]:
    """The imported modules named `scope` or under it (`kernel`, `kernel.transitions`, ...)."""
    return [
        module
        for name, module in list(sys.modules.items())
        if isinstance(module, ModuleType) and (name == scope or name.startswith(f"{scope}."))
    ]


_KEEP = object()  # "not one of the replaced objects" (a replacement may be None or falsy)


def _replaced(value: object, pairs: dict[int, tuple[object, object]]) -> object:
    pair = pairs.get(id(value))
    return pair[1] if pair is not None and pair[0] is value else _KEEP


def _changed_values(
    mapping: Mapping[object, object], pairs: dict[int, tuple[object, object]]
) -> dict[object, object]:
    changes = {key: _replaced(value, pairs) for key, value in mapping.items()}
    return {key: new for key, new in changes.items() if new is not _KEEP}


@contextmanager
def rebound(pairs: Iterable[tuple[object, object]], scope: str) -> Iterator[None]:
    """Re-bind every reference to each `old` object (by identity) to its `new` one, in the
    modules named `scope` or under it: module attributes, values of module-level dicts (changed
    in place) and of module-level mapping proxies (replaced by a changed copy, re-bound
    wherever a module attribute holds the proxy). Everything is restored on exit."""
    table = {id(old): (old, new) for old, new in pairs if old is not new}
    with ExitStack() as stack:
        modules = modules_in(scope)
        proxies: dict[int, tuple[object, object]] = {}
        patched_dicts: set[int] = set()
        for module in modules:
            for name, value in list(vars(module).items()):
                new = _replaced(value, table)
                if new is not _KEEP:
                    stack.enter_context(mock.patch.object(module, name, new))
                elif isinstance(value, dict) and id(value) not in patched_dicts:
                    changes = _changed_values(value, table)
                    if changes:
                        patched_dicts.add(id(value))
                        stack.enter_context(mock.patch.dict(value, changes))
                elif isinstance(value, MappingProxyType) and id(value) not in proxies:
                    changes = _changed_values(value, table)
                    if changes:
                        proxies[id(value)] = (value, MappingProxyType({**value, **changes}))
        for module in modules:
            for name, value in list(vars(module).items()):
                new = _replaced(value, proxies)
                if new is not _KEEP:
                    stack.enter_context(mock.patch.object(module, name, new))
        yield


def _execute(definition: Definition, text: str) -> object:
    """Execute the edited definition in the real module's namespace and return what it binds,
    without binding it there (the re-binding does that, undoably). The code keeps the original
    file name and line numbers, so tracebacks and icontract's messages point at the real file."""
    module = sys.modules[definition.module]
    padded = "\n" * (definition.first_line - 1) + text
    code = compile(padded, source_path(definition.module), "exec", definition.future_flags, True)
    scratch: dict[str, object] = {}
    # Globals are the module's own dict: the new function resolves its helpers, tables and
    # decorators exactly as the original does. The binding goes to `scratch`.
    exec(code, vars(module), scratch)  # noqa: S102 - executing the module's own edited source
    if definition.name not in scratch:
        raise PlantError(f"{definition.module}: the edited {definition.name} binds nothing")
    return scratch[definition.name]


@contextmanager
def planted(patches: Sequence[SourcePatch], *, scope: str | None = None) -> Iterator[None]:
    """Plant `patches` in the imported modules they name for the duration of the block.

    Patches of the same definition are applied together to its text, in order. `scope` is the
    package whose modules are searched for references to the replaced objects (default: the
    first patch's top-level package)."""
    groups: dict[tuple[str, str], tuple[Definition, list[SourcePatch]]] = {}
    for patch in patches:
        importlib.import_module(patch.module)
        definition = definition_of(patch)
        key = (definition.module, definition.name)
        groups.setdefault(key, (definition, []))[1].append(patch)
    if scope is None and patches:
        scope = patches[0].module.split(".")[0]
    with ExitStack() as stack:
        for definition, group in groups.values():
            text = definition.text
            for patch in group:
                text = patch.apply_to(text, where=f"definition of {definition.name}")
            module = sys.modules[definition.module]
            old = vars(module)[definition.name]
            new = _execute(definition, text)
            stack.enter_context(rebound([(old, new)], scope or definition.module))
        yield


# -- at load ----------------------------------------------------------------------------------
class _PlantingLoader(importlib.machinery.SourceFileLoader):
    """Loads a module from its source file with the patches applied; never from or into the
    bytecode cache (a cached original, or a cached mutant, would defeat the check)."""

    def __init__(
        self, fullname: str, path: str, patches: Sequence[SourcePatch], planter: LoadPlanter
    ) -> None:
        super().__init__(fullname, path)
        self._patches = tuple(patches)
        self._planter = planter

    def get_code(self, fullname: str) -> CodeType:
        path = self.get_filename(fullname)
        text = importlib.util.decode_source(self.get_data(path))
        for patch in self._patches:
            text = patch.apply_to(text)
        self._planter.loaded.append(fullname)
        return compile(text, path, "exec", dont_inherit=True)


class LoadPlanter(importlib.abc.MetaPathFinder):
    """The import hook of `install_at_load` (first on `sys.meta_path`). `loaded` lists the
    modules it has planted so far: a run in which a planted module was never imported tested
    nothing."""

    def __init__(self, patches: Sequence[SourcePatch]) -> None:
        self.patches = tuple(patches)
        self.loaded: list[str] = []

    @property
    def modules(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(p.module for p in self.patches))

    def find_spec(
        self, fullname: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> importlib.machinery.ModuleSpec | None:
        patches = [p for p in self.patches if p.module == fullname]
        if not patches:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None:
            raise PlantError(f"{fullname}: the module to plant cannot be found")
        loader = spec.loader
        if spec.origin is None or not isinstance(loader, importlib.machinery.SourceFileLoader):
            raise PlantError(f"{fullname}: not loaded from a source file ({loader!r})")
        return importlib.util.spec_from_file_location(
            fullname,
            spec.origin,
            loader=_PlantingLoader(fullname, spec.origin, patches, self),
            submodule_search_locations=spec.submodule_search_locations,
        )

    def uninstall(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)


def install_at_load(patches: Sequence[SourcePatch]) -> LoadPlanter:
    """Install an import hook that plants `patches` when their modules are first imported.

    Refuses (PlantError) a module that is already imported, and checks every patch against
    the current source file now, so a stale plant fails before anything runs."""
    if not patches:
        raise PlantError("nothing to plant")
    planter = LoadPlanter(tuple(patches))
    for module in planter.modules:
        if module in sys.modules:
            raise PlantError(
                f"{module}: already imported, so a load-time plant cannot reach it; install "
                "the plant before anything imports the module"
            )
    for patch in planter.patches:
        patch.check()
    sys.meta_path.insert(0, planter)
    return planter
