# Env boundary benchmark: policy load (baseline + agent preset + one file)
# and envb_build over a realistic parent environment.
add_executable(bench_envb ${CMAKE_CURRENT_SOURCE_DIR}/envb.c)
target_link_libraries(bench_envb PRIVATE tether_envb tether_policy)
set_target_properties(bench_envb PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
