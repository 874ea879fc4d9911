# Builds and runs the consumer programs one way a user would get the library (cmake -P, from ctest).
#
# DU_MODE: add_subdirectory | fetchcontent | install | find_package | pkg_config | meson_subproject |
#          meson_install | vendored
# The compilers and flags of the build that runs the tests are passed on, so the consumers are built the
# same way (g++ or clang, Release or ASan). Everything happens under DU_WORK_DIR; nothing needs a network.
cmake_minimum_required(VERSION 3.25)

foreach(var DU_MODE DU_SOURCE_DIR DU_CONSUMERS_DIR DU_WORK_DIR DU_GENERATOR DU_CXX DU_CC DU_CONFIG)
    if(NOT DEFINED ${var})
        message(FATAL_ERROR "run.cmake: ${var} is not set")
    endif()
endforeach()

set(work ${DU_WORK_DIR}/${DU_MODE})
set(prefix ${DU_WORK_DIR}/prefix)  # written by the install mode, read by find_package and pkg_config

# Runs a command; fails the test with its output when it fails.
function(run)
    cmake_parse_arguments(PARSE_ARGV 0 arg "" "WORKING_DIRECTORY" "COMMAND")
    if(NOT arg_WORKING_DIRECTORY)
        set(arg_WORKING_DIRECTORY ${work})
    endif()
    execute_process(COMMAND ${arg_COMMAND} WORKING_DIRECTORY ${arg_WORKING_DIRECTORY}
        RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err)
    if(NOT result EQUAL 0)
        list(JOIN arg_COMMAND " " shown)
        message(FATAL_ERROR "failed (${result}): ${shown}\n${out}\n${err}")
    endif()
    set(run_output "${out}" PARENT_SCOPE)
endfunction()

# Runs the built consumer programs; each checks that its pool was reclaimed.
function(run_consumers)
    foreach(program IN LISTS ARGN)
        run(COMMAND ${program})
        message(STATUS "${program}: ${run_output}")
    endforeach()
endfunction()

# Configures, builds and runs tests/consumers/cmake with DU_CONSUME=<how> and extra -D arguments.
function(cmake_consumer how)
    run(COMMAND ${CMAKE_COMMAND} -S ${DU_CONSUMERS_DIR}/cmake -B ${work}/build -G ${DU_GENERATOR}
        -DCMAKE_BUILD_TYPE=${DU_CONFIG} -DCMAKE_CXX_COMPILER=${DU_CXX} -DCMAKE_C_COMPILER=${DU_CC}
        "-DCMAKE_CXX_FLAGS=${DU_CXX_FLAGS}" "-DCMAKE_C_FLAGS=${DU_C_FLAGS}"
        "-DCMAKE_EXE_LINKER_FLAGS=${DU_LINKER_FLAGS}" -DDU_CONSUME=${how} ${ARGN})
    run(COMMAND ${CMAKE_COMMAND} --build ${work}/build --config ${DU_CONFIG} -j 2)
    run_consumers(${work}/build/consumer_c)
    if(NOT "-DDU_LANGUAGES=C" IN_LIST ARGN)
        run_consumers(${work}/build/consumer_cpp)
    endif()
endfunction()

