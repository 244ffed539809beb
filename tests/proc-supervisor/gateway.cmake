# Exec gateway, status socket and identity service (proc-supervisor/
# exec_gateway.c, status.c, idservice.c): a harness running the modules on
# one loop, a net-side client, and the scripts driving them as root.
add_executable(gw_harness gw_harness.c)
target_link_libraries(gw_harness PRIVATE tether_procsup tether_proto tether_identity tether_common)
set_target_properties(gw_harness PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_executable(gw_idclient gw_idclient.c)
target_link_libraries(gw_idclient PRIVATE tether_proto tether_identity tether_common PkgConfig::UV PkgConfig::JANSSON)
set_target_properties(gw_idclient PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
# The workload of the identity tests runs under the seccomp profile, which
# denies ptrace: LeakSanitizer would fail there (as for tests/procsup probes).
add_executable(gw_connect gw_connect.c)
if(TETHER_SANITIZE)
  target_compile_options(gw_connect PRIVATE -fno-sanitize=all)
  target_link_options(gw_connect PRIVATE -fno-sanitize=all)
endif()
set_target_properties(gw_connect PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
add_executable(gw_procsup gw_procsup.c)
target_link_libraries(gw_procsup PRIVATE tether_procsup)
set_target_properties(gw_procsup PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
tether_unit_test(test_gw_unit SOURCES test_gw_unit.c LIBS tether_procsup tether_proto TIMEOUT 30)
tether_c_test(test_gw_hostile LABEL integration SOURCES test_gw_hostile.c LIBS tether_proto PkgConfig::JANSSON TIMEOUT 60)
tether_script_test(test_gw_exec LABEL integration SCRIPT test_gw_exec.sh TIMEOUT 90)
tether_script_test(test_gw_identity LABEL integration SCRIPT test_gw_identity.sh TIMEOUT 90)
tether_script_test(test_gw_ssh LABEL integration SCRIPT test_gw_ssh.sh TIMEOUT 90)
# The same scripts against the real supervisor (the proc-supervisor
# binary when it is built, else gw_procsup: procsup_init, the hardened
# spawner, seccomp notifier, env boundary, services through
# procsup_services_start()).
set(_gw_sup ${CMAKE_BINARY_DIR}/bin/proc-supervisor)
foreach(t exec identity ssh)
  tether_script_test(test_gw_${t}_procsup LABEL integration SCRIPT test_gw_${t}.sh TIMEOUT 90)
  set_property(TEST test_gw_${t}_procsup APPEND PROPERTY ENVIRONMENT "GW_SUP=procsup;GW_PROCSUP=${_gw_sup}")
endforeach()
# Older kernels: no pidfs keys, no PIDFD_GET_INFO, no SO_PEERPIDFD, no cgroup.
foreach(t exec identity)
  tether_script_test(test_gw_${t}_fallback LABEL integration SCRIPT test_gw_${t}.sh TIMEOUT 90)
  set_property(TEST test_gw_${t}_fallback APPEND PROPERTY ENVIRONMENT
               "GW_SUP=procsup;GW_PROCSUP=${_gw_sup};TETHER_FORCE_FALLBACK=all")
endforeach()
