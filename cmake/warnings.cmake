# The warning set every target of this project builds with, on g++ and clang++ alike.
add_library(deferred_unmap_warnings INTERFACE)
target_compile_options(deferred_unmap_warnings INTERFACE
    $<$<COMPILE_LANG_AND_ID:CXX,GNU,Clang>:-Wall -Wextra -Wpedantic -Werror -Wconversion -Wshadow>
    $<$<COMPILE_LANG_AND_ID:C,GNU,Clang>:-Wall -Wextra -Wpedantic -Werror>)
