"""Where the ranks see no GPU: NCCL runs as Gloo and the CUDA calls that place
a DDP script on its GPU run on the CPU, each substitution recorded once with
the script line that first made it (launcher only)."""

import functools

import torch

from .record import _emit, _S, user_frames


def _first_site():
    frames = user_frames(3)
    return f"{frames[0][0]}:{frames[0][1]}" if frames else None


def _substituted(what, detail=None):
    rec = _S.recorder
    if rec is None or what in rec.first_substitution:
        return
    rec.first_substitution[what] = True
    _emit({"t": "subst", "what": what, "detail": detail, "where": _first_site()})


def _cpu_device(device):
    """'cpu' for a CUDA device (a torch.device, 'cuda:1', or an int index), else None."""
    if isinstance(device, bool):
        return None
    if isinstance(device, int):
        return "cpu"
    if isinstance(device, (str, torch.device)) and str(device).startswith("cuda"):
        return "cpu"
    return None


def substitute():
    """Where the process sees no GPU: NCCL becomes Gloo in init_process_group
    and new_group, and the CUDA calls a DDP script makes to place itself
    (torch.cuda.set_device, Tensor.to/.cuda, Module.to/.cuda,
    DistributedDataParallel's device_ids) run on the CPU. Each substitution is
    recorded once, with the script line that first made it. Other CUDA calls
    fail as they would, and the launcher names them."""
    if torch.cuda.is_available():
        return
    import torch.distributed as dist
    import torch.nn as nn

    def backend_without_nccl(backend):
        if backend is not None and "nccl" in str(backend).lower():
            _substituted("backend", f"backend={backend!r} ran as 'gloo'")
            return "gloo"
        return backend

    init_pg = dist.init_process_group

    @functools.wraps(init_pg)
    def init_process_group(*args, **kwargs):
        if args:
            args = (backend_without_nccl(args[0]),) + tuple(args[1:])
        elif "backend" in kwargs:
            kwargs["backend"] = backend_without_nccl(kwargs["backend"])
        if kwargs.get("device_id") is not None:
            _substituted("device_id", f"init_process_group's device_id={kwargs['device_id']!r} dropped")
            kwargs["device_id"] = None
        return init_pg(*args, **kwargs)

    new_group = dist.new_group

    @functools.wraps(new_group)
    def new_group_cpu(*args, **kwargs):
        if "backend" in kwargs:
            kwargs["backend"] = backend_without_nccl(kwargs["backend"])
        return new_group(*args, **kwargs)

    dist.init_process_group = init_process_group
    dist.new_group = new_group_cpu

    def set_device(device):
        _substituted("set_device", f"torch.cuda.set_device({device!r}) ignored")

    torch.cuda.set_device = set_device

    def map_to_args(args, kwargs, what):
        if args and _cpu_device(args[0]):
            _substituted(what, f"{what}({args[0]!r}) ran on the CPU")
            args = ("cpu",) + tuple(args[1:])
        if _cpu_device(kwargs.get("device")):
            _substituted(what, f"{what}(device={kwargs['device']!r}) ran on the CPU")
            kwargs = dict(kwargs, device="cpu")
        return args, kwargs

    tensor_to = torch.Tensor.to

    @functools.wraps(tensor_to)
    def to(self, *args, **kwargs):
        args, kwargs = map_to_args(args, kwargs, "Tensor.to")
        return tensor_to(self, *args, **kwargs)

    def tensor_cuda(self, device=None, non_blocking=False, memory_format=torch.preserve_format):
        _substituted(".cuda", "Tensor.cuda() ran on the CPU")
        return self

    module_to = nn.Module.to

    @functools.wraps(module_to)
    def mod_to(self, *args, **kwargs):
        args, kwargs = map_to_args(args, kwargs, "Module.to")
        return module_to(self, *args, **kwargs)

    def module_cuda(self, device=None):
        _substituted("module.cuda", "Module.cuda() ran on the CPU")
        return self

    torch.Tensor.to = to
    torch.Tensor.cuda = tensor_cuda
    nn.Module.to = mod_to
    nn.Module.cuda = module_cuda

    ddp_init = nn.parallel.DistributedDataParallel.__init__

    @functools.wraps(ddp_init)
    def ddp(self, module, device_ids=None, output_device=None, *args, **kwargs):
        if device_ids is not None or output_device is not None:
            _substituted("ddp", f"DistributedDataParallel(device_ids={device_ids!r}) ran on the CPU")
        return ddp_init(self, module, None, None, *args, **kwargs)

    nn.parallel.DistributedDataParallel.__init__ = ddp
