"""What is known of a device from its name: the interconnect bandwidth a collective can reach."""

from __future__ import annotations

# Achievable intra-node NVLink bus bandwidth (nccl-tests all-reduce busbw), GB/s, by device-name substring.
# PCIe parts and unknown devices are absent on purpose: rules and tables say "unknown" for them.
LINK_BUSBW_GBPS = {"H200": 360.0, "H100": 360.0, "A100": 240.0}


def link_busbw_gbps(device_name: str | None) -> float | None:
    name = (device_name or "").upper()
    if "PCIE" in name:
        return None
    return next((v for k, v in LINK_BUSBW_GBPS.items() if k in name), None)
