"""``pynanoclaw memory ls|show|search|reindex|consolidate GROUP``.

A typer sub-app (``memory_app``) the gateway CLI mounts with
``app.add_typer(memory_app, name="memory")``; it also runs on its own with
``python -m memory_store.cli``. The data dir comes from ``--data-dir``, else from the
config file's ``data_dir`` (``--config``, ``$PYNANOCLAW_CONFIG`` or
``data/pynanoclaw.toml``; relative to the file), else ``./data``. The backend comes from
``--backend``, else the config's ``[memory] backend``, else ``file``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from memory_store.base import BaseMemory
from memory_store.errors import InvalidGroupKey, InvalidMemoryId, MemoryNotFound
from memory_store.factory import BACKENDS, open_memory

CONFIG_ENV = "PYNANOCLAW_CONFIG"
DEFAULT_CONFIG = Path("data/pynanoclaw.toml")

memory_app = typer.Typer(name="memory", help="Inspect and maintain a group's memory.",
                         no_args_is_help=True, add_completion=False,
                         pretty_exceptions_enable=False)
console = Console()

GroupArg = Annotated[str, typer.Argument(help="group key, e.g. telegram:-100123")]
DataOpt = Annotated[Path | None, typer.Option("--data-dir", help="data directory",
                                              show_default=False)]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="config file",
                                                show_default=False)]
BackendOpt = Annotated[str | None, typer.Option("--backend", help="file | vector | hybrid",
                                                show_default=False)]


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


def _settings(data_dir: Path | None, config: Path | None,
              backend: str | None) -> tuple[Path, str]:
    raw: dict[str, Any] = {}
    path = config or (Path(os.environ[CONFIG_ENV]) if os.environ.get(CONFIG_ENV) else None)
    if path is None and DEFAULT_CONFIG.is_file():
        path = DEFAULT_CONFIG
    if path is not None:
        try:
            raw = tomllib.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise _fail(f"{path}: config file not found; pass --data-dir instead") from None
        except tomllib.TOMLDecodeError as err:
            raise _fail(f"{path}: not valid TOML: {err}") from None
    if data_dir is None:
        configured = Path(str(raw.get("data_dir", "./data"))).expanduser()
        if not configured.is_absolute() and path is not None:
            configured = path.parent / configured
        data_dir = configured
    memory = raw.get("memory")
    chosen = backend or (memory.get("backend") if isinstance(memory, dict) else None) or "file"
    if chosen not in BACKENDS:
        raise _fail(f"memory backend must be one of {', '.join(BACKENDS)}, got {chosen!r}")
    return data_dir.resolve(), str(chosen)


@contextlib.contextmanager
def _opened(group: str, data_dir: Path | None, config: Path | None,
            backend: str | None) -> Iterator[BaseMemory]:
    root, chosen = _settings(data_dir, config, backend)
    try:
        mem = open_memory(root, group, chosen)
    except InvalidGroupKey as err:
        raise _fail(str(err)) from None
    try:
        yield mem
    except (MemoryNotFound, InvalidMemoryId, ValueError) as err:
        raise _fail(f"{type(err).__name__}: {err}") from None
    finally:
        mem.close()


def _first_line(text: str, width: int = 70) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line if len(line) <= width else line[: width - 1] + "…"


def _bar(label: str) -> Progress:
    return Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=console, transient=False)


@memory_app.command("ls")
def ls(group: GroupArg, kind: Annotated[str | None, typer.Option(help="only this kind")] = None,
       all_: Annotated[bool, typer.Option("--all", help="include superseded")] = False,
       data_dir: DataOpt = None, config: ConfigOpt = None, backend: BackendOpt = None) -> None:
    """List a group's memories, oldest first."""
    filters: dict[str, Any] = {"include_superseded": all_}
    if kind:
        filters["kind"] = kind
    with _opened(group, data_dir, config, backend or "file") as mem:
        records = mem.records(filters)
    table = Table("id", "kind", "created", "trust", "content")
    for rec in records:
        mark = " (superseded)" if rec.valid_to is not None else ""
        table.add_row(rec.id, rec.kind + mark, rec.created.strftime("%Y-%m-%d %H:%M"),
                      f"{rec.trust:.2f}", _first_line(rec.content))
    console.print(table)
    console.print(f"{len(records)} memories")


@memory_app.command("show")
def show(group: GroupArg, memory_id: Annotated[str, typer.Argument(help="memory id")],
         data_dir: DataOpt = None, config: ConfigOpt = None) -> None:
    """Print one memory: its front matter fields and body."""
    with _opened(group, data_dir, config, "file") as mem:
        rec = mem.read_sync(memory_id)
    for key in ("id", "kind", "source", "created", "updated", "trust", "valid_from",
                "valid_to", "tags"):
        value = getattr(rec, key)
        if value not in (None, ()):
            console.print(f"[bold]{key}[/]: {value}", highlight=False)
    for key, value in rec.metadata.items():
        console.print(f"[bold]{key}[/]: {value}", highlight=False)
    console.print()
    console.print(rec.content, markup=False, highlight=False)


@memory_app.command("search")
def search(group: GroupArg, query: Annotated[str, typer.Argument(help="what to look for")],
           k: Annotated[int, typer.Option("-k", help="number of results")] = 10,
           kind: Annotated[str | None, typer.Option(help="only this kind")] = None,
           min_trust: Annotated[float | None, typer.Option(help="minimum trust")] = None,
           data_dir: DataOpt = None, config: ConfigOpt = None,
           backend: BackendOpt = None) -> None:
    """Search a group's memory with the configured backend."""
    filters: dict[str, Any] = {}
    if kind:
        filters["kind"] = kind
    if min_trust is not None:
        filters["min_trust"] = min_trust
    with _opened(group, data_dir, config, backend) as mem:
        hits = asyncio.run(mem.search(query, k=k, filters=filters))
        table = Table("score", "id", "kind", "created", "content", title=f"{mem.backend} search")
    for h in hits:
        table.add_row(f"{h.score:.4f}", h.id, h.kind, h.created.strftime("%Y-%m-%d"),
                      _first_line(h.content))
    console.print(table)


@memory_app.command("reindex")
def reindex(group: GroupArg, data_dir: DataOpt = None, config: ConfigOpt = None,
            backend: BackendOpt = None) -> None:
    """Rebuild the group's .index/ from its files."""
    with _opened(group, data_dir, config, backend) as mem, _bar("reindex") as bar:
        task = bar.add_task("reindex", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        count = mem.reindex(progress)
        mem.flush()  # vectors too, not left to a background thread about to stop
    console.print(f"indexed {count} memories ({mem.backend})")


@memory_app.command("consolidate")
def consolidate(group: GroupArg, data_dir: DataOpt = None, config: ConfigOpt = None,
                backend: BackendOpt = None) -> None:
    """Merge duplicates, supersede contradictions, fold entity facts."""
    from memory_store.consolidate import consolidate as run

    with _opened(group, data_dir, config, backend) as mem, _bar("consolidate") as bar:
        task = bar.add_task("consolidate", total=None)

        def progress(done: int, total: int) -> None:
            bar.update(task, completed=done, total=total)

        changed = run(mem, progress)
    console.print(f"{changed} records changed")


if __name__ == "__main__":  # pragma: no cover
    memory_app()
