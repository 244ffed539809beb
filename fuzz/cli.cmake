# tether CLI: the parser of the proxy's answer to `tether connect`.
tether_fuzz_target(fuzz_connect_answer
  SOURCES ${CMAKE_CURRENT_LIST_DIR}/fuzz_connect_answer.c ${CMAKE_SOURCE_DIR}/cli/connect_answer.c
  LIBS ${HTTP_PARSER_LIB})
target_include_directories(fuzz_connect_answer PRIVATE ${HTTP_PARSER_INCLUDE})
