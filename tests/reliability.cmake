# Reliability: fault injection, a randomized model test, fuzzing, real-kernel stress and thread tests.
set(du_rel_dir ${CMAKE_CURRENT_LIST_DIR})

du_add_test(test_model ${du_rel_dir}/model.test.cpp)
target_include_directories(test_model PRIVATE ${du_rel_dir})

du_add_test(test_fault_injection ${du_rel_dir}/fault_injection.test.cpp)
target_include_directories(test_fault_injection PRIVATE ${du_rel_dir})

du_add_test(test_stress_real ${du_rel_dir}/stress_real.test.cpp)

du_add_test(test_threaded_push ${du_rel_dir}/threaded_push.test.cpp)
target_include_directories(test_threaded_push PRIVATE ${du_rel_dir})
