#!/usr/bin/env bash
# valgrind memcheck on the tests that make real system calls: zero memcheck errors, zero leaks of any
# kind (exit code 99 from valgrind). test_stress_real knows it runs under valgrind and must also pass
# its assertions; the other tests compare all of /proc/self/maps, which under valgrind also holds
# valgrind's own, moving mappings, so for them only memcheck's verdict counts here (they pass their
# assertions in every other build). Uses the Release build of the test preset; builds what is missing.
set -euo pipefail
strict=(test_stress_real)
memcheck_only=(test_unique_fd test_mapping test_shm_region test_real_memfd)
cmake --build --preset test --target "${strict[@]}" "${memcheck_only[@]}"
failed=0
for t in "${strict[@]}" "${memcheck_only[@]}"; do
    echo "== valgrind $t"
    set +e
    DU_STRESS_POOLS=1000 valgrind --tool=memcheck --error-exitcode=99 --leak-check=full \
        --show-leak-kinds=definite,indirect,possible --errors-for-leak-kinds=definite,indirect,possible \
        "build/test/tests/$t" > "build/test/valgrind-$t.log" 2>&1
    status=$?
    set -e
    grep -E "ERROR SUMMARY|in use at exit|test cases:" "build/test/valgrind-$t.log"
    if [ "$status" -eq 99 ]; then
        echo "valgrind: memcheck errors or leaks in $t, see build/test/valgrind-$t.log"; failed=1
    elif [ "$status" -ne 0 ] && [[ " ${strict[*]} " == *" $t "* ]]; then
        echo "valgrind: $t failed its assertions (exit $status), see build/test/valgrind-$t.log"; failed=1
    fi
done
exit "$failed"
