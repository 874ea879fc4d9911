# The wayland tests: real clients under shm_compositor, headless, each checked by run_test.sh from the
# compositor's --json report.
set(du_wayland_driver ${CMAKE_CURRENT_SOURCE_DIR}/run_test.sh)
set(du_wayland_modes close-first unmap-first queue queue+worker queue+worker-unmap)

# du_wayland_test(<name> <kind> <compositor options...> -- <client...>)
function(du_wayland_test name kind)
    add_test(NAME wayland.${name} COMMAND ${du_wayland_driver} ${kind} $<TARGET_FILE:shm_compositor> ${ARGN})
    set_tests_properties(wayland.${name} PROPERTIES TIMEOUT 120)
endfunction()

# A client nobody here wrote: Debian's weston package.
find_program(DU_WESTON_SIMPLE_SHM weston-simple-shm)
if(DU_WESTON_SIMPLE_SHM)
    foreach(mode IN LISTS du_wayland_modes)
        string(REPLACE "+" "_" id ${mode})
        du_wayland_test(simple_shm.${id} simple-shm --mode ${mode} --duration 3 -- ${DU_WESTON_SIMPLE_SHM})
    endforeach()
else()
    message(STATUS "deferred_unmap: weston-simple-shm not found (Debian: weston): skipping its wayland tests")
endif()

# Pools die 8 at a time, with resizes: every pool and old view must be reclaimed, no protocol error.
foreach(mode queue queue+worker)
    string(REPLACE "+" "_" id ${mode})
    du_wayland_test(stress.${id} stress --mode ${mode}
        -- $<TARGET_FILE:stress_client> --burst 8 --resize-every 3 --duration 3)
endforeach()

# A client truncates its memfd under the compositor: a protocol error for it, the compositor lives on.
du_wayland_test(shrink shrink --mode queue -- $<TARGET_FILE:stress_client> --shrink)
