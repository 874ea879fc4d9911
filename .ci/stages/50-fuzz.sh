#!/usr/bin/env bash
# libFuzzer (clang, -fsanitize=fuzzer,address,undefined) on the queue's operations against the
# reference model, for a bounded time (DU_FUZZ_SECONDS, default 60), starting from the checked-in
# corpus. New inputs go to a scratch directory; a divergence or sanitizer report fails the stage.
set -euo pipefail
seconds="${DU_FUZZ_SECONDS:-60}"
cmake -S . -B build/fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CXX_COMPILER=clang++ -DCMAKE_C_COMPILER=clang -DDEFERRED_UNMAP_BUILD_TESTS=ON -DDEFERRED_UNMAP_BUILD_EXAMPLES=OFF
cmake --build build/fuzz --target fuzz_queue -j2
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
build/fuzz/tests/fuzz_queue -max_total_time="$seconds" -max_len=1024 -timeout=30 -rss_limit_mb=4096 -print_final_stats=1 \
    -artifact_prefix=build/fuzz/ "$work" tests/fuzz/corpus 2>&1 | tee build/fuzz/fuzz.log | grep -E "^(#[0-9]+ +DONE|stat::number_of_executed_units|stat::peak_rss_mb|==[0-9]+==ERROR|queue_fuzz:)"
exit "${PIPESTATUS[0]}"
