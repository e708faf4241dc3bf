"""What the CUDA driver reports, independently of lamina (shared by tests/conftest.py and
tests/native/test_info.py): the number of devices the driver API sees, honouring
CUDA_VISIBLE_DEVICES like the runtime lamina links."""

from __future__ import annotations

import ctypes
import ctypes.util


def driver_device_count() -> int:
    """Devices the CUDA driver (libcuda) sees; 0 without a driver or without a device."""
    names = ["libcuda.so.1", "libcuda.so", ctypes.util.find_library("cuda"), "nvcuda.dll"]
    for name in filter(None, names):
        try:
            cuda = ctypes.CDLL(name)
        except OSError:
            continue
        if cuda.cuInit(0) != 0:  # CUDA_ERROR_NO_DEVICE, no usable driver, ...
            return 0
        n = ctypes.c_int(0)
        return n.value if cuda.cuDeviceGetCount(ctypes.byref(n)) == 0 else 0
    return 0
