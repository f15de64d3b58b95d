"""Netprofiles as every program reads them: Contiv's bandwidth strings and what a profile
asks of the datapath. Pure: the master checks profiles with it, every agent resolves them
with it."""

from __future__ import annotations

import re

# Contiv's spelling: a number and a unit, "10kbps", "100mbps", "1gbps" (case and a space
# between them do not matter; "bps" alone is bits per second).
_BANDWIDTH = re.compile(r"\s*(\d+)\s*([kmg]?)bps\s*", re.IGNORECASE)
_KBPS = {"": 0.001, "k": 1, "m": 1000, "g": 1_000_000}
MAX_KBPS = 0xFFFF_FFFF  # an OpenFlow meter band's rate is 32 bits
MAX_BURST_KB = 0xFFFF_FFFF // 8  # ... and so is its burst, in kbit
MAX_DSCP = 63


def bandwidth_kbps(value: str) -> int:
    """Contiv's bandwidth string in kbit/s (0: none given, unlimited); ValueError if it is
    not one, is 0, or rounds to less than 1 kbit/s."""
    if not value.strip():
        return 0
    m = _BANDWIDTH.fullmatch(value)
    if m is None:
        raise ValueError(
            f"{value!r} is not a rate; write it as Contiv does: 10kbps, 100mbps, 1gbps"
        )
    kbps = int(m.group(1)) * _KBPS[m.group(2).lower()]
    if kbps != int(kbps):
        raise ValueError(f"{value!r} is not a whole number of kbps (meters count kbit/s)")
    if kbps < 1:
        raise ValueError(f"{value!r} is below the smallest limit, 1kbps")
    if kbps > MAX_KBPS:
        raise ValueError(f"{value!r} is above the largest limit, {MAX_KBPS}kbps")
    return int(kbps)


def spell_kbps(kbps: int) -> str:
    """A rate in Contiv's spelling, in the largest unit that keeps it whole."""
    for unit, scale in (("g", 1_000_000), ("m", 1000)):
        if kbps % scale == 0:
            return f"{kbps // scale}{unit}bps"
    return f"{kbps}kbps"
