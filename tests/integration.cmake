# Integration: the C API from a C11 program, and the library consumed each way a user gets it.
enable_language(C)

# The C API library is built with this project's warnings here; its export stays free of them.
target_compile_options(deferred_unmap_c PRIVATE $<TARGET_PROPERTY:deferred_unmap_warnings,INTERFACE_COMPILE_OPTIONS>)

# C11 with -Wall -Wextra -Wpedantic -Werror, against real memfds.
add_executable(test_c_api c_api/c_api_test.c)
set_target_properties(test_c_api PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(test_c_api PRIVATE deferred_unmap::c deferred_unmap_warnings)
add_test(NAME test_c_api COMMAND test_c_api)

# A real signal beside the worker thread, read from a signalfd as wlroots compositors do.
add_executable(test_c_api_signals c_api/signal_test.c)
set_target_properties(test_c_api_signals PROPERTIES C_STANDARD 11 C_STANDARD_REQUIRED ON C_EXTENSIONS OFF)
target_link_libraries(test_c_api_signals PRIVATE deferred_unmap::c deferred_unmap_warnings)
add_test(NAME test_c_api_signals COMMAND test_c_api_signals)

# Options structs as callers built against earlier or later headers pass them, read back from the queue.
du_add_test(test_c_api_options c_api/options_layout.test.cpp)

# The C API's definitions also compile for hosts built without exceptions.
add_library(c_api_no_exceptions OBJECT ${PROJECT_SOURCE_DIR}/src/c_api.cpp)
target_link_libraries(c_api_no_exceptions PRIVATE deferred_unmap::deferred_unmap deferred_unmap_warnings)
target_compile_options(c_api_no_exceptions PRIVATE -fno-exceptions)

# Consumers: tests/consumers/run.cmake builds and runs a tiny program per way in, with this build's
# compilers and flags. `install` puts this build into a prefix that find_package and pkg_config use.
set(du_consumer_modes add_subdirectory fetchcontent install find_package pkg_config vendored)
find_program(DU_MESON meson)
find_program(DU_PKG_CONFIG pkg-config)
if(DU_MESON AND DU_PKG_CONFIG)
    list(APPEND du_consumer_modes meson_subproject meson_install)
else()
    message(STATUS "deferred_unmap: meson or pkg-config not found, skipping the Meson consumer tests")
endif()
if(NOT DU_PKG_CONFIG)
    list(REMOVE_ITEM du_consumer_modes pkg_config)
    message(STATUS "deferred_unmap: pkg-config not found, skipping consumer.pkg_config")
endif()

foreach(mode IN LISTS du_consumer_modes)
    add_test(NAME consumer.${mode}
        COMMAND ${CMAKE_COMMAND}
            -DDU_MODE=${mode}
            -DDU_SOURCE_DIR=${PROJECT_SOURCE_DIR}
            -DDU_CONSUMERS_DIR=${CMAKE_CURRENT_SOURCE_DIR}/consumers
            -DDU_WORK_DIR=${CMAKE_CURRENT_BINARY_DIR}/consumers
            -DDU_PARENT_BUILD_DIR=${PROJECT_BINARY_DIR}
            -DDU_GENERATOR=${CMAKE_GENERATOR}
            -DDU_CXX=${CMAKE_CXX_COMPILER}
            -DDU_CC=${CMAKE_C_COMPILER}
            "-DDU_CXX_FLAGS=${CMAKE_CXX_FLAGS}"
            "-DDU_C_FLAGS=${CMAKE_C_FLAGS}"
            "-DDU_LINKER_FLAGS=${CMAKE_EXE_LINKER_FLAGS}"
            -DDU_CONFIG=$<CONFIG>
            -P ${CMAKE_CURRENT_SOURCE_DIR}/consumers/run.cmake)
    set_tests_properties(consumer.${mode} PROPERTIES LABELS consumer TIMEOUT 300)
endforeach()
set_tests_properties(consumer.install PROPERTIES FIXTURES_SETUP du_installed)
foreach(mode find_package pkg_config)
    if(mode IN_LIST du_consumer_modes)
        set_tests_properties(consumer.${mode} PROPERTIES FIXTURES_REQUIRED du_installed)
    endif()
endforeach()
