"""Does the local model call the memory tools reliably? The evidence behind giving it none.

    python -m bench.local_tools [--model qwen2.5-coder-0.5b-instruct] [--mode api|schema]
        [--set tune|held]

Offers the two memory tools (``remember`` and ``search_memory``, their schemas as
``workers.tools`` describes them) through llama.cpp's OpenAI-style tool calling (the
model's own chat template, ``use_jinja``) on the same in-process server the local model
uses, and scores each case: a case that should save a fact passes when the reply is one
``remember`` call whose ``fact`` contains the expected words; a case that needs a lookup,
one ``search_memory`` call whose ``query`` contains them; a plain question passes when no
tool is called. A call counts only when llama.cpp parsed it as one (``tool_calls``); a
call the model wrote as bare JSON text instead is counted apart ("as text"), since the
turn path would show it to the user as the answer. Prints each case and the totals with
``/proc/loadavg``.

``--mode schema`` asks instead for one constrained decision: llama.cpp turns a JSON
schema (``response_format``) into a grammar, so the reply can only be
``{"tool": "remember" | "search_memory" | "none", "argument": "..."}``; a case passes
when the tool is the right one (``none`` for a plain question) and the argument holds
the expected words. ``--set held`` runs the held-out cases (``HELD``), which no prompt
was tuned on; ``tune`` (``CASES``) is the set the prompts were written against.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from workers.local_model import LocalChat, find_gguf

TOOLS = [
    {"type": "function", "function": {
        "name": "remember",
        "description": "Remember a durable fact for later conversations in this chat.",
        "parameters": {"type": "object", "properties": {
            "fact": {"type": "string", "description": "one self-contained sentence"},
            "about": {"type": "string", "description": "who or what the fact is about"},
        }, "required": ["fact"]}}},
    {"type": "function", "function": {
        "name": "search_memory",
        "description": "Search this chat's long-term memory (earlier conversations and "
                       "remembered facts).",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string", "description": "words to look for"},
        }, "required": ["query"]}}},
]
SYSTEM = ("You are PyNanoClaw, a helpful assistant in a chat. Use remember(fact) for durable "
          "facts worth keeping (names, preferences, dates). Use search_memory(query) to look "
          "up what this chat told you before. Otherwise answer briefly.")
#: (what the user says, the tool that should be called or None, words its argument needs)
CASES: list[tuple[str, str | None, str]] = [
    ("Please remember that my dog is called Rex.", "remember", "rex"),
    ("Remember this: our team meeting is every Tuesday at 10.", "remember", "tuesday"),
    ("Note for later: I am allergic to peanuts.", "remember", "peanut"),
    ("Keep in mind that the wifi password changes every month.", "remember", "wifi"),
    ("My sister's birthday is on 4 May, please don't forget it.", "remember", "may"),
    ("What did I tell you about my dog last week?", "search_memory", "dog"),
    ("Do you remember when our team meeting is?", "search_memory", "meeting"),
    ("Look up what I said about my allergies.", "search_memory", "allerg"),
    ("What is the capital of France?", None, ""),
    ("How many days are there in a week?", None, ""),
]


#: Held out: written before any run of ``--mode schema``, never tuned on.
HELD: list[tuple[str, str | None, str]] = [
    ("I moved to Berlin last year, keep that in mind.", "remember", "berlin"),
    ("Please note: the office closes early on Fridays.", "remember", "friday"),
    ("Don't forget that Maria is our new designer.", "remember", "maria"),
    ("Save this: my car is a blue Toyota.", "remember", "toyota"),
    ("What was the name of my dog again?", "search_memory", "dog"),
    ("Can you check what I said about the office hours?", "search_memory", "office"),
    ("Did I ever tell you which city I moved to?", "search_memory", "city"),
    ("What is 7 times 8?", None, ""),
    ("Translate 'good morning' into Spanish.", None, ""),
    ("Who wrote Hamlet?", None, ""),
]
SCHEMA_SYSTEM = ("You are PyNanoClaw, a helpful assistant in a chat. Decide what to do with "
                 "the user's message.\n"
                 "- The user tells you something to keep: tool remember, argument the fact "
                 "as one sentence.\n"
                 "- The user asks about something they told you before: tool search_memory, "
                 "argument the topic's key words.\n"
                 "- Anything else: tool none, argument your short answer.\n"
                 "Examples:\n"
                 "Remember that my cat is called Tom. -> "
                 '{"tool": "remember", "argument": "My cat is called Tom."}\n'
                 "What did I tell you about my car? -> "
                 '{"tool": "search_memory", "argument": "car"}\n'
                 'What is 2 plus 2? -> {"tool": "none", "argument": "4"}')
DECISION = {"type": "json_schema", "json_schema": {"name": "decision", "schema": {
    "type": "object",
    "properties": {"tool": {"type": "string", "enum": ["remember", "search_memory", "none"]},
                   "argument": {"type": "string"}},
    "required": ["tool", "argument"]}}}


def decided(out: dict[str, Any], tool: str | None, words: str) -> tuple[bool, str]:
    """(right, what was seen) for a ``--mode schema`` reply."""
    content = (out.get("choices") or [{}])[0].get("message", {}).get("content") or ""
    try:
        call = json.loads(content)
    except ValueError:
        return False, repr(content[:80])
    shown = f'{call.get("tool")}({call.get("argument")!r})'
    if tool is None:
        return call.get("tool") == "none", shown
    return right(str(call.get("tool")), {"a": call.get("argument")}, tool, words), shown


def text_call(content: str) -> dict[str, Any] | None:
    """A call written as JSON text (``{"name": ..., "arguments": {...}}``), if it is one."""
    try:
        call = json.loads(content.strip().removeprefix("```json").strip("`\n "))
    except ValueError:
        return None
    return call if isinstance(call, dict) and "name" in call else None


def right(name: str, arguments: Any, tool: str, words: str) -> bool:
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except ValueError:
            return False
    values = arguments.values() if isinstance(arguments, dict) else []
    return name == tool and words in " ".join(str(v) for v in values).lower()


def score(out: dict[str, Any], tool: str | None, words: str) -> tuple[bool, bool, str]:
    """(right through the API, right as JSON text, what was seen)."""
    message = (out.get("choices") or [{}])[0].get("message", {})
    calls = message.get("tool_calls") or []
    content = message.get("content") or ""
    seen = [f'{c["function"]["name"]}({c["function"]["arguments"]})' for c in calls]
    shown = "; ".join(seen) or repr(content[:80])
    as_text = text_call(content)
    if tool is None:
        return not calls, not calls and as_text is None, shown
    api = len(calls) == 1 and right(calls[0]["function"]["name"],
                                    calls[0]["function"]["arguments"], tool, words)
    text = as_text is not None and right(str(as_text.get("name")),
                                         as_text.get("arguments"), tool, words)
    return api, text, shown


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
    parser.add_argument("--mode", choices=("api", "schema"), default="api")
    parser.add_argument("--set", choices=("tune", "held"), default="tune")
    args = parser.parse_args(argv)
    engine = LocalChat(find_gguf(args.model), max_tokens=80, temperature=0.0)
    load_start = Path("/proc/loadavg").read_text().strip()
    cases = HELD if args.set == "held" else CASES
    if args.mode == "schema":
        return run_schema(engine, args.model, args.set, cases, load_start)
    passed = written = 0
    for say, tool, words in cases:
        out = engine.request({
            "messages": [{"role": "system", "content": SYSTEM},
                         {"role": "user", "content": say}],
            "tools": TOOLS, "max_tokens": 80, "temperature": 0.0,
        })
        ok, text_ok, shown = score(out, tool, words)
        passed += ok
        written += text_ok or ok
        mark = "pass" if ok else "text" if text_ok else "FAIL"
        print(f"{mark} want {tool or 'no tool':13} {say[:48]!r} -> {shown}", flush=True)
    print(f"model {args.model}: {passed}/{len(cases)} right through the tool API, "
          f"{written}/{len(cases)} counting calls written as JSON text; load "
          f"{load_start} -> {Path('/proc/loadavg').read_text().strip()}")
    return 0


def run_schema(engine: LocalChat, model: str, which: str,
               cases: list[tuple[str, str | None, str]], load_start: str) -> int:
    passed = 0
    for say, tool, words in cases:
        out = engine.request({
            "messages": [{"role": "system", "content": SCHEMA_SYSTEM},
                         {"role": "user", "content": say}],
            "response_format": DECISION, "max_tokens": 80, "temperature": 0.0,
        })
        ok, shown = decided(out, tool, words)
        passed += ok
        print(f"{'pass' if ok else 'FAIL'} want {tool or 'none':13} {say[:48]!r} -> {shown}",
              flush=True)
    print(f"model {model}, schema-constrained, {which} set: {passed}/{len(cases)} right; load "
          f"{load_start} -> {Path('/proc/loadavg').read_text().strip()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
