"""Rank 1, device: what a device is (``spec``: DeviceSpec), the host CPU (``host``), the
NVIDIA facts and reference devices (``nvidia``) and measured ceilings (``calibration``).
Imports util only.
"""