# The pkg-config search path for the .pc files installed under `root`, wherever libdir put them.
function(pkg_config_path_under root out)
    file(GLOB_RECURSE pcs ${root}/*.pc)
    set(dirs "")
    foreach(pc IN LISTS pcs)
        get_filename_component(dir ${pc} DIRECTORY)
        list(APPEND dirs ${dir})
    endforeach()
    list(REMOVE_DUPLICATES dirs)
    list(JOIN dirs ":" joined)
    set(${out} "${joined}" PARENT_SCOPE)
endfunction()

# Compiles the consumers with nothing but what `pkg-config --cflags/--libs` prints, and runs them.
function(pkg_config_consumers pc_path)
    find_program(pkg_config pkg-config REQUIRED)
    set(ENV{PKG_CONFIG_PATH} "${pc_path}")
    foreach(package deferred_unmap deferred_unmap_c)
        run(COMMAND ${pkg_config} --cflags ${package})
        separate_arguments(${package}_cflags UNIX_COMMAND "${run_output}")
        run(COMMAND ${pkg_config} --libs ${package})
        separate_arguments(${package}_libs UNIX_COMMAND "${run_output}")
        message(STATUS "pkg-config ${package}: ${${package}_cflags} | ${${package}_libs}")
    endforeach()
    separate_arguments(cxx_flags UNIX_COMMAND "${DU_CXX_FLAGS} ${DU_LINKER_FLAGS}")
    separate_arguments(c_flags UNIX_COMMAND "${DU_C_FLAGS} ${DU_LINKER_FLAGS}")
    run(COMMAND ${DU_CXX} -std=c++20 ${cxx_flags} ${deferred_unmap_cflags} ${DU_CONSUMERS_DIR}/consumer.cpp
        ${deferred_unmap_libs} -o ${work}/consumer_cpp)
    run(COMMAND ${DU_CC} -std=c11 ${c_flags} ${deferred_unmap_c_cflags} ${DU_CONSUMERS_DIR}/consumer.c
        ${deferred_unmap_c_libs} -o ${work}/consumer_c)
    run_consumers(${work}/consumer_cpp ${work}/consumer_c)
endfunction()

# Meson takes the compilers and flags from the environment.
function(meson_environment)
    set(ENV{CC} ${DU_CC})
    set(ENV{CXX} ${DU_CXX})
    set(ENV{CFLAGS} "${DU_C_FLAGS}")
    set(ENV{CXXFLAGS} "${DU_CXX_FLAGS}")
    set(ENV{LDFLAGS} "${DU_LINKER_FLAGS}")
endfunction()

# Copies what a subproject or a vendored copy needs: the Meson files, the headers, the one-line source.
function(copy_library_tree to)
    file(MAKE_DIRECTORY ${to})
    file(COPY ${DU_SOURCE_DIR}/meson.build ${DU_SOURCE_DIR}/meson_options.txt ${DU_SOURCE_DIR}/LICENSE
        ${DU_SOURCE_DIR}/include ${DU_SOURCE_DIR}/src DESTINATION ${to})
endfunction()

file(REMOVE_RECURSE ${work})
file(MAKE_DIRECTORY ${work})

if(DU_MODE STREQUAL "add_subdirectory")
    cmake_consumer(add_subdirectory -DDU_SOURCE_DIR=${DU_SOURCE_DIR})

elseif(DU_MODE STREQUAL "fetchcontent")
    cmake_consumer(fetchcontent -DFETCHCONTENT_SOURCE_DIR_DEFERRED_UNMAP=${DU_SOURCE_DIR}
        -DFETCHCONTENT_FULLY_DISCONNECTED=ON)

elseif(DU_MODE STREQUAL "install")
    # The tested build itself, installed as a packager would: the other modes then use the prefix.
    file(REMOVE_RECURSE ${prefix})
    run(COMMAND ${CMAKE_COMMAND} --install ${DU_PARENT_BUILD_DIR} --prefix ${prefix} --config ${DU_CONFIG})
    foreach(expected include/deferred_unmap/c_api.h include/deferred_unmap/reclaim_queue.hpp)
        if(NOT EXISTS ${prefix}/${expected})
            message(FATAL_ERROR "install: ${expected} missing under ${prefix}")
        endif()
    endforeach()
    file(GLOB_RECURSE installed RELATIVE ${prefix} ${prefix}/*deferred_unmap_c.a ${prefix}/*.pc
        ${prefix}/*deferred_unmapConfig.cmake)
    list(LENGTH installed count)
    if(NOT count EQUAL 4)
        message(FATAL_ERROR "install: expected the C library, two .pc files and the CMake config, got: ${installed}")
    endif()

elseif(DU_MODE STREQUAL "find_package")
    cmake_consumer(find_package -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF)
    file(REMOVE_RECURSE ${work}/build)
    cmake_consumer(find_package -DCMAKE_PREFIX_PATH=${prefix} -DCMAKE_FIND_USE_PACKAGE_REGISTRY=OFF -DDU_LANGUAGES=C)

elseif(DU_MODE STREQUAL "pkg_config")
    pkg_config_path_under(${prefix} pc_path)
    pkg_config_consumers("${pc_path}")

elseif(DU_MODE STREQUAL "meson_subproject")
    # The consumer project with the library in its subprojects/, as `meson subprojects download`
    # would leave it from the .wrap; --force-fallback-for keeps an installed copy out of the way.
    find_program(meson meson REQUIRED)
    # The .wrap used here is the one the README tells hosts to write.
    file(READ ${DU_CONSUMERS_DIR}/meson/subprojects/deferred_unmap.wrap wrap)
    file(READ ${DU_SOURCE_DIR}/README.md readme)
    string(FIND "${readme}" "${wrap}" at)
    if(at EQUAL -1)
        message(FATAL_ERROR "README.md does not show tests/consumers/meson/subprojects/deferred_unmap.wrap as is")
    endif()
    file(COPY ${DU_CONSUMERS_DIR}/meson/ DESTINATION ${work}/project)
    file(COPY ${DU_CONSUMERS_DIR}/consumer.cpp ${DU_CONSUMERS_DIR}/consumer.c DESTINATION ${work}/project)
    copy_library_tree(${work}/project/subprojects/deferred_unmap)
    meson_environment()
    run(COMMAND ${meson} setup ${work}/build ${work}/project --buildtype=plain --wrap-mode=nodownload
        --force-fallback-for=deferred_unmap,deferred_unmap_c)
    run(COMMAND ${meson} compile -C ${work}/build)
    run_consumers(${work}/build/consumer_cpp ${work}/build/consumer_c)
    # The same subproject under a project that declares C alone.
    file(COPY ${DU_CONSUMERS_DIR}/meson_c/meson.build ${DU_CONSUMERS_DIR}/consumer.c DESTINATION ${work}/c_only)
    file(COPY ${work}/project/subprojects DESTINATION ${work}/c_only)
    run(COMMAND ${meson} setup ${work}/c_only_build ${work}/c_only --buildtype=plain --wrap-mode=nodownload
        --force-fallback-for=deferred_unmap_c)
    run(COMMAND ${meson} compile -C ${work}/c_only_build)
    run_consumers(${work}/c_only_build/consumer_c)

elseif(DU_MODE STREQUAL "meson_install")
    # This project's own Meson build: its tests, its install, and the .pc files it writes.
    find_program(meson meson REQUIRED)
    meson_environment()
    run(COMMAND ${meson} setup ${work}/build ${DU_SOURCE_DIR} --buildtype=plain -Dtests=enabled
        --prefix=${work}/prefix)
    run(COMMAND ${meson} compile -C ${work}/build)
    run(COMMAND ${meson} test -C ${work}/build --print-errorlogs)
    run(COMMAND ${meson} install -C ${work}/build --quiet)
    pkg_config_path_under(${work}/prefix pc_path)
    pkg_config_consumers("${pc_path}")

elseif(DU_MODE STREQUAL "vendored")
    # Only include/deferred_unmap/ copied into the host's tree; -I and -pthread are all it takes.
    # The C API needs one C++ file of the host's own that includes c_api_impl.hpp.
    file(COPY ${DU_SOURCE_DIR}/include/deferred_unmap DESTINATION ${work}/third_party/include)
    file(WRITE ${work}/du_c_api.cpp "#include <deferred_unmap/c_api_impl.hpp>\n")
    separate_arguments(cxx_flags UNIX_COMMAND "${DU_CXX_FLAGS} ${DU_LINKER_FLAGS}")
    separate_arguments(c_flags UNIX_COMMAND "${DU_C_FLAGS}")
    set(strict -Wall -Wextra -Wpedantic -Werror)  # not system headers here: they must be clean as they are
    set(vendored -I${work}/third_party/include -pthread)
    run(COMMAND ${DU_CXX} -std=c++20 ${strict} ${cxx_flags} ${vendored} ${DU_CONSUMERS_DIR}/consumer.cpp
        -o ${work}/consumer_cpp)
    run(COMMAND ${DU_CC} -std=c11 ${strict} ${c_flags} ${vendored} -c ${DU_CONSUMERS_DIR}/consumer.c
        -o ${work}/consumer_c.o)
    run(COMMAND ${DU_CXX} -std=c++20 ${strict} ${cxx_flags} ${vendored} ${work}/du_c_api.cpp ${work}/consumer_c.o
        -o ${work}/consumer_c)
    run_consumers(${work}/consumer_cpp ${work}/consumer_c)

else()
    message(FATAL_ERROR "run.cmake: unknown DU_MODE '${DU_MODE}'")
endif()
