"""Power sources behind one interface, detected per GPU and summed over the GPUs a cell uses.

A :class:`Channel` reads one quantity from each device: ``kind="energy"`` is a cumulative
energy counter in joules (``nvmlDeviceGetTotalEnergyConsumption``, Volta and newer);
``kind="power"`` is power in watts (NVML's instant-power field where the driver has it,
else ``nvmlDeviceGetPowerUsage``; or the ``nvidia-smi --query-gpu=power.draw`` CLI as a
last resort). Devices are kept apart (each has its own update times) and summed per window.
``nvml`` is the ``pynvml`` module or a stand-in with the same names
(:mod:`harness.energy.simulated`), so tests run the very code that reads a real GPU.

One name per reading, used for the channel, in records (``energy.source``) and in the
reading's semantics (:func:`harness.energy.hardware.power_semantics`): :data:`READINGS`.

A failed read is a glitch unless it says the GPU is gone (:func:`is_fatal`): the sampler and
the refresh watchers retry it and count it; opening a source retries it a few times.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import threading
from dataclasses import dataclass, field

from harness.energy.hardware import ARCHITECTURES, PowerSemantics, power_semantics

# reading → channel name (one name per reading): the energy counter, NVML's instant and average
# power fields, nvmlDeviceGetPowerUsage (what nvidia-smi reports as power.draw), the nvidia-smi CLI
READINGS = {"counter": "nvml-counter", "instant": "nvml-power-instant", "average": "nvml-power-average",
            "usage": "nvml-power-usage", "smi": "nvidia-smi"}
# NVML errors after which the device cannot be read again in this process; every other error is a glitch
FATAL_NVML = ("NVML_ERROR_UNINITIALIZED", "NVML_ERROR_DRIVER_NOT_LOADED", "NVML_ERROR_GPU_IS_LOST",
              "NVML_ERROR_RESET_REQUIRED", "NVML_ERROR_LIB_RM_VERSION_MISMATCH", "NVML_ERROR_GPU_NOT_FOUND",
              "NVML_ERROR_LIBRARY_NOT_FOUND")
DEFINITE_NVML = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_FUNCTION_NOT_FOUND", "NVML_ERROR_NO_PERMISSION",
                 "NVML_ERROR_INVALID_ARGUMENT")


def _nvml_code(exc) -> int | None:
    return getattr(exc, "value", None) if type(exc).__name__.startswith("NVMLError") else None


def is_fatal(exc: BaseException) -> bool:
    """Whether a failed read means the device is gone (GPU lost, driver unloaded, a dead
    nvidia-smi), rather than a glitch worth retrying (timeout, "in use", "unknown error")."""
    code = _nvml_code(exc)
    if code is not None:
        import pynvml

        return code in {getattr(pynvml, name) for name in FATAL_NVML}
    return isinstance(exc, SmiExited)


def retrying(fn, *args, tries: int = 5):
    """``fn(*args)``, retried on NVML glitches (not on fatal or definite answers such as 'not supported')."""
    import pynvml

    definite = {getattr(pynvml, name) for name in FATAL_NVML + DEFINITE_NVML}
    for attempt in range(tries):
        try:
            return fn(*args)
        except Exception as e:  # noqa: BLE001 — re-raised unless it is a glitch
            code = _nvml_code(e)
            if code is None or code in definite or attempt == tries - 1:
                raise
    raise AssertionError("unreachable")


class SmiExited(RuntimeError):
    """nvidia-smi stopped streaming readings."""


@dataclass
class GpuDevice:
    """One GPU in use: its CUDA index (what the models see) and its NVML identity."""

    cuda_index: int
    handle: object
    name: str
    architecture: str
    uuid: str


class Channel:
    """One quantity read from each device: watts (``power``) or cumulative joules (``energy``)."""

    kind = "power"
    name = "channel"
    reading = ""  # a key of READINGS (see hardware.power_semantics)
    semantics: PowerSemantics | None = None  # device 0's (the figures used for timing)
    per_device: list[PowerSemantics] = []   # every device's (a sensor profile per device: harness.energy.profiles)
    handles: list = []

    def read_one(self, handle) -> float:
        raise NotImplementedError

    def read(self) -> list[float]:
        """One value per device (raises if any device cannot be read)."""
        return [self.read_one(h) for h in self.handles]

    def close(self) -> None:
        pass


class NvmlCounter(Channel):
    """Total energy since driver load (mJ → J), Volta and newer."""

    kind = "energy"
    name = READINGS["counter"]
    reading = "counter"

    def __init__(self, nvml, devices: list[GpuDevice]):
        self.nvml, self.handles = nvml, [d.handle for d in devices]
        self.semantics = power_semantics(devices[0].architecture if devices else "", "", "counter")

    def read_one(self, handle) -> float:
        return self.nvml.nvmlDeviceGetTotalEnergyConsumption(handle) / 1000.0


_VALUE_MEMBERS = {"NVML_VALUE_TYPE_DOUBLE": "dVal", "NVML_VALUE_TYPE_UNSIGNED_INT": "uiVal",
                  "NVML_VALUE_TYPE_UNSIGNED_LONG": "ulVal", "NVML_VALUE_TYPE_UNSIGNED_LONG_LONG": "ullVal",
                  "NVML_VALUE_TYPE_SIGNED_LONG_LONG": "sllVal", "NVML_VALUE_TYPE_SIGNED_INT": "siVal",
                  "NVML_VALUE_TYPE_UNSIGNED_SHORT": "usVal"}


def read_field(nvml, handle, field_id: int) -> float:
    """One NVML field value as a number; raises ``nvml.NVMLError`` where the field is unsupported."""
    value = nvml.nvmlDeviceGetFieldValues(handle, [field_id])[0]
    if value.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(value.nvmlReturn)
    for type_name, member in _VALUE_MEMBERS.items():
        if value.valueType == getattr(nvml, type_name):
            return float(getattr(value.value, member))
    raise nvml.NVMLError(nvml.NVML_ERROR_UNKNOWN)


class NvmlPower(Channel):
    """Board power in W: ``reading`` "instant" (NVML_FI_DEV_POWER_INSTANT), "average"
    (NVML_FI_DEV_POWER_AVERAGE) or "usage" (``nvmlDeviceGetPowerUsage``)."""

    kind = "power"

    def __init__(self, nvml, devices: list[GpuDevice], reading: str):
        self.nvml, self.handles, self.reading = nvml, [d.handle for d in devices], reading
        self.name = READINGS[reading]
        self.semantics = power_semantics(devices[0].architecture, devices[0].name, reading)

    def read_one(self, handle) -> float:
        if self.reading == "usage":
            return self.nvml.nvmlDeviceGetPowerUsage(handle) / 1000.0
        field_id = self.nvml.NVML_FI_DEV_POWER_INSTANT if self.reading == "instant" else self.nvml.NVML_FI_DEV_POWER_AVERAGE
        return read_field(self.nvml, handle, field_id) / 1000.0


class SmiPower(Channel):
    """``nvidia-smi --query-gpu=power.draw`` streamed by one child process (``-lms``).

    The last resort where NVML cannot be used from Python. Reads return the latest complete
    loop (one value per GPU); a dead or failing child raises, which ends the windows it touches
    with a reason.
    """

    kind = "power"
    name = READINGS["smi"]
    reading = "smi"

    def __init__(self, gpu_ids: list[str], semantics: PowerSemantics, interval_ms: int = 20,
                 first_reading_timeout_s: float = 5.0):
        self.semantics = semantics
        self.handles = list(gpu_ids)
        self.latest: list[float] | None = None
        self.error: str | None = None
        self.first = threading.Event()
        self.process = subprocess.Popen(
            [shutil.which("nvidia-smi") or "nvidia-smi", "--query-gpu=power.draw", "--format=csv,noheader,nounits",
             f"--id={','.join(gpu_ids)}", "-lms", str(interval_ms)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read_lines, name="harness-energy-nvidia-smi", daemon=True)
        self.reader.start()
        self.first.wait(first_reading_timeout_s)
        if self.latest is None:
            self.close()
            raise RuntimeError(self.error or f"nvidia-smi gave no power reading within {first_reading_timeout_s} s")

    def _read_lines(self) -> None:
        loop: list[float] = []
        for line in self.process.stdout:
            try:
                loop.append(float(line.strip()))
            except ValueError:
                self.error = f"nvidia-smi printed {line.strip()!r} instead of a power reading"
                break
            if len(loop) == len(self.handles):
                self.latest, loop = loop, []
                self.first.set()
        if self.error is None:
            self.error = f"nvidia-smi exited (status {self.process.poll()})"
        self.first.set()

    def read(self) -> list[float]:
        if self.error is not None:
            raise SmiExited(self.error)
        return self.latest

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.reader.join(timeout=5)
        self.process.stdout.close()


@dataclass
class Sources:
    """What could be opened for the GPUs of one cell."""

    devices: list[GpuDevice] = field(default_factory=list)
    counter: Channel | None = None
    power: Channel | None = None
    driver: str = ""
    missing: dict[str, str] = field(default_factory=dict)  # source → why it is not available
    nvml: object = None

    def channels(self) -> list[Channel]:
        return [c for c in (self.counter, self.power) if c is not None]

    def close(self) -> None:
        for channel in self.channels():
            channel.close()
        if self.nvml is not None:
            try:
                self.nvml.nvmlShutdown()
            except self.nvml.NVMLError:
                pass
            self.nvml = None


def torch_uuid(cuda_index: int) -> str | None:
    """The NVML-style UUID ("GPU-…") of a CUDA device, so CUDA and NVML orderings cannot be mixed up."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        uuid = str(torch.cuda.get_device_properties(cuda_index).uuid)
    except (AttributeError, RuntimeError, AssertionError):
        return None
    return uuid if uuid.startswith("GPU-") else f"GPU-{uuid}"


