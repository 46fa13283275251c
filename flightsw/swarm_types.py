"""DDS data types of the reference swarm app (Cyclone DDS Python IDL classes).

Topic `swarm_Observation`: a node's sensor scores for one cycle; `swarm_State`: its position and the digest
of the plan it made for that cycle. Times are epoch nanoseconds (nodes share the host clock).
"""

from dataclasses import dataclass
from typing import Annotated, Sequence

from cyclonedds.idl import IdlStruct
from cyclonedds.idl.annotations import key
from cyclonedds.idl.types import float64, int64, sequence, uint32


@dataclass
class Observation(IdlStruct, typename="swarm.Observation"):
    node: str
    key("node")
    cycle: int64
    sample_ns: int64
    sent_ns: int64
    # sequence[float64], written as what cyclonedds expands it to (typing can read this form, not the shorthand)
    scores: Annotated[Sequence[float64], sequence(float64)]


@dataclass
class State(IdlStruct, typename="swarm.State"):
    node: str
    key("node")
    cycle: int64
    sent_ns: int64
    x: float64
    y: float64
    plan_digest: str
    inputs: uint32
