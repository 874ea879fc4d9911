#!/usr/bin/env bash
# valgrind memcheck on the tests that make real system calls: zero errors, zero leaks of any kind.
# Uses the Release build of the test preset (run before the stages); builds what is missing.
set -euo pipefail
tests=(test_unique_fd test_mapping test_shm_region test_real_memfd test_stress_real)
cmake --build --preset test --target "${tests[@]}"
for t in "${tests[@]}"; do
    echo "== valgrind $t"
    DU_STRESS_POOLS=1000 valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
        --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
        "build/test/tests/$t" 2>&1 | tee "build/test/valgrind-$t.log" | grep -E "ERROR SUMMARY|in use at exit|test cases:"
    status=${PIPESTATUS[0]}
    [ "$status" -eq 0 ] || { echo "valgrind: $t failed (exit $status), see build/test/valgrind-$t.log"; exit 1; }
done
