# Compiler settings shared by every kevo target.
find_program(KEVO_CCACHE ccache)
if(KEVO_CCACHE AND NOT CMAKE_CXX_COMPILER_LAUNCHER)
  set(CMAKE_CXX_COMPILER_LAUNCHER "${KEVO_CCACHE}")
  set(CMAKE_C_COMPILER_LAUNCHER "${KEVO_CCACHE}")
endif()

add_library(kevo_warnings INTERFACE)
target_compile_options(kevo_warnings INTERFACE -Wall -Wextra -Wpedantic)
if(KEVO_WERROR)
  target_compile_options(kevo_warnings INTERFACE -Werror)
endif()

# No fused multiply-adds unless a source asks: GCC's default under -std=c++20 (ISO mode), while
# clang fuses a*b+c by default. Simulated figures and the reference evaluator's results are then
# the same bits whichever compiler built kevo (CI compares the two: test/determinism).
if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
  add_compile_options(-ffp-contract=off)
endif()

if(KEVO_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
  if(CMAKE_CXX_COMPILER_ID STREQUAL "Clang")
    # a C program that links kevo's C++ libraries (the C API's tests) needs UBSan's C++ handlers,
    # which clang links only into C++ programs unless asked
    add_link_options($<$<LINK_LANGUAGE:C>:-fsanitize-link-c++-runtime> $<$<LINK_LANGUAGE:C>:-lstdc++>)
  endif()
endif()
