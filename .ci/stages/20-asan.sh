#!/usr/bin/env bash
# The same tests in a Debug build with -fsanitize=address,undefined.
set -euo pipefail
cmake --workflow --preset asan
