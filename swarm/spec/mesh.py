"""`mesh:` of a swarm spec; the keys are explained in swarm/mesh/plan.py's docstring. The implementations it
names are the registry's (swarm/mesh/implementations/, which plans from this model, so the model names them
instead of importing it; a unit test checks that the two agree), and the registry chooses one for a host."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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
