"""Moving a decode step's small arrays between host and device without making the host wait for the device.

`HostCopies.start(arrays)` queues a copy of each device array into pinned host memory and marks the stream;
`read(array)` then waits for that mark only, so the host reads step t's record while the device runs step
t+1's forward, queued after the copies. `upload(x)` puts a host number on the device the same way (a pageable
copy would wait for the whole queue). On a CPU the copies are plain copies: the same code, run synchronously.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

MAX_PENDING = 4096  # arrays: a few steps' records of a batch of 8

class HostCopies:
    """Pending device-to-host copies of one device, by array (kept until read)."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self.cuda = device.type == "cuda"
        self._pending: dict[int, tuple[torch.Tensor, torch.Tensor, Any]] = {}  # id -> (array, copy, event)

    def start(self, arrays: list[torch.Tensor]) -> None:
        """Queue host copies of `arrays` behind the kernels that compute them."""
        if len(self._pending) > MAX_PENDING:  # started and never read (a cancelled step): let them go
            self._pending.clear()
        copies = [(a, self._copy(a)) for a in arrays if id(a) not in self._pending]
        event = torch.cuda.Event() if self.cuda else None
        if event is not None:
            event.record()
        for a, host in copies:
            self._pending[id(a)] = (a, host, event)

    def _copy(self, a: torch.Tensor) -> torch.Tensor:
        host = torch.empty(a.shape, dtype=a.dtype, pin_memory=self.cuda)
        return host.copy_(a.detach(), non_blocking=self.cuda)

    def read(self, a: torch.Tensor) -> np.ndarray:
        """`a` on the host: its queued copy once that is done, else a copy now (which waits for the device)."""
        pending = self._pending.pop(id(a), None)
        if pending is None or pending[0] is not a:
            return a.detach().cpu().numpy()
        _, host, event = pending
        if event is not None:
            event.synchronize()
        return host.numpy()

    def upload(self, x: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
        """A host value (number, list, numpy array) on the device, without waiting for the queue."""
        if isinstance(x, torch.Tensor):
            return x.to(device=self.device, dtype=dtype or x.dtype)
        if torch.compiler.is_compiling():  # traced: a constant made on the device (a CPU node costs the CUDA graph)
            return torch.as_tensor(x, dtype=dtype, device=self.device)
        host = torch.as_tensor(x, dtype=dtype)
        if not self.cuda:
            return host.to(self.device)
        return host.pin_memory().to(self.device, non_blocking=True)
