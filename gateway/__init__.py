"""The always-on process (``app.py``) and its command (``cli.py``), in rooms by concern:
``config/`` and ``queue/`` (the contract with the workers), ``intake/`` (a message on its
way in), ``outgoing/`` (a reply on its way out), ``operations/`` (running and operating
the bot), ``media/``, ``tasks/``, ``toolhost/``."""
