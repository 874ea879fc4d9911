#!/usr/bin/env bash
# The same tests in a Debug build with -fsanitize=address,undefined,float-cast-overflow.
set -euo pipefail
cmake --workflow --preset asan
