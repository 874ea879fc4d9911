# Benchmarks: teardown_bench (syscall cost, CPU, contention per strategy) and stutter_demo (a frame
# loop hit by a 1 GB burst of dead pools). Both share bench_common.hpp.
du_add_example(teardown_bench teardown_bench.cpp)
du_add_example(stutter_demo stutter_demo.cpp)

# The checkout's commit, looked up at every build, so each report and JSON names the code it measured.
set(du_bench_revision ${CMAKE_CURRENT_BINARY_DIR}/revision/du_source_revision.h)
add_custom_target(du_bench_revision
    COMMAND ${CMAKE_COMMAND} -DSOURCE_DIR=${PROJECT_SOURCE_DIR} -DOUTPUT=${du_bench_revision}
        -P ${PROJECT_SOURCE_DIR}/cmake/source_revision.cmake
    BYPRODUCTS ${du_bench_revision}
    VERBATIM)
foreach(tool teardown_bench stutter_demo)
    add_dependencies(${tool} du_bench_revision)
    target_include_directories(${tool} PRIVATE ${CMAKE_CURRENT_BINARY_DIR}/revision)
endforeach()

if(DEFERRED_UNMAP_BUILD_TESTS)
    find_package(Python3 COMPONENTS Interpreter)
    if(Python3_Interpreter_FOUND)
        set(du_bench_check ${CMAKE_CURRENT_SOURCE_DIR}/check_bench_output.py)
        set(du_bench_out ${CMAKE_CURRENT_BINARY_DIR}/bench-smoke)
        file(MAKE_DIRECTORY ${du_bench_out})
        # Tiny sizes: proves the tools run every strategy and write parseable, complete output.
        add_test(NAME bench.teardown_bench_smoke
            COMMAND ${Python3_EXECUTABLE} ${du_bench_check} teardown
                $<TARGET_FILE:teardown_bench> ${du_bench_out}/teardown
                --quick --sizes 1M,2M --burst-bytes 4M --rounds 2 --carry-model
                --firefox-focus --firefox-bytes 1M --firefox-seconds 0.1)
        # The other way through: no probe runs, steps sized by the mean rate.
        add_test(NAME bench.teardown_bench_smoke_no_probe
            COMMAND ${Python3_EXECUTABLE} ${du_bench_check} teardown
                $<TARGET_FILE:teardown_bench> ${du_bench_out}/teardown-no-probe
                --quick --sizes 1M --burst-bytes 4M --rounds 1 --no-probe --max-step-deviations 0)
        add_test(NAME bench.stutter_demo_smoke
            COMMAND ${Python3_EXECUTABLE} ${du_bench_check} stutter
                $<TARGET_FILE:stutter_demo> ${du_bench_out}/stutter
                --pools 4 --pool-bytes 1M --hz 240 --tail-frames 2 --max-step-deviations 0.5)
        set_tests_properties(bench.teardown_bench_smoke bench.teardown_bench_smoke_no_probe bench.stutter_demo_smoke
            PROPERTIES TIMEOUT 300)
    else()
        message(STATUS "deferred_unmap: python3 not found, benchmark smoke tests skipped")
    endif()
endif()
