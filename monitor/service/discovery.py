"""Engine targets from Prometheus `file_sd_configs` files, followed as they change.

The files are the ones a Prometheus beside the cluster already reads (JSON or YAML lists of
target groups), so one list serves both:

    - targets: ["10.0.0.5:8000", "10.0.0.6:8000"]
      labels: {target: vllm-a, model: llama-3-8b, __metrics_path__: /metrics, __scheme__: http}

Each address becomes a target named by its `target` label (the address when there is none; a
group with several addresses and one `target` label gets `<target>-<n>`). `model`, `node`,
`metric_prefix`, `engine`, `pod` and `namespace` labels set those target fields, and `gpus` ("0,1,2,3") the
GPUs that serve it. A file is re-read when it changes; a file that
cannot be read or parsed keeps its last good targets and says why.
"""

from __future__ import annotations

import glob
import json
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypedDict

import yaml
from pydantic import ValidationError

from monitor.config import ServiceTarget
from monitor.service.engines import unknown_engine

log = logging.getLogger("monitor.service.discovery")
_FIELDS = ("model", "node", "metric_prefix", "engine", "pod", "namespace")


class DiscoveryError(ValueError):
    plain = True


class _NoAliasLoader(yaml.SafeLoader):
    """YAML without anchors and aliases: a file_sd list has no use for them, and a few hundred
    bytes of nested aliases expand to gigabytes (the "billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()  # type: ignore[no-untyped-call]
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise DiscoveryError(f"line {event.start_mark.line + 1}: YAML anchors and aliases (&, *) are not "
                                 "allowed in file_sd files")
        return super().compose_node(parent, index)


def decode_file(data: bytes, source: str) -> str:
    """UTF-8 text, or a DiscoveryError naming the byte (a generator caught mid-write in a CJK name)."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DiscoveryError(f"{source}: not valid UTF-8 at byte {exc.start}") from None


def parse_target_groups(text: str, source: str) -> list[ServiceTarget]:
    """Targets of one file_sd file (JSON or YAML); DiscoveryError says what is wrong and where."""
    try:
        groups = json.loads(text) if source.endswith(".json") else yaml.load(text, Loader=_NoAliasLoader)
    except DiscoveryError as exc:
        raise DiscoveryError(f"{source}: {exc}") from None
    except RecursionError:
        raise DiscoveryError(f"{source}: nested too deep") from None
    except (ValueError, yaml.YAMLError) as exc:
        raise DiscoveryError(f"{source}: not valid {'JSON' if source.endswith('.json') else 'YAML'}: "
                             f"{str(exc).splitlines()[0]}") from None
    if groups is None:
        return []
    if not isinstance(groups, list):
        raise DiscoveryError(f"{source}: expected a list of target groups")
    targets: list[ServiceTarget] = []
    for index, group in enumerate(groups):
        targets.extend(_group_targets(group, f"{source}: group {index}"))
    return targets


def _group_targets(group: Any, where: str) -> list[ServiceTarget]:
    if not isinstance(group, dict) or not isinstance(group.get("targets", []), list):
        raise DiscoveryError(f"{where}: expected {{targets: [host:port, ...], labels: {{...}}}}")
    labels = group.get("labels") or {}
    if not isinstance(labels, dict):
        raise DiscoveryError(f"{where}: labels must be a mapping")
    addresses = [str(a) for a in group.get("targets", [])]
    scheme = str(labels.get("__scheme__", "http"))
    path = str(labels.get("__metrics_path__", "/metrics"))
    named = labels.get("target")
    targets = []
    for number, address in enumerate(addresses):
        name = str(named) if named and len(addresses) == 1 else f"{named}-{number}" if named else address
        extra: dict[str, Any] = {key: str(labels[key]) for key in _FIELDS if labels.get(key) not in (None, "")}
        if labels.get("gpus") not in (None, ""):
            extra["gpus"] = [part.strip() for part in str(labels["gpus"]).split(",")]
        shown = address.rpartition("@")[2]  # user:password@host: the host only
        try:
            targets.append(ServiceTarget(name=name, url=f"{scheme}://{address}{path}", **extra))
        except ValidationError as exc:
            reason = exc.errors()[0]["msg"].removeprefix("Value error, ")
            raise DiscoveryError(f"{where}: target {shown!r}: {reason}") from None
        if (why := unknown_engine(extra.get("engine"))) is not None:  # the engine tables know them, not the model
            raise DiscoveryError(f"{where}: target {shown!r}: {why}")
    return targets


class DiscoveryStatus(TypedDict):
    files: list[str]
    patterns: list[str]
    errors: dict[str, str]  # path -> why its last read failed (its last good targets are kept)
    targets: int


@dataclass
class FileDiscovery:
    """Follows the configured files (glob patterns allowed); `refresh()` is cheap when nothing changed."""

    patterns: list[str]
    _seen: dict[str, tuple[int, int]] = field(default_factory=dict)  # path -> (mtime ns, size)
    _targets: dict[str, list[ServiceTarget]] = field(default_factory=dict)  # path -> last good targets
    errors: dict[str, str] = field(default_factory=dict)  # path -> why its last read failed
    removed: list[str] = field(default_factory=list)  # files gone at the last refresh

    def refresh(self) -> bool:
        """Re-read changed files; True when the discovered list may have changed."""
        paths = sorted({p for pattern in self.patterns for p in glob.glob(pattern)})
        changed = False
        self.removed = sorted(set(self._seen) - set(paths))
        for gone in set(self._seen) - set(paths):
            self._targets.pop(gone, None)
            self._seen.pop(gone, None)
            self.errors.pop(gone, None)
            changed = True
        for path in paths:
            changed |= self._read_if_changed(path)
        return changed

    def _read_if_changed(self, path: str) -> bool:
        try:
            stat = Path(path).stat()
            if self._seen.get(path) == (stat.st_mtime_ns, stat.st_size):
                return False
            self._seen[path] = (stat.st_mtime_ns, stat.st_size)
            targets = parse_target_groups(decode_file(Path(path).read_bytes(), path), path)
        except (OSError, DiscoveryError) as exc:
            reason = str(exc) if isinstance(exc, DiscoveryError) else f"{path}: cannot read: {exc.strerror}"
            self.errors[path] = f"{reason} (keeping its last good targets)"
            return False
        except Exception as exc:  # a case the parser does not know yet: this file waits, the others go on
            log.exception("file_sd %s: reading it failed", path)
            self.errors[path] = f"{path}: cannot be used ({type(exc).__name__}) (keeping its last good targets)"
            return False
        self.errors.pop(path, None)
        self._targets[path] = targets
        return True

    def watched(self) -> list[str]:
        """The files found (read or not)."""
        return sorted(self._seen)

    def targets(self) -> list[ServiceTarget]:
        """Every discovered target; of two with one name, the one in the first file wins."""
        found: dict[str, ServiceTarget] = {}
        for path in sorted(self._targets):
            for target in self._targets[path]:
                found.setdefault(target.name, target)
        return list(found.values())

    def status(self) -> DiscoveryStatus:
        return {"files": sorted(self._targets), "patterns": self.patterns, "errors": dict(self.errors),
                "targets": sum(len(t) for t in self._targets.values())}
