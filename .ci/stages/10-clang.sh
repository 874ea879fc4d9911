#!/usr/bin/env bash
# The same tests built with clang++ and -Werror.
set -euo pipefail
cmake --workflow --preset test-clang
