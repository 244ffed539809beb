add_library(envb_testutil STATIC envb_test.c)
target_link_libraries(envb_testutil PUBLIC tether_envb tether_policy PkgConfig::CMOCKA tether_common)

tether_unit_test(test_envb_build SOURCES test_envb_build.c LIBS envb_testutil)
tether_unit_test(test_envb_redact SOURCES test_envb_redact.c LIBS tether_envb)
# The env boundary's twelve verification cases through a real fork+execve.
tether_c_test(test_envb_verify LABEL integration SOURCES test_envb_verify.c LIBS envb_testutil TIMEOUT 60)
tether_script_test(test_tether_env LABEL integration SCRIPT test_tether_env.sh TIMEOUT 60)
# Real interpreters (node, python3, perl, ruby, lua5.4, php, java) loading
# code from the environment: directly, then behind the env boundary.
add_executable(envb_exec envb_exec.c)
target_link_libraries(envb_exec PRIVATE tether_envb tether_policy tether_common)
set_target_properties(envb_exec PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
tether_script_test(test_runtime_inject LABEL integration SCRIPT test_runtime_inject.sh TIMEOUT 180)
