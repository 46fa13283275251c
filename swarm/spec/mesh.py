"""`mesh:` of a swarm spec and the choice of implementation (batman-adv or batmand) for a host; the keys
are explained in swarm/mesh/plan.py's docstring."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from swarm.caps import BackendTraits, Capabilities
from swarm.errors import SpecError
from swarm.units import parse_time_ms


class MeshSpec(BaseModel):
    """`mesh:` of a swarm spec (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    protocol: Literal["batman", "none"] = "none"
    implementation: Literal["auto", "batmand", "batman-adv"] = "auto"
    ogm_interval: int = Field(1000, ge=50, le=60_000)  # ms
    purge_timeout: Optional[int] = Field(10_000, ge=100, le=3_600_000)  # ms: batmand forgets a node unheard this long
    converge_timeout: float = Field(60.0, gt=0, le=3600)  # s

    @model_validator(mode="before")
    @classmethod
    def _shorthand(cls, v: Any) -> Any:
        if isinstance(v, str) or v is None:
            return {"protocol": "none" if v is None else v}
        return v

    @field_validator("ogm_interval", "purge_timeout", mode="before")
    @classmethod
    def _ms(cls, v: Any, info) -> int | None:
        return None if v is None else int(round(parse_time_ms(v, info.field_name)))

    @field_validator("converge_timeout", mode="before")
    @classmethod
    def _timeout(cls, v: Any) -> float:
        return parse_time_ms(v if not isinstance(v, (int, float)) or isinstance(v, bool) else f"{v}s",
                             "converge_timeout") / 1000

    @property
    def enabled(self) -> bool:
        return self.protocol != "none"


def choose_implementation(mesh: MeshSpec, caps: Capabilities, backend: BackendTraits) -> str | None:
    """'batman-adv', 'batmand' or None (no mesh) for this host; a pinned one this host cannot run is a SpecError."""
    if not mesh.enabled:
        return None
    impl = mesh.implementation
    if impl == "auto":
        impl = "batman-adv" if caps.batman_adv else "batmand"
    if impl == "batman-adv" and not caps.batman_adv:
        raise SpecError("mesh.implementation 'batman-adv': this kernel lacks the batman-adv module "
                        "(use batmand or auto)")
    if impl == "batmand" and not backend.containers and not caps.batmand:  # the host's batmand, not the image's
        raise SpecError("mesh.implementation 'batmand': batmand is not installed on this host "
                        "(the netns backend runs the host's; apt-get install batmand)")
    return impl
