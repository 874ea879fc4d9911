# tools/shm-teardown-trace: its burst logic on made-up lines (tracer.report), and the whole tool against
# a real workload (tests/tracer/pool_workload.c): pools freed on the main thread closed first, and on a
# second thread, and on the main thread preempted by a spinning thread (tracer.main, tracer.worker,
# tracer.crowded). Those need root, bpftrace and a mounted tracefs;
# ctest reports them skipped (exit status 77) when one is missing.
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
    message(STATUS "deferred_unmap: python3 not found, skipping the tracer tests")
    return()
endif()
# The burst logic on made-up event lines: runs everywhere, root or not.
add_test(NAME tracer.report
    COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tracer/report_test.py ${PROJECT_SOURCE_DIR}/tools)
set_tests_properties(tracer.report PROPERTIES LABELS tracer)

enable_language(C)
add_executable(tracer_pool_workload tracer/pool_workload.c)
set_target_properties(tracer_pool_workload PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON)
target_link_libraries(tracer_pool_workload PRIVATE Threads::Threads deferred_unmap_warnings)
foreach(mode main worker crowded)
    add_test(NAME tracer.${mode}
        COMMAND ${Python3_EXECUTABLE} ${CMAKE_CURRENT_SOURCE_DIR}/tracer/run_test.py
            ${PROJECT_SOURCE_DIR}/tools/shm-teardown-trace $<TARGET_FILE:tracer_pool_workload> ${mode})
    # Serial: bpftrace's start takes both cores of a small machine for a second or two, and the
    # timing tests beside it should not pay for that.
    set_tests_properties(tracer.${mode} PROPERTIES SKIP_RETURN_CODE 77 TIMEOUT 240 RUN_SERIAL TRUE LABELS tracer)
endforeach()
