"""The app run's experiment (`type: app`, see run.py): its model and validators."""
from __future__ import annotations

from typing import Any, Literal, Optional

from pydantic import Field, field_validator, model_validator

from experiments.timeline import FaultEvent, check_timeline
from swarm.spec.apps import AppSettings
from experiments.base import ExperimentModel
from swarm.spec.documents import validate_document
from swarm.spec.model import SwarmSpec, swarm_from_template
from swarm.units import parse_duration


class AppExperiment(ExperimentModel):
    """An app run under a fault timeline."""

    type: Literal["app"] = "app"
    name: str
    nodes: int = Field(4, ge=2, le=1000)
    duration: float = 30.0
    warmup: float = 5.0
    apps: list[str] = Field(default_factory=lambda: ["swarm-app"])
    app: AppSettings = AppSettings()
    backend: Optional[Literal["compose", "netns", "swarm"]] = None
    swarm: dict[str, Any] = Field(default_factory=dict)
    faults: list[FaultEvent] = Field(default_factory=list)

    @field_validator("duration", "warmup", mode="before")
    @classmethod
    def _seconds(cls, v: Any, info) -> float:
        return parse_duration(v, info.field_name)

    @model_validator(mode="after")
    def _consistent(self) -> "AppExperiment":
        if "swarm-app" not in self.apps:
            raise ValueError("apps: `swarm run` measures the reference app; list swarm-app")
        for key in ("name", "nodes", "node_list", "groups", "apps", "app"):
            if key in self.swarm:
                raise ValueError(f"swarm.{key}: set by the experiment (top-level `{key}`)" if key in ("nodes", "apps", "app")
                                 else f"swarm.{key}: set by the experiment")
        spec = self.swarm_spec()
        check_timeline(self.faults, [n.name for n in spec.resolved_nodes()], self.duration)
        return self

    def swarm_spec(self, app_out: str | None = None) -> SwarmSpec:
        """The swarm the app runs on; `app_out` (netns) is where the nodes write their records."""
        fields = {"apps": self.apps, "app": self.app.model_dump()}
        if app_out:
            defaults = dict(self.swarm.get("defaults", {}))
            defaults["env"] = {**defaults.get("env", {}), "SWARM_APP_OUT": app_out}
            fields["defaults"] = defaults
        return swarm_from_template(self.swarm, self.name, self.name, self.nodes, self.backend, **fields)


def experiment_from_dict(data: Any, source: str = "") -> AppExperiment:
    return validate_document(AppExperiment, data, source, "experiment")


# ------------------------------------------------------------------------------------------------ run
