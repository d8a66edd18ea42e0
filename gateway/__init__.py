"""The always-on process: config, routing, inbox, outbox, webhooks, CLI."""
