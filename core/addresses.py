"""The one check every URL a tenant can set goes through (webhooks, MLflow tracking URIs, `WANDB_BASE_URL`,
...): at creation in the API and again at connect time in the workers, so a tenant cannot make a worker
call the deployment's own network (SSRF).

A URL passes when it is absolute http(s), carries no credentials, has a port other than 0, and every
address its host resolves to is public: IPv4 embedded in an IPv6 address (IPv4-mapped and -compatible,
NAT64, 6to4, Teredo) is unwrapped and must be public too. `KEEL_WEBHOOK_ALLOW_PRIVATE` lifts the
address rule (a deployment whose trackers and receivers live on its own network).
"""

from __future__ import annotations

import ipaddress
import socket
from urllib.parse import SplitResult, urlsplit

from core.config import settings

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.ip_network("64:ff9b::/96")
"""The well-known NAT64 prefix (RFC 6052): the last 32 bits are the IPv4 address it reaches."""
_IPV4_COMPATIBLE = ipaddress.ip_network("::/96")


class UnsafeUrl(ValueError):
    """The URL is malformed, does not resolve, or resolves to an address a tenant's URL may not reach."""


def embedded_ipv4(ip: IPAddress) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address carries (and reaches through a translator), if any."""
    if isinstance(ip, ipaddress.IPv4Address):
        return []
    found = []
    if ip.ipv4_mapped is not None:
        found.append(ip.ipv4_mapped)
    if ip in _NAT64 or (ip in _IPV4_COMPATIBLE and int(ip) > 1):  # (:: and ::1 are not IPv4)
        found.append(ipaddress.IPv4Address(int(ip) & 0xFFFF_FFFF))
    if ip.sixtofour is not None:
        found.append(ip.sixtofour)
    if ip.teredo is not None:
        found.extend(ip.teredo)  # (server, client)
    return found


def _public(ip: IPAddress) -> bool:
    return (ip.is_global and not (ip.is_private or ip.is_reserved or ip.is_multicast or ip.is_loopback
                                  or ip.is_link_local or ip.is_unspecified))


def non_public_reason(address: str) -> str | None:
    """Why `address` (as getaddrinfo gives it) is not public, or None when it is. An IPv4-mapped or NAT64
    address is the IPv4 address it reaches; other IPv6 forms that carry one must be public on both counts."""
    ip = ipaddress.ip_address(address.split("%", 1)[0])
    embedded = embedded_ipv4(ip)
    translated = isinstance(ip, ipaddress.IPv6Address) and (ip.ipv4_mapped is not None or ip in _NAT64)
    for candidate in embedded if translated else (ip, *embedded):
        if not _public(candidate):
            shown = str(candidate) if candidate is ip else f"{candidate} inside {ip}"
            return f"a non-public address ({shown})"
    return None


def url_parts(url: str) -> tuple[SplitResult, int]:
    """`url` split, and its port (the scheme's default when none is given); UnsafeUrl unless it is an
    absolute http(s) URL without credentials and with a valid port. No DNS."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UnsafeUrl("must be an absolute http:// or https:// URL")
    if parts.username or parts.password:
        raise UnsafeUrl("must not carry credentials")
    try:
        port = parts.port
    except ValueError as exc:
        raise UnsafeUrl("has an invalid port") from exc
    if port == 0:
        raise UnsafeUrl("has an invalid port (0)")
    return parts, port or (443 if parts.scheme == "https" else 80)


def check_url(url: str, *, allow_private: bool | None = None) -> tuple[str, str, int]:
    """The URL's (host, first allowed address, port); UnsafeUrl when a tenant may not use it. Resolves the
    host (blocking DNS): a caller that connects should connect to the address returned (DNS rebinding).
    `allow_private` None: `KEEL_WEBHOOK_ALLOW_PRIVATE` decides (remote environments pass False: their
    own allow-list, `core.environments`, is the only way past the rule)."""
    parts, port = url_parts(url)
    host = parts.hostname
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError, ValueError) as exc:
        raise UnsafeUrl(f"host {host!r} does not resolve") from exc
    addresses = [info[4][0] for info in infos]
    if not addresses:
        raise UnsafeUrl(f"host {host!r} does not resolve")
    if not (settings.WEBHOOK_ALLOW_PRIVATE if allow_private is None else allow_private):
        for address in addresses:  # every address: a resolver may hand out any of them
            reason = non_public_reason(address)
            if reason is not None:
                raise UnsafeUrl(f"host {host!r} resolves to {reason}; the deployment allows public addresses only")
    return host, addresses[0], port
