"""Applications in every node: the spec's `apps:` list and `app:` settings.

```yaml
apps: [swarm-app]            # the reference app (flightsw/swarm_app.py): Cyclone DDS on the ISL network,
                             # CCSDS commands/telemetry on the ground network (UDP 1234 / 1235)
# apps: [my-flightsw:1.2]    # or a user's image (name:tag, local; compose backend): the node image of every node
app: {rate_hz: 10, domain_id: 0, targets: 0, window_s: 1, multicast: null}   # targets 0: one per node
```
Every node gets the settings as environment variables (SWARM_APPS, SWARM_DDS_DOMAIN, SWARM_APP_RATE_HZ,
SWARM_APP_TARGETS, SWARM_APP_WINDOW_S, SWARM_APP_MULTICAST, SWARM_PEERS, SWARM_PEER_IPS: every node's ISL address),
a user's image included, so its software can use them.
"""
from __future__ import annotations

import re
from typing import Callable, Optional

from pydantic import BaseModel, ConfigDict, Field, field_validator

from swarm.caps import BackendTraits
from swarm.errors import SpecError

KNOWN_APPS = {"swarm-app": "reference swarm app (flightsw/swarm_app.py)"}
DDS_DOMAIN_MAX = 232  # DDSI-RTPS port mapping: 7400 + 250 * domain must stay below 65536
IMAGE_RE = re.compile(r"^[a-z0-9][a-z0-9._/-]*(:[0-9]+)?[a-z0-9._/-]*:[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}\Z")


class AppSettings(BaseModel):
    """Settings of the apps (the reference app reads them all; a user's image gets them as environment)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    rate_hz: float = Field(10.0, gt=0, le=1000)
    domain_id: int = 0
    targets: int = Field(0, ge=0, le=10000)
    window_s: float = Field(1.0, gt=0, le=60)
    # DDS over multicast (one send reaches every peer) or unicast to every peer's ISL address. None: chosen by
    # the backend (with_backend_defaults): multicast with netns, unicast with compose.
    multicast: Optional[bool] = None

    @field_validator("domain_id", mode="before")
    @classmethod
    def _domain(cls, v):
        return check_domain_id(v)


def check_domain_id(v):
    """`v` if it is a valid DDS domain id (an integer 0..232), else ValueError naming it."""
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= DDS_DOMAIN_MAX:
        raise ValueError(f"domain_id {v!r}: a DDS domain id is an integer 0..{DDS_DOMAIN_MAX}")
    return v


def is_image(entry: str) -> bool:
    """An `apps:` entry naming an image (name:tag) rather than a built-in app."""
    return bool(IMAGE_RE.match(entry))


def check_apps(apps: list[str]) -> list[str]:
    """ValueError (one line) for an unknown app, a duplicate, or more than one image; else `apps`."""
    images = []
    for i, entry in enumerate(apps):
        if entry in KNOWN_APPS:
            pass
        elif isinstance(entry, str) and is_image(entry):
            images.append(entry)
        else:
            raise ValueError(f"apps[{i}] {entry!r}: unknown app (known: {', '.join(KNOWN_APPS)}; "
                             "or a local image given as name:tag)")
        if apps.index(entry) != i:
            raise ValueError(f"apps[{i}] {entry!r}: listed twice")
    if len(images) > 1:
        raise ValueError(f"apps: at most one image per node (got {', '.join(images)})")
    if images and "swarm-app" in apps:
        raise ValueError(f"apps: swarm-app runs from the framework's node image; it cannot run in {images[0]!r}")
    return apps


def app_image(apps: list[str]) -> str | None:
    """The user's image named in `apps`, if any."""
    return next((a for a in apps if is_image(a)), None)


def app_environment(apps: list[str], settings: AppSettings, node_names: list[str],
                    isl_ips: list[str]) -> dict[str, str]:
    """Environment variables every node gets for its apps (empty when there are none)."""
    if not apps:
        return {}
    multicast = "auto" if settings.multicast is None else str(int(settings.multicast))
    return {"SWARM_APPS": ",".join(apps), "SWARM_DDS_DOMAIN": str(settings.domain_id),
            "SWARM_APP_RATE_HZ": f"{settings.rate_hz:g}", "SWARM_APP_TARGETS": str(settings.targets),
            "SWARM_APP_WINDOW_S": f"{settings.window_s:g}", "SWARM_APP_MULTICAST": multicast,
            "SWARM_PEERS": ",".join(node_names), "SWARM_PEER_IPS": ",".join(isl_ips)}


def with_backend_defaults(spec, backend: BackendTraits):
    """`spec` with the app settings left to the backend decided: multicast on the netns backend (Linux bridges
    pass it), unicast on compose (Docker's internal networks drop multicast with br_netfilter on)."""
    if not spec.apps or spec.app.multicast is not None:
        return spec
    return spec.model_copy(update={"app": spec.app.model_copy(update={"multicast": backend.isl_multicast})})


def check_runnable(apps: list[str], backend: BackendTraits, image_exists: Callable[[str], bool]) -> None:
    """SpecError before anything starts: a user's app image on the netns backend, or one not present locally."""
    image = app_image(apps)
    if image is None:
        return
    if not backend.containers:
        raise SpecError(f"apps: image {image!r} needs the compose backend (backend {backend.name!r} runs no images)")
    if not image_exists(image):
        raise SpecError(f"apps: image {image!r} not found locally (no registry to pull from; build or load it first)")
