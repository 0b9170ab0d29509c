"""Per-host probe settings (the ``probe`` column of ``hosts``), validated with pydantic.

Keys: ``model_volumes`` (absolute paths), ``weight_paths`` (absolute paths), ``hf_cache`` (absolute
path), ``units`` (unit name -> expected ActiveState), ``gpu_free_mib`` (MiB, >= 0),
``expected_gpus`` (>= 1), ``gpu_backend`` (``nvidia-smi`` or ``nvml``), ``unit_health`` (unit ->
:class:`~bot.foundation.config.UnitHealth`, beats ``GPUBOT_UNIT_HEALTH`` for that unit), ``hf_endpoint`` (the Hub
``/gpu fetch`` downloads from on this host, beats ``GPUBOT_HF_ENDPOINT``). Unknown keys are refused.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from bot.foundation.config import UnitHealth
from bot.foundation.errors import ProbeSettingsError
from bot.foundation.names import validate_path, validate_unit

ActiveState = Literal["active", "inactive", "failed", "activating", "deactivating", "reloading"]
"""systemd's ActiveState values a unit may be expected in."""
GpuBackend = Literal["nvidia-smi", "nvml"]
AbsPath = Annotated[str, AfterValidator(validate_path)]
UnitName = Annotated[str, AfterValidator(validate_unit)]


class ProbeOverrides(BaseModel):
    model_config = ConfigDict(extra="forbid")

    model_volumes: list[AbsPath] | None = Field(default=None, min_length=1)
    weight_paths: list[AbsPath] | None = None
    hf_cache: AbsPath | None = None
    units: dict[UnitName, ActiveState] | None = None
    gpu_free_mib: Annotated[int, Field(ge=0)] | None = None
    expected_gpus: Annotated[int, Field(ge=1)] | None = None
    gpu_backend: GpuBackend | None = None
    unit_health: dict[UnitName, UnitHealth] | None = None
    hf_endpoint: Annotated[str, Field(pattern=r"^https?://[A-Za-z0-9.:\[\]_-]+(/[A-Za-z0-9._~/-]*)?$")] | None = None


def describe(exc: ValidationError) -> str:
    """One line per problem: ``units.vllm: Input should be 'active', 'inactive', …``."""
    return "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors())


def validate_overrides(data: Any, *, host: str = "") -> dict[str, Any]:
    """The overrides as a plain dict without unset keys; raises :class:`~bot.foundation.errors.ProbeSettingsError`."""
    try:
        return ProbeOverrides.model_validate(data or {}).model_dump(exclude_none=True)
    except ValidationError as exc:
        where = f" of host `{host}`" if host else ""
        raise ProbeSettingsError(f"invalid probe settings{where}: {describe(exc)}") from None
