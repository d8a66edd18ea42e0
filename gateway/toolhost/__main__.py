"""``python -m gateway.toolhost``: the tool host process (``pynanoclaw tools`` execs it)."""

from gateway.toolhost.cli import host_app

if __name__ == "__main__":
    host_app(prog_name="python -m gateway.toolhost")
