"""MemoryHub: a self-hosted memory service for chat bots and AI agents."""

from memoryhub.celery import app as celery_app

__all__ = ["celery_app"]
