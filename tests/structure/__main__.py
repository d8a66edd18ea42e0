"""``python -m tests.structure [--no-trace] [--json]``: the structure of the core, measured.

Prints the module sizes (non-blank lines, the largest first), how many modules parse
the TOML file, whether the import rules hold, and (unless ``--no-trace``) the project
files whose code runs while one Telegram message goes adapter -> episode file ->
platform, traced in every process.
"""

from __future__ import annotations

import argparse
import json

from tests.structure.rules import MAX_NON_BLANK, module_sizes, toml_loaders, violations


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tests.structure")
    p.add_argument("--no-trace", action="store_true", help="skip the traced run")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    sizes = module_sizes()
    over = {m: n for m, n in sizes.items() if n > MAX_NON_BLANK}
    loaders = toml_loaders()
    broken = violations()
    report: dict[str, object] = {
        "modules": len(sizes), "largest": sorted(sizes.items(), key=lambda kv: -kv[1])[:8],
        "over_400": over, "toml_loaders": loaders, "import_rule_violations": broken,
    }
    if not args.no_trace:
        from tests.structure.trace import traced_files

        per_process = traced_files()
        union = sorted(set().union(*per_process.values()))
        report["message_path_files"] = union
        report["message_path_count"] = len(union)
        report["per_process"] = {k: sorted(v) for k, v in per_process.items()}
    if args.json:
        print(json.dumps(report, indent=2))
        return
    print(f"modules in the four packages: {len(sizes)}")
    print("largest (non-blank lines): " + ", ".join(f"{m} {n}" for m, n in report["largest"]))
    print(f"over {MAX_NON_BLANK}: " + (", ".join(f"{m} ({n})" for m, n in over.items())
                                       or "none"))
    print(f"TOML loaders: {len(loaders)} ({', '.join(loaders)})")
    print("import rules: " + ("hold" if not broken else f"{len(broken)} violations"))
    for line in broken:
        print(f"  {line}")
    if not args.no_trace:
        print(f"files run for one Telegram message (all processes): "
              f"{report['message_path_count']}")
        for f in report["message_path_files"]:  # type: ignore[attr-defined]
            where = [k for k, v in per_process.items() if f in v]
            print(f"  {f}  ({', '.join(where)})")


if __name__ == "__main__":
    main()
