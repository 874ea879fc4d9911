# The warning set every target of this project builds with, on g++ and clang++ alike; clang also checks
# the locking rules written as thread-safety annotations (detail/thread_annotations.hpp).
add_library(deferred_unmap_warnings INTERFACE)
target_compile_options(deferred_unmap_warnings INTERFACE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Werror -Wconversion -Wshadow -Wundef>
    $<$<COMPILE_LANG_AND_ID:CXX,Clang>:-Wthread-safety>
    $<$<COMPILE_LANG_AND_ID:C,GNU,Clang>:-Wall -Wextra -Wpedantic -Werror -Wundef>)