def nvml_handle(nvml, cuda_index: int):
    """NVML handle of a CUDA device: by UUID, else through CUDA_VISIBLE_DEVICES, else by index."""
    uuid = torch_uuid(cuda_index)
    if uuid is not None:
        try:
            return nvml.nvmlDeviceGetHandleByUUID(uuid)
        except nvml.NVMLError:
            pass
    visible = [v.strip() for v in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if v.strip()]
    if cuda_index < len(visible):
        entry = visible[cuda_index]
        if entry.isdigit():
            return nvml.nvmlDeviceGetHandleByIndex(int(entry))
        return nvml.nvmlDeviceGetHandleByUUID(entry)
    return nvml.nvmlDeviceGetHandleByIndex(cuda_index)


def _text(value) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def describe_device(nvml, cuda_index: int, handle) -> GpuDevice:
    try:
        arch = ARCHITECTURES.get(retrying(nvml.nvmlDeviceGetArchitecture, handle), "unknown")
    except nvml.NVMLError:
        arch = "unknown"
    return GpuDevice(cuda_index, handle, _text(retrying(nvml.nvmlDeviceGetName, handle)), arch,
                     _text(retrying(nvml.nvmlDeviceGetUUID, handle)))


def unsupported_reason(nvml, read, handles) -> str | None:
    """None if ``read`` works on every handle (glitches retried), else the NVML error text."""
    try:
        for h in handles:
            retrying(read, h)
    except nvml.NVMLError as e:
        return str(e)
    return None


