"""Domain exceptions raised by services and selectors. Plain Python: no HTTP or DRF imports, so
any layer may raise them; memoryhub.core.errors turns them into API responses."""


class ResourceNotFound(Exception):
    """A missing or foreign id: the API answers 404 either way."""
