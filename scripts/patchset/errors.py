"""One exception type for every refusal, so the CLI can print exactly one line and exit non-zero."""


class PatchsetError(Exception):
    """A refusal or failure the user can act on; its message is a single line."""

    exit_code = 1

    def __init__(self, message: str) -> None:
        super().__init__(" ".join(message.split()))


class LockedError(PatchsetError):
    """Another patchset process holds the checkout's lock."""

    exit_code = 3
