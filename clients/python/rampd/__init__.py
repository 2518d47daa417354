"""A client for rampd, speaking its protocol (PROTOCOL.md) over the daemon's Unix socket.

    import rampd
    with rampd.connect() as r:
        r.play("/srv/music/alarm.flac", stream="alarm", fade_in=30)

Standard library only. See clients/python/README.md.
"""

from ._client import (
    PROTOCOL_VERSION,
    Client,
    CommandError,
    ConnectionClosed,
    Error,
    Record,
    command,
    connect,
    default_socket_path,
)
from ._timeline import TimelineError, TimelineOutcome, find_rampctl

__all__ = [
    "PROTOCOL_VERSION",
    "Client",
    "CommandError",
    "ConnectionClosed",
    "Error",
    "Record",
    "TimelineError",
    "TimelineOutcome",
    "command",
    "connect",
    "default_socket_path",
    "find_rampctl",
]
__version__ = "0.2.0"
