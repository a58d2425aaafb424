#!/usr/bin/env bash
# Wheels the monitor needs on the GPU device machine (nvidia-h200: CPython 3.12, x86_64, no
# package registry), downloaded into ./.whl/ so a device `run` can carry them.
#
#     bash scripts/device_wheels.sh          # in the repo root; needs .venv and a registry
#
# The device image already has torch, nvidia-ml-py, prometheus-client, httpx (+ httpcore,
# certifi) and PyYAML: those are not carried. Everything else in the monitor's runtime closure
# is, at exactly the version installed in .venv (the versions the tests ran against), so the
# device never mixes our pins with whatever its own image holds: its copies of anyio, click,
# h11, idna, rich, typer, typing-extensions ... are shadowed by ours on PYTHONPATH.
# One version of each (two stop the whole install), binary wheels only, no dependencies
# resolved by pip (the list below *is* the closure; see `check_closure` at the end).
#
# On the device, each command starts with (see bench/gpu_check.py for the whole command):
#     python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
#         --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site || exit;
set -euo pipefail

cd "$(dirname "$0")/.."
VENV_PY=${VENV_PY:-.venv/bin/python}
DEST=${DEST:-.whl}
MAX_MIB=${MAX_MIB:-40}

# The runtime closure of pyproject's dependencies (Requires-Dist of each, Linux, Python 3.12),
# less what the device already has. greenlet: SQLAlchemy 2.1 no longer requires it (only its
# asyncio extra does), and the monitor uses the sync engine.
PACKAGES=(
    fastapi starlette annotated-doc opentelemetry-api
    pydantic pydantic-core pydantic-settings annotated-types typing-inspection typing-extensions
    python-dotenv
    SQLAlchemy
    APScheduler tzlocal
    uvicorn click h11
    typer rich markdown-it-py mdurl pygments shellingham
    anyio idna sniffio
    alembic Mako tzdata
    openai jiter httpx2 httpcore2 truststore
)
# Already on the device (KINDS.md / the device README): not carried.
DEVICE_HAS=(torch nvidia-ml-py prometheus-client httpx httpcore certifi PyYAML numpy scipy Jinja2 MarkupSafe
            tqdm)

if ! git check-ignore -q "$DEST/x.whl"; then
    echo "error: $DEST/ is not ignored by git (.gitignore should hold /$DEST/)" >&2
    exit 1
fi

specs=$("$VENV_PY" - "${PACKAGES[@]}" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version

missing = []
for name in sys.argv[1:]:
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        missing.append(name)
if missing:
    sys.exit(f"not installed in .venv: {' '.join(missing)}")
EOF
)

mkdir -p "$DEST"
rm -f "$DEST"/*.whl
# shellcheck disable=SC2086  # one spec per word
# (the grep drops pip's noise about this machine's extra local index folders that do not exist)
"$VENV_PY" -m pip download -q --no-deps --only-binary=:all: \
    --python-version 3.12 --implementation cp --abi cp312 --abi abi3 --abi none \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux1_x86_64 \
    --platform any \
    -d "$DEST" $specs 2> >(grep -v "is ignored: it is neither a file nor a directory" >&2)

# One wheel per package, and every package got one.
"$VENV_PY" - "$DEST" "$MAX_MIB" "${PACKAGES[@]}" <<'EOF'
import re
import sys
from pathlib import Path

dest, max_mib, names = Path(sys.argv[1]), float(sys.argv[2]), sys.argv[3:]
norm = lambda name: re.sub(r"[-_.]+", "_", name).lower()  # noqa: E731
wheels = sorted(dest.glob("*.whl"))
by_name: dict[str, list[Path]] = {}
for wheel in wheels:
    by_name.setdefault(norm(wheel.name.split("-")[0]), []).append(wheel)
problems = [f"two wheels for {n}: {[w.name for w in ws]}" for n, ws in by_name.items() if len(ws) > 1]
problems += [f"no wheel for {n}" for n in names if norm(n) not in by_name]
problems += [f"unexpected wheel {ws[0].name}" for n, ws in by_name.items() if n not in {norm(x) for x in names}]
total = sum(w.stat().st_size for w in wheels)
for wheel in wheels:
    print(f"{wheel.stat().st_size / 1024:9.0f} KiB  {wheel.name}")
print(f"{total / 2**20:9.2f} MiB  total, {len(wheels)} wheels in {dest}/")
if total > max_mib * 2**20:
    problems.append(f"{total / 2**20:.1f} MiB is over the {max_mib:g} MiB budget")
if problems:
    sys.exit("error: " + "; ".join(problems))
EOF

# The closure: every Requires-Dist (no extras, evaluated for Linux x86_64 CPython 3.12) of a
# carried wheel must be carried too or be on the device.
"$VENV_PY" - "$DEST" "${DEVICE_HAS[@]}" <<'EOF'
import re
import sys
import zipfile
from pathlib import Path

from packaging.markers import default_environment
from packaging.requirements import Requirement

dest, device = Path(sys.argv[1]), sys.argv[2:]
norm = lambda name: re.sub(r"[-_.]+", "_", name).lower()  # noqa: E731
env = {**default_environment(), "python_version": "3.12", "python_full_version": "3.12.3",
       "platform_system": "Linux", "sys_platform": "linux", "platform_machine": "x86_64",
       "implementation_name": "cpython", "platform_python_implementation": "CPython", "extra": ""}
carried = {norm(w.name.split("-")[0]): w for w in dest.glob("*.whl")}
available = set(carried) | {norm(n) for n in device}
missing = []
for name, wheel in sorted(carried.items()):
    with zipfile.ZipFile(wheel) as archive:
        meta = next(n for n in archive.namelist() if n.endswith(".dist-info/METADATA"))
        text = archive.read(meta).decode()
    for line in text.splitlines():
        if not line.startswith("Requires-Dist:"):
            continue
        req = Requirement(line.split(":", 1)[1].strip())
        if req.marker is not None and not req.marker.evaluate(env):
            continue
        if norm(req.name) not in available:
            missing.append(f"{wheel.name} needs {req}")
if missing:
    sys.exit("error: closure incomplete:\n  " + "\n  ".join(missing))
print("closure complete: every requirement is carried or on the device")
EOF
