"""WhatsApp Business Cloud API adapter (pywa)."""

from channels.whatsapp.channel import WhatsAppChannel

__all__ = ["WhatsAppChannel"]
