# deferred_unmap.pc (the headers; arch-independent, in datadir) and deferred_unmap_c.pc (the C API's
# static library, in libdir). Paths are written relative to ${pcfiledir}, so the files stay right under
# `cmake --install --prefix`, DESTDIR and a moved prefix; an absolute install dir is written as is.

# The text for a pkg-config variable holding install dir `dir`.
function(du_pc_path out dir)
    if(IS_ABSOLUTE "${dir}")
        set(${out} "${dir}" PARENT_SCOPE)
    else()
        set(${out} "\${prefix}/${dir}" PARENT_SCOPE)
    endif()
endfunction()

# The text for `prefix` in a .pc file installed to `pcdir`.
function(du_pc_prefix out pcdir)
    if(IS_ABSOLUTE "${pcdir}")
        set(${out} "${CMAKE_INSTALL_PREFIX}" PARENT_SCOPE)
    else()
        file(RELATIVE_PATH up "/prefix/${pcdir}" "/prefix")
        string(REGEX REPLACE "/$" "" up "${up}")
        set(${out} "\${pcfiledir}/${up}" PARENT_SCOPE)
    endif()
endfunction()

du_pc_path(du_pc_includedir "${CMAKE_INSTALL_INCLUDEDIR}")
du_pc_path(du_pc_libdir "${CMAKE_INSTALL_LIBDIR}")

du_pc_prefix(du_pc_prefix_text "${CMAKE_INSTALL_DATADIR}/pkgconfig")
file(WRITE ${PROJECT_BINARY_DIR}/pkgconfig/deferred_unmap.pc "prefix=${du_pc_prefix_text}
includedir=${du_pc_includedir}

Name: deferred_unmap
Description: ${PROJECT_DESCRIPTION} (build with -std=c++20)
URL: ${PROJECT_HOMEPAGE_URL}
Version: ${PROJECT_VERSION}
Cflags: -I\${includedir} -pthread
Libs: -pthread
")

du_pc_prefix(du_pc_prefix_text "${CMAKE_INSTALL_LIBDIR}/pkgconfig")
file(WRITE ${PROJECT_BINARY_DIR}/pkgconfig/deferred_unmap_c.pc "prefix=${du_pc_prefix_text}
includedir=${du_pc_includedir}
libdir=${du_pc_libdir}

Name: deferred_unmap_c
Description: The deferred_unmap reclaim queue for C (deferred_unmap/c_api.h), as a static library
URL: ${PROJECT_HOMEPAGE_URL}
Version: ${PROJECT_VERSION}
Cflags: -I\${includedir} -pthread
Libs: -L\${libdir} -ldeferred_unmap_c -l${deferred_unmap_cxx_runtime} -pthread
")

install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/deferred_unmap.pc DESTINATION ${CMAKE_INSTALL_DATADIR}/pkgconfig)
install(FILES ${PROJECT_BINARY_DIR}/pkgconfig/deferred_unmap_c.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
