"""``python -m gateway.toolhost``: the tool host process (``pynanoclaw tools``)."""

from __future__ import annotations

from gateway.toolhost.cli import main

main()
