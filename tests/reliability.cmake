# Reliability: fault injection, a randomized model test, fuzzing, real-kernel stress and thread tests.
set(du_rel_dir ${CMAKE_CURRENT_LIST_DIR})

du_add_test(test_model ${du_rel_dir}/model.test.cpp)
target_include_directories(test_model PRIVATE ${du_rel_dir})

du_add_test(test_fault_injection ${du_rel_dir}/fault_injection.test.cpp)
target_include_directories(test_fault_injection PRIVATE ${du_rel_dir})

du_add_test(test_stress_real ${du_rel_dir}/stress_real.test.cpp)

du_add_test(test_threaded_push ${du_rel_dir}/threaded_push.test.cpp)
target_include_directories(test_threaded_push PRIVATE ${du_rel_dir})

# Fuzzing: the libFuzzer target where the compiler has it (clang), and everywhere a driver that
# replays the checked-in corpus through the same entry point.
add_executable(fuzz_replay ${du_rel_dir}/fuzz/queue_fuzz.cpp ${du_rel_dir}/fuzz/replay_main.cpp)
target_link_libraries(fuzz_replay PRIVATE deferred_unmap::deferred_unmap deferred_unmap_warnings)
add_test(NAME fuzz_corpus_replay COMMAND fuzz_replay ${du_rel_dir}/fuzz/corpus)

include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_FLAGS -fsanitize=fuzzer)
set(CMAKE_REQUIRED_LINK_OPTIONS -fsanitize=fuzzer)
check_cxx_source_compiles([[
#include <cstddef>
#include <cstdint>
extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t*, std::size_t) { return 0; }
]] DU_HAVE_LIBFUZZER)
unset(CMAKE_REQUIRED_FLAGS)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
if(DU_HAVE_LIBFUZZER)
    add_executable(fuzz_queue ${du_rel_dir}/fuzz/queue_fuzz.cpp)
    target_link_libraries(fuzz_queue PRIVATE deferred_unmap::deferred_unmap deferred_unmap_warnings)
    target_compile_options(fuzz_queue PRIVATE -fsanitize=fuzzer,address,undefined,float-cast-overflow -fno-sanitize-recover=all -fno-omit-frame-pointer)
    target_link_options(fuzz_queue PRIVATE -fsanitize=fuzzer,address,undefined,float-cast-overflow)
endif()
