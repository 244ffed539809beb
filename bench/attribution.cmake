# Attribution benchmark (registry vs holder search vs naive /proc scan).
add_executable(bench_attribution ${CMAKE_CURRENT_SOURCE_DIR}/attribution.c)
target_link_libraries(bench_attribution PRIVATE tether_identity tether_common m)
set_target_properties(bench_attribution PROPERTIES OUTPUT_NAME attribution
                      RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
