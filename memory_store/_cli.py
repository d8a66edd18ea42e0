"""``pynanoclaw memory ls|show|search|reindex|consolidate GROUP``.

``build_memory_app(resolve)`` makes the typer sub-app; the gateway CLI mounts one with a
``resolve`` that reads the config file (``--config``) through ``gateway.config``, so the
memory CLI reads no configuration itself (``memory_store`` imports nothing of the
project). ``memory_app`` is the stand-alone one (``python -m memory_store._cli``): data
dir from ``--data-dir`` (default ``./data``), backend from ``--backend`` (default
``file``). ``--data-dir`` and ``--backend`` override what ``resolve`` says.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from memory_store._errors import InvalidGroupKey, InvalidMemoryId, MemoryNotFound

if TYPE_CHECKING:
    from rich.console import Console

    from memory_store._base import BaseMemory

#: the caller's reading of its configuration: (config path or None) -> (data dir, backend,
#: the backend's options: the hybrid ranking weights the bot searches with); raises
#: ``ValueError`` with a message to print when the configuration is broken
Resolver = Callable[[Path | None], tuple[Path, str, dict[str, Any]]]



@functools.cache
def _console() -> Console:
    # rich is imported on first output, not with the CLI: `pynanoclaw chat` and the bot
    # mount this app and never print through it (a tenth of their start)
    from rich.console import Console

    return Console()

GroupArg = Annotated[str, typer.Argument(help="group key, e.g. telegram:-100123")]
DataOpt = Annotated[Path | None, typer.Option("--data-dir", help="data directory",
                                              show_default=False)]
ConfigOpt = Annotated[Path | None, typer.Option("--config", "-c", help="config file",
                                                show_default=False)]
BackendOpt = Annotated[str | None, typer.Option("--backend", help="file | vector | hybrid",
                                                show_default=False)]


def _fail(message: str) -> typer.Exit:
    typer.echo(message if message.startswith("error: ") else f"error: {message}", err=True)
    return typer.Exit(2)


def _settings(resolve: Resolver | None, data_dir: Path | None, config: Path | None,
              backend: str | None) -> tuple[Path, str, dict[str, Any]]:
    root, chosen = Path("./data"), "file"
    options: dict[str, Any] = {}
    # an explicit --data-dir without --config needs no config file
    if resolve is not None and (config is not None or data_dir is None):
        try:
            root, chosen, options = resolve(config)
        except ValueError as err:
            raise _fail(str(err)) from None
    elif config is not None:
        raise _fail("--config needs `pynanoclaw memory` (this stand-alone CLI reads no "
                    "config file); pass --data-dir and --backend instead")
    root = data_dir if data_dir is not None else root
    if backend and backend != chosen:
        chosen, options = backend, {}  # the configured options are the configured backend's
    from memory_store._factory import BACKENDS  # the backends load the group files

    if chosen not in BACKENDS:
        raise _fail(f"memory backend must be one of {', '.join(BACKENDS)}, got {chosen!r}")
    return root.resolve(), chosen, options


@contextlib.contextmanager
def _opened(resolve: Resolver | None, group: str, data_dir: Path | None, config: Path | None,
            backend: str | None) -> Iterator[BaseMemory]:
    from memory_store._factory import open_memory

    root, chosen, options = _settings(resolve, data_dir, config, backend)
    try:
        mem = open_memory(root, group, chosen, **options)
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


@contextlib.contextmanager
def _bar(label: str) -> Iterator[Callable[[int, int], None]]:
    """A progress bar for ``label``, as the ``(done, total)`` callback that moves it."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    with Progress(TextColumn(label), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=_console(), transient=False) as bar:
        task = bar.add_task(label, total=None)
        yield lambda done, total: bar.update(task, completed=done, total=total)


def build_memory_app(resolve: Resolver | None = None) -> typer.Typer:
    """The ``memory`` sub-app; ``resolve`` supplies the data dir, backend and options."""
    memory_app = typer.Typer(name="memory", help="Inspect and maintain a group's memory.",
                             no_args_is_help=True, add_completion=False,
                             pretty_exceptions_enable=False)

    @memory_app.command("ls")
    def ls(group: GroupArg, kind: Annotated[str | None, typer.Option(help="only this kind")] = None,
           all_: Annotated[bool, typer.Option("--all", help="include superseded")] = False,
           data_dir: DataOpt = None, config: ConfigOpt = None, backend: BackendOpt = None) -> None:
        """List a group's memories, oldest first."""
        filters: dict[str, Any] = {"include_superseded": all_}
        if kind:
            filters["kind"] = kind
        with _opened(resolve, group, data_dir, config, backend or "file") as mem:
            records = mem.records(filters)
        from rich.table import Table

        table = Table("id", "kind", "created", "trust", "content")
        for rec in records:
            mark = " (superseded)" if rec.valid_to is not None else ""
            table.add_row(rec.id, rec.kind + mark, rec.created.strftime("%Y-%m-%d %H:%M"),
                          f"{rec.trust:.2f}", _first_line(rec.content))
        _console().print(table)
        _console().print(f"{len(records)} memories")


    @memory_app.command("show")
    def show(group: GroupArg, memory_id: Annotated[str, typer.Argument(help="memory id")],
             data_dir: DataOpt = None, config: ConfigOpt = None) -> None:
        """Print one memory: its front matter fields and body."""
        with _opened(resolve, group, data_dir, config, "file") as mem:
            rec = mem.read_sync(memory_id)
        for key in ("id", "kind", "source", "created", "updated", "trust", "valid_from",
                    "valid_to", "tags"):
            value = getattr(rec, key)
            if value not in (None, ()):
                _console().print(f"[bold]{key}[/]: {value}", highlight=False)
        for key, value in rec.metadata.items():
            _console().print(f"[bold]{key}[/]: {value}", highlight=False)
        _console().print()
        _console().print(rec.content, markup=False, highlight=False)


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
        with _opened(resolve, group, data_dir, config, backend) as mem:
            hits = asyncio.run(mem.search(query, k=k, filters=filters))
            from rich.table import Table

            table = Table("score", "id", "kind", "created", "content",
                          title=f"{mem.backend} search")
        for h in hits:
            table.add_row(f"{h.score:.4f}", h.id, h.kind, h.created.strftime("%Y-%m-%d"),
                          _first_line(h.content))
        _console().print(table)


    @memory_app.command("reindex")
    def reindex(group: GroupArg, data_dir: DataOpt = None, config: ConfigOpt = None,
                backend: BackendOpt = None) -> None:
        """Rebuild the group's .index/ from its files."""
        with _opened(resolve, group, data_dir, config, backend) as mem, \
                _bar("reindex") as progress:
            count = mem.reindex(progress)
            mem.flush()  # vectors too, not left to a background thread about to stop
        _console().print(f"indexed {count} memories ({mem.backend})")


    @memory_app.command("consolidate")
    def consolidate(group: GroupArg, data_dir: DataOpt = None, config: ConfigOpt = None,
                    backend: BackendOpt = None) -> None:
        """Merge duplicates, supersede contradictions, fold entity facts."""
        from memory_store.maintenance._consolidate import consolidate as run

        with _opened(resolve, group, data_dir, config, backend) as mem, \
                _bar("consolidate") as progress:
            changed = run(mem, progress)
        _console().print(f"{changed} records changed")

    return memory_app


memory_app = build_memory_app()


if __name__ == "__main__":  # pragma: no cover
    memory_app()
