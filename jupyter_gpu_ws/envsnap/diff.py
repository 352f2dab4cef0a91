"""Compares environments and judges whether a snapshot's torch build can use this machine's driver and GPUs."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from .capture import packages_by_name
from .wheels import same_version

# The oldest Linux driver each CUDA major release runs on (NVIDIA's CUDA toolkit release notes,
# "minor version compatibility"): below it, torch.cuda.is_available() is False.
MIN_DRIVER = {11: "450.80.02", 12: "525.60.13", 13: "580"}

Level = Literal["ok", "info", "warn", "error"]


@dataclass
class Change:
    name: str
    from_version: str  # in the snapshot
    to_version: str  # here and now


@dataclass
class EnvDiff:
    """How the current environment differs from a snapshot."""

    added: list[dict[str, str]] = field(default_factory=list)  # here, not in the snapshot
    removed: list[dict[str, str]] = field(default_factory=list)  # in the snapshot, not here
    changed: list[Change] = field(default_factory=list)
    same: int = 0

    @property
    def matches(self) -> bool:
        return not (self.added or self.removed or self.changed)

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "matches": self.matches}


@dataclass
class Verdict:
    level: Level
    message: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def diff(current: dict[str, Any], snapshot: dict[str, Any]) -> EnvDiff:
    """Packages added, removed and changed in `current` since `snapshot` (both from `capture`)."""
    now, then = packages_by_name(current), packages_by_name(snapshot)
    result = EnvDiff()
    for name in sorted(now.keys() | then.keys()):
        if name not in then:
            result.added.append({"name": name, "version": now[name]["version"]})
        elif name not in now:
            result.removed.append({"name": name, "version": then[name]["version"]})
        elif not same_version(now[name]["version"], then[name]["version"]):
            result.changed.append(Change(name, then[name]["version"], now[name]["version"]))
        else:
            result.same += 1
    return result


def _version_tuple(text: str) -> tuple[int, ...]:
    return tuple(int(part) for part in re.findall(r"\d+", text))


def _arch(text: str) -> tuple[str, int, int, str] | None:
    """'sm_86' -> ('sm', 8, 6, ''); 'compute_90' -> ('compute', 9, 0, ''); 'sm_90a' -> (..., 'a')."""
    match = re.fullmatch(r"(sm|compute)_(\d+)(\d)([a-z]?)", text.strip())
    if not match:
        return None
    return match.group(1), int(match.group(2)), int(match.group(3)), match.group(4)


def driver_verdict(cuda: str, driver: str) -> Verdict:
    """The driver against the minimum that torch's CUDA build needs."""
    major = _version_tuple(cuda)[0]
    minimum = MIN_DRIVER.get(major)
    if minimum is None:
        return Verdict(
            "warn", f"torch is built for CUDA {cuda}, for which no minimum driver is known here"
        )
    if _version_tuple(driver) < _version_tuple(minimum):
        return Verdict(
            "error",
            f"The driver {driver} is older than {minimum}, which torch's CUDA {cuda} build needs: "
            f"torch will not see the GPU. Use a torch built for an older CUDA, or a newer driver.",
        )
    return Verdict(
        "ok", f"The driver {driver} runs torch's CUDA {cuda} build (needs {minimum} or newer)"
    )


def gpu_verdict(gpu: dict[str, Any], arch_list: list[str]) -> Verdict:
    """One GPU against torch's architecture list: native code for it (or for an older GPU of
    the same major, which runs on it), or PTX for a capability up to its own (compiled on first use)."""
    name, capability = gpu.get("name", "GPU"), gpu.get("compute_capability")
    if not capability:
        return Verdict(
            "warn", f"{name}: its compute capability is unknown; cannot check torch's architectures"
        )
    major, minor = (_version_tuple(capability) + (0,))[:2]
    archs = [a for a in (_arch(text) for text in arch_list) if a]
    sm = f"sm_{major}{minor}"
    for kind, a_major, a_minor, suffix in archs:
        # Arch-specific code (sm_90a) runs only on exactly that GPU; plain sm_XY also on X.Z, Z >= Y.
        if (
            kind == "sm"
            and a_major == major
            and (a_minor == minor or (not suffix and a_minor < minor))
        ):
            return Verdict("ok", f"{name} ({sm}): torch has native code for it")
    ptx = [
        (a_major, a_minor)
        for kind, a_major, a_minor, _ in archs
        if kind == "compute" and (a_major, a_minor) <= (major, minor)
    ]
    if ptx:
        best = max(ptx)
        return Verdict(
            "ok",
            f"{name} ({sm}): torch runs it through PTX compute_{best[0]}{best[1]} "
            "(kernels are compiled on first use)",
        )
    return Verdict(
        "error",
        f"{name} ({sm}) is not among torch's architectures ({', '.join(arch_list)}): "
        "install a torch build that supports it",
    )


def compatibility(
    snapshot: dict[str, Any], machine: dict[str, Any] | None, python: dict[str, Any] | None = None
) -> list[Verdict]:
    """Whether the snapshot's torch build works on `machine` (from `read_machine`; None: no GPU),
    and, given the current interpreter's `python` record, whether its wheels fit it."""
    verdicts = []
    if python is not None:
        verdicts.extend(_python_verdicts(snapshot.get("python") or {}, python))
    torch = snapshot.get("torch")
    if not torch or not torch.get("version"):
        return verdicts + [Verdict("info", "The snapshot has no torch: no CUDA check needed")]
    cuda = torch.get("cuda")
    gpus = (machine or {}).get("gpus") or []
    if not cuda:
        if gpus:
            return verdicts + [
                Verdict(
                    "warn",
                    f"torch {torch['version']} is a CPU build: it will not use the "
                    f"{len(gpus)} GPU(s) here",
                )
            ]
        return verdicts + [Verdict("ok", f"torch {torch['version']} is a CPU build")]
    if not machine or not gpus:
        return verdicts + [
            Verdict(
                "info", f"No NVIDIA GPU here: torch's CUDA {cuda} build will run on the CPU only"
            )
        ]
    if machine.get("driver_version"):
        verdicts.append(driver_verdict(cuda, machine["driver_version"]))
    arch_list = torch.get("arch_list") or []
    verdicts.extend(gpu_verdict(gpu, arch_list) for gpu in gpus)
    return verdicts


def _python_verdicts(then: dict[str, Any], now: dict[str, Any]) -> list[Verdict]:
    same_impl = then.get("implementation") == now.get("implementation")
    then_minor = _version_tuple(then.get("version", ""))[:2]
    now_minor = _version_tuple(now.get("version", ""))[:2]
    if same_impl and then_minor == now_minor:
        return []
    return [
        Verdict(
            "warn",
            f"The snapshot was taken with {then.get('implementation')} {then.get('version')}, this is "
            f"{now.get('implementation')} {now.get('version')}: compiled wheels may not install",
        )
    ]
