"""First-contact templates for a group's core memory files."""

from __future__ import annotations

CLAUDE_MD = """\
# Group memory

Core memory for this conversation. The assistant reads this file on every turn, so keep
it short: standing instructions, the group's purpose, facts that always matter.
You can edit it by hand; the next turn uses your edit.

## About this conversation

## Standing instructions
"""

USER_PROFILE_MD = """\
# People

Who the assistant is talking to: names, how they like to be addressed, preferences.
Only facts confirmed by the person themselves or an admin belong here.
"""
