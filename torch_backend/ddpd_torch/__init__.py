"""A torch.distributed backend, "ddpd", on ddpd's shared-memory collectives.

    import ddpd_torch  # registers "ddpd"
    torch.distributed.init_process_group("ddpd")  # or "cpu:ddpd"

Each process group takes the rule of ddpd's `--transport auto`: shared memory when every rank
of the group maps one segment (one host, a shared /dev/shm), else Gloo, with the reason logged
once (by the group's rank 0). DDPD_TORCH_TRANSPORT=shm makes shm a requirement (an error names
why it is not possible); =gloo skips it. docs/torch-backend.md says what is served.
"""

import logging
import os

import torch  # before _C: the module links against libtorch and has no RPATH to find it
import torch.distributed as dist
from torch._C._distributed_c10d import ProcessGroupGloo

from . import _C

__all__ = ["transport", "TRANSPORT_ENV"]

TRANSPORT_ENV = "DDPD_TORCH_TRANSPORT"
_TRANSPORTS = ("auto", "shm", "gloo")
_log = logging.getLogger("ddpd_torch")
_logged = set()  # notes already logged by this process


def _requested_transport():
    value = os.environ.get(TRANSPORT_ENV, "auto") or "auto"
    if value not in _TRANSPORTS:
        raise ValueError(
            f"{TRANSPORT_ENV}={value!r} is not a transport: set it to auto, shm or gloo, "
            "or unset it (auto)"
        )
    return value


def _ranks_on_host():
    """The ranks sharing this host's cores (torchrun's LOCAL_WORLD_SIZE), which decides how long
    a shm wait spins before it yields; 0 when unknown (the group's size is used)."""
    value = os.environ.get("LOCAL_WORLD_SIZE", "")
    return int(value) if value.isdigit() else 0


def _log_fallback(rank, note):
    # Every rank reaches the same decision with the same words: one line per job, not per rank.
    if rank != 0 or note in _logged:
        return
    _logged.add(note)
    _log.warning("ddpd: this process group runs on Gloo: %s", note)


def _create(store, rank, size, timeout):
    """The creator torch.distributed calls once per process group (register_backend)."""
    requested = _requested_transport()
    # Every group has a Gloo group of its ranks: the whole backend when shm is not possible, and
    # beside the shm group the transport of send/recv and all_to_all_single.
    gloo = ProcessGroupGloo(store, rank, size, timeout)
    if requested == "gloo":
        note = f"{TRANSPORT_ENV}=gloo"
    else:
        backend, note = _C.shm_backend(
            store, rank, size, timeout, _ranks_on_host(), requested == "shm", gloo
        )
        if backend is not None:
            return backend
    _log_fallback(rank, note)
    return gloo


def transport(group=None):
    """"shm" or "gloo": what `group`'s ddpd backend (the default group's by default) runs on."""
    pg = group if group is not None else dist.distributed_c10d._get_default_group()
    backend = pg._get_backend(torch.device("cpu"))
    return "shm" if backend.name() == "ddpd" else "gloo"


# devices=["cpu"]: "ddpd" serves CPU tensors; CPU's default backend stays Gloo, and barrier() and
# the object collectives pick the CPU on a "ddpd" group.
if "ddpd" not in dist.Backend.backend_list:
    dist.Backend.register_backend("ddpd", _create, devices=["cpu"])
