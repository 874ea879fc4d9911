# Writes OUTPUT, a header defining DU_SOURCE_REVISION: the commit SOURCE_DIR is checked out at, with
# "-dirty" when tracked files differ from it, or "unknown" when SOURCE_DIR is not the top of a git
# checkout (a copy vendored into another project's repository is not that project's commit). Run at every build
# (cmake -P), so figures name the code that produced them; the file is rewritten only when the
# revision changed, so an unchanged checkout rebuilds nothing.
# Usage: cmake -DSOURCE_DIR=<dir> -DOUTPUT=<file> -P source_revision.cmake
set(revision unknown)
find_package(Git QUIET)
if(GIT_FOUND)
    execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} rev-parse --show-toplevel
        OUTPUT_VARIABLE top OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE failed ERROR_QUIET)
    file(REAL_PATH "${SOURCE_DIR}" source_dir)
    if(NOT failed AND top)
        file(REAL_PATH "${top}" top)
    endif()
    if(NOT failed AND top STREQUAL source_dir)
        execute_process(COMMAND ${GIT_EXECUTABLE} -C ${SOURCE_DIR} describe --always --dirty --abbrev=12 --exclude=*
            OUTPUT_VARIABLE described OUTPUT_STRIP_TRAILING_WHITESPACE RESULT_VARIABLE failed ERROR_QUIET)
        if(NOT failed AND described)
            set(revision ${described})
        endif()
    endif()
endif()
set(text "#define DU_SOURCE_REVISION \"${revision}\"\n")
if(EXISTS ${OUTPUT})
    file(READ ${OUTPUT} old)
endif()
if(NOT old STREQUAL text)
    file(WRITE ${OUTPUT} "${text}")
endif()
