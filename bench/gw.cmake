# Identity service benchmark (proc-supervisor/idservice.c): signed identity
# requests served over a Unix control socket, end to end.
add_executable(idservice_bench ${CMAKE_CURRENT_SOURCE_DIR}/idservice_bench.c)
target_link_libraries(idservice_bench PRIVATE tether_procsup tether_proto tether_identity tether_common)
set_target_properties(idservice_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
