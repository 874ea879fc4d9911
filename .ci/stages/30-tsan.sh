#!/usr/bin/env bash
# ThreadSanitizer: the threaded tests (pushes from many threads while drain runs, the worker modes,
# real-memfd stress from four threads, the model and fault-injection runs that start workers).
set -euo pipefail
cmake --workflow --preset tsan
