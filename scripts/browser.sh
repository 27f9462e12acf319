#!/usr/bin/env bash
# Installs Debian's Chromium for the browser test when it is missing. Used by `make test`.
set -euo pipefail
command -v chromium >/dev/null 2>&1 && exit 0
as_root() { if [ "$(id -u)" = 0 ]; then "$@"; else sudo "$@"; fi; }
echo "browser: installing chromium"
as_root apt-get update -qq
DEBIAN_FRONTEND=noninteractive as_root apt-get install -y -qq chromium >/dev/null
