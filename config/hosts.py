"""Whether a host a process is told to listen on, or a request names, is this machine's loopback.

Below both the CLI (`baton serve` refuses a token-less API off loopback) and the web app (which answers a
token-less request only for a loopback `Host`): one answer for both.
"""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    """True for `localhost` and loopback addresses (127.0.0.0/8, ::1); False for anything reachable
    from elsewhere, including 0.0.0.0 / :: (every interface) and names we cannot judge."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False
