"""What every experiment type's model shares: strict and frozen, a checked name.

A type's model (experiments/<type>/model.py, or its run module) subclasses ExperimentModel and declares its own
fields; the validators here apply to the fields of the same name there (check_fields=False), so field order and
therefore the stored experiment.yaml stay each type's own.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, field_validator

from swarm.spec.model import check_name


class ExperimentModel(BaseModel):
    """The base of every experiment type's model."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    if TYPE_CHECKING:  # every type declares it (its own place in the field order); typed here for shared code
        name: str

    @field_validator("name", check_fields=False)
    @classmethod
    def _name(cls, v: str) -> str:
        return check_name("experiment", v)