def init_nvml(nvml=None):
    """(module, None) with NVML initialised, or (None, reason)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return None, "the nvidia-ml-py package (pynvml) is not installed"
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return None, f"NVML could not be initialised ({e}): no NVIDIA driver on this machine?"
    return nvml, None


def open_sources(cuda_devices: list[int], want: str = "auto", nvml=None, by_index: bool = False) -> Sources:
    """Open every source ``want`` allows (auto, counter, power, power-usage, smi) for the given CUDA
    devices: ``power`` prefers the instant-power field, ``power-usage`` is nvmlDeviceGetPowerUsage
    (what nvidia-smi reports as power.draw), ``smi`` the CLI itself. ``by_index``: the indices are
    NVML's own (a simulated NVML), not CUDA's."""
    sources = Sources()
    if want != "smi":
        module, reason = init_nvml(nvml)
        if module is None:
            sources.missing["nvml"] = reason
        else:
            sources.nvml = module
            _open_nvml(sources, module, cuda_devices, want, by_index)
    if sources.power is None and want in ("auto", "smi"):
        _open_smi(sources, cuda_devices)
    return sources


def _open_nvml(sources: Sources, nvml, cuda_devices: list[int], want: str, by_index: bool = False) -> None:
    handle = nvml.nvmlDeviceGetHandleByIndex if by_index else (lambda i: nvml_handle(nvml, i))
    try:
        sources.driver = _text(retrying(nvml.nvmlSystemGetDriverVersion))
        sources.devices = [describe_device(nvml, i, retrying(handle, i)) for i in cuda_devices]
    except nvml.NVMLError as e:
        sources.missing["nvml"] = f"NVML could not open CUDA devices {cuda_devices}: {e}"
        return
    handles = [d.handle for d in sources.devices]
    if want in ("auto", "counter", "power", "power-usage"):  # under a power source: the fallback where phases
        # cannot be verified (harness.energy.unverified), never the primary
        why = unsupported_reason(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handles)
        if why is None:
            sources.counter = NvmlCounter(nvml, sources.devices)
        else:
            sources.missing[READINGS["counter"]] = f"nvmlDeviceGetTotalEnergyConsumption: {why}"
    if want in ("auto", "counter", "power"):
        why = unsupported_reason(nvml, NvmlPower(nvml, sources.devices, "instant").read_one, handles)
        if why is None:
            sources.power = NvmlPower(nvml, sources.devices, "instant")
            return
        sources.missing[READINGS["instant"]] = f"NVML_FI_DEV_POWER_INSTANT: {why}"
    if want in ("auto", "counter", "power", "power-usage"):
        why = unsupported_reason(nvml, nvml.nvmlDeviceGetPowerUsage, handles)
        if why is None:
            sources.power = NvmlPower(nvml, sources.devices, "usage")
        else:
            sources.missing[READINGS["usage"]] = f"nvmlDeviceGetPowerUsage: {why}"


def _open_smi(sources: Sources, cuda_devices: list[int]) -> None:
    if shutil.which("nvidia-smi") is None:
        sources.missing["nvidia-smi"] = "nvidia-smi is not on PATH"
        return
    ids = [d.uuid for d in sources.devices] or [torch_uuid(i) or str(i) for i in cuda_devices]
    name = sources.devices[0].name if sources.devices else ""
    arch = sources.devices[0].architecture if sources.devices else "unknown"
    try:
        sources.power = SmiPower(ids, power_semantics(arch, name, "smi"))
    except (OSError, RuntimeError) as e:
        sources.missing["nvidia-smi"] = str(e)
