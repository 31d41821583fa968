"""The SDK's gRPC channels to front ends: one per address, replaced when it sits in
TRANSIENT_FAILURE (after a front end died, gRPC backs off between reconnect attempts and a
call made meanwhile fails at once even if the front end is back; a fresh channel connects
now), with TLS as the connection string says: server-only TLS, trusting the CA of
`ca_file` or else the system's roots; none without it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import grpc
from grpc import aio

from stampsdk import tracing
from stampsdk.errors import InvalidArgument


def channel_options(message_bytes_max: int) -> list[tuple[str, Any]]:
    """The gRPC options of a channel to a front end: messages up to `message_bytes_max`
    both ways, keepalives that notice a dead front end within seconds, reconnect backoff of
    at most 1 s, gRPC's own retries off (the SDK's RetryPolicy decides), and subchannels of
    its own."""
    return [
        ("grpc.max_send_message_length", message_bytes_max),
        ("grpc.max_receive_message_length", message_bytes_max),
        # Notice a dead front end quickly instead of waiting for TCP timeouts.
        ("grpc.keepalive_time_ms", 10_000),
        ("grpc.keepalive_timeout_ms", 5_000),
        ("grpc.initial_reconnect_backoff_ms", 100),
        ("grpc.max_reconnect_backoff_ms", 1_000),
        ("grpc.enable_retries", 0),
        # Each channel its own subchannels: gRPC otherwise shares them process-wide, and a
        # fresh channel would inherit the old one's reconnect backoff.
        ("grpc.use_local_subchannel_pool", 1),
        ("grpc.primary_user_agent", "stampsdk"),
    ]


def tls_credentials(ca_file: str | None) -> grpc.ChannelCredentials:
    """Server-only TLS trusting the CA in `ca_file` (PEM), else the system's roots;
    InvalidArgument if the file cannot be read."""
    roots = None
    if ca_file:
        try:
            roots = Path(ca_file).read_bytes()
        except OSError as exc:
            raise InvalidArgument(f"cannot read the CaFile {ca_file!r}: {exc}") from None
    return grpc.ssl_channel_credentials(root_certificates=roots)


class ChannelCache:
    """One aio channel per front end (module docstring)."""

    def __init__(self, message_bytes_max: int,
                 credentials: grpc.ChannelCredentials | None = None) -> None:
        self.message_bytes_max = message_bytes_max
        self._credentials = credentials
        self._channels: dict[str, aio.Channel] = {}
        self._retired: list[aio.Channel] = []

    def get(self, address: str) -> aio.Channel:
        """The channel to `address`, made on first use and made again when the cached one
        is in TRANSIENT_FAILURE (module docstring); a replaced one stays open until
        `close`, for the calls still using it."""
        channel = self._channels.get(address)
        if channel is not None and channel.get_state(
                try_to_connect=False) == grpc.ChannelConnectivity.TRANSIENT_FAILURE:
            self._retired.append(channel)  # closed with the cache: calls may still use it
            channel = None
        if channel is None:
            options = channel_options(self.message_bytes_max)
            traced = tracing.channel_interceptors()  # None while tracing is off
            channel = (aio.insecure_channel(address, options=options, interceptors=traced)
                       if self._credentials is None
                       else aio.secure_channel(address, self._credentials, options=options,
                                               interceptors=traced))
            self._channels[address] = channel
        return channel

    async def close(self) -> None:
        """Close every channel this cache made (calls still on them fail)."""
        for channel in [*self._channels.values(), *self._retired]:
            await channel.close()
        self._channels.clear()
        self._retired.clear()
