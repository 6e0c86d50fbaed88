#!/usr/bin/env bash
# The whole test suite: installs what is missing, builds, runs every test with CTest.
# CUDA tests skip, with the reason, on machines without a GPU.
set -euo pipefail
# The HTML report test renders pages in headless Chromium.
DPB_EXTRA_PACKAGES="chromium"
source "$(dirname "${BASH_SOURCE[0]}")/setup.sh"
cd "$DPB_BUILD"
exec ctest --output-on-failure --parallel "${DPB_JOBS:-$(nproc)}" "$@"
