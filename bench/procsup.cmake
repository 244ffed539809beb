# proc-supervisor benchmark: spawn rate through the hardened spawner vs
# posix_spawn, and connect() latency with and without the seccomp
# user-notification listener (bench/spawn_connect.c).
add_executable(bench_spawn_connect ${CMAKE_CURRENT_LIST_DIR}/spawn_connect.c)
target_link_libraries(bench_spawn_connect PRIVATE tether_procsup m)
set_target_properties(bench_spawn_connect PROPERTIES OUTPUT_NAME spawn_connect
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
