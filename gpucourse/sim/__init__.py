"""Teaching models of GPU hardware: what the course computes where it cannot measure.

* :mod:`.occupancy`: blocks per SM, active warps and the limiting resource of a launch;
* :mod:`.memory`: 32-byte sectors per warp request, efficiency, shared-memory bank conflicts;
* :mod:`.simt`: what a divergent branch costs a warp;
* :mod:`.tracer`: runs a real numba-cuda kernel in the simulator and applies those models to
  what each warp actually did; :mod:`.observe` carries the counts to the autograder.

Every number from here is *modelled*, never measured: label it so.
"""

from .memory import bank_conflict_degree, lines_per_request, load_efficiency, sectors_per_request, touched_units, warp_addresses
from .observe import KernelCalls, absorb, observing, open_kinds, record_kernel_calls, recording
from .occupancy import LIMITERS, Occupancy, occupancy, occupancy_by_block_size
from .simt import active_masks, simt_efficiency, warp_cycles
from .tracer import Request, Trace, trace

__all__ = [
    "KernelCalls", "LIMITERS", "Occupancy", "Request", "Trace", "absorb", "active_masks", "bank_conflict_degree",
    "lines_per_request", "load_efficiency", "observing", "occupancy", "occupancy_by_block_size", "open_kinds",
    "record_kernel_calls", "recording", "sectors_per_request", "simt_efficiency", "touched_units", "trace",
    "warp_addresses", "warp_cycles",
]
