"""Domain exceptions raised by services and selectors. Plain Python: no HTTP or DRF imports, so
any layer may raise them; memoryhub.core.errors turns them into API responses."""


class ResourceNotFound(Exception):
    """A missing or foreign id: the API answers 404 either way."""


class InvalidInput(ValueError):
    """Input a service refuses; the API answers 400 with `field`'s message."""

    def __init__(self, *, field: str, message: str, code: str = "invalid") -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.code = code
