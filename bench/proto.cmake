# Delegation protocol benchmark: signed identity round trips over a Unix
# socket between two processes, beside raw libsodium sign+verify.
add_executable(bench_identity_rtt ${CMAKE_CURRENT_SOURCE_DIR}/identity_rtt.c)
target_link_libraries(bench_identity_rtt PRIVATE tether_proto)
set_target_properties(bench_identity_rtt PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
