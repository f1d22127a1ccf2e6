"""Rank 1, device: what a device is (``spec``: DeviceSpec, the host CPU, the
reference devices), its measured ceilings (``calibration``) and the NVIDIA facts
(``nvidia``). Imports util only.
"""
