# net-supervisor benchmark: bulk throughput and short-request latency,
# direct vs net-supervisor vs tinyproxy (bench/netsup_bench.sh drives it).
add_executable(proxy_bench ${CMAKE_CURRENT_LIST_DIR}/proxy_bench.c)
target_link_libraries(proxy_bench PRIVATE Threads::Threads)
set_target_properties(proxy_bench PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/bench)
