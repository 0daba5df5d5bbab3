"""Parent side: which sandbox layers this host gives a job's child (asked of a probe child,
once per configuration), and the level below which extractions are refused (fail closed).
"""

from __future__ import annotations

import json
import logging
import subprocess
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace

from ..exceptions import SandboxUnavailable, Wording
from .children import CHILD_MODULE, child_env
from .confine import LAYERS, LEVELS, REQUIRE
from .wire import PROBE_OPTION, SANDBOX_OFF

SANDBOX_REFUSAL = Wording.SANDBOX  # what a client is told
PROBE_TIMEOUT = 60.0  # seconds a probe child may take (an interpreter start on a busy host)
_logger = logging.getLogger("django_pdfpool.sandbox")


@dataclass(frozen=True)
class SandboxLayers:
    """The sandbox layers a job's child gets on this host, the level they reach (none <
    basic < landlock < full; docs/security.md) and the level required."""

    layers: tuple[str, ...]  # of confine.LAYERS
    missing: Mapping[str, str]  # layer -> why this host does not give it
    landlock_abi: int  # 0: no Landlock
    level: str  # the highest of confine.LEVELS the layers meet
    enabled: bool = True  # False: turned off (configure(sandbox=False)): no layer is put on
    required: str = "none"  # the level extractions are refused below

    @property
    def sufficient(self) -> bool:
        """Whether extractions may run: the layers meet the required level."""
        return set(LEVELS[self.required]) <= set(self.layers)

    @property
    def why(self) -> str:
        """The missing layers and their reasons, for the log."""
        return ", ".join(f"{k} ({v})" for k, v in sorted(self.missing.items()))


class HostLayers:
    """The process's findings (one probe per interpreter, environment and sandbox setting)
    and its required level."""

    def __init__(self) -> None:
        self.required = "none"
        self._found: dict[tuple[str, tuple[str, ...], str], SandboxLayers] = {}
        self._logged: set[tuple[object, ...]] = set()
        self._lock = threading.Lock()

    def require(self, level: str) -> None:
        """Refuse extractions below `level` (one of confine.LEVELS) from now on."""
        REQUIRE.require("require", level)
        self.required = level

    def layers(self, python: str, env: tuple[str, ...], sandbox: str) -> SandboxLayers:
        """What children started with these get (a probe child the first time)."""
        key = (python, env, sandbox)
        with self._lock:
            first = key not in self._found
            if first:
                self._found[key] = probe(python, env, sandbox)
            found = self._found[key]
        if first and found.missing and found.enabled:  # said once, where no check runs too
            _logger.warning("The extraction sandbox lacks on this host: %s", found.why)
        return replace(found, required=self.required)

    def check(self, found: SandboxLayers) -> None:
        """SandboxUnavailable (a fixed sentence for clients) unless `found` is sufficient;
        the operators' reason is logged at ERROR, once per finding."""
        if found.sufficient:
            return
        finding = (found.level, found.required, tuple(sorted(found.missing.items())))
        with self._lock:
            first = finding not in self._logged
            self._logged.add(finding)
        if first:
            _logger.error(
                "Extractions refused: the sandbox reaches level %r, PDFPOOL['SANDBOX']['REQUIRE'] "
                "is %r; missing: %s",
                found.level,
                found.required,
                found.why or "-",
            )
        raise SandboxUnavailable(SANDBOX_REFUSAL)


def probe(python: str, env: tuple[str, ...], sandbox: str) -> SandboxLayers:
    """Start a probe child (`child_main --probe`): it puts on every layer, start-up's and a
    job's, and says which it got."""
    if sandbox == SANDBOX_OFF:
        missing = dict.fromkeys(LAYERS, "the sandbox is turned off")
        return SandboxLayers((), missing, 0, "none", enabled=False)
    try:
        proc = subprocess.run(
            [python, "-P", "-m", CHILD_MODULE, PROBE_OPTION],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            env=child_env(env),
            timeout=PROBE_TIMEOUT,
            check=False,
        )
        found = json.loads(proc.stdout.splitlines()[-1])
        layers = tuple(layer for layer in LAYERS if layer in found["layers"])
        missing = {str(k): str(v) for k, v in found["missing"].items() if k not in layers}
        abi = int(found["landlock_abi"])
    except (OSError, ValueError, KeyError, IndexError, TypeError, subprocess.SubprocessError):
        layers, missing, abi = (), dict.fromkeys(LAYERS, "the probe child failed"), 0
    reached = [name for name, need in LEVELS.items() if set(need) <= set(layers)]
    return SandboxLayers(layers, missing, abi, reached[-1])
