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

if(KEVO_SANITIZE)
  add_compile_options(-fsanitize=address,undefined -fno-omit-frame-pointer -fno-sanitize-recover=undefined)
  add_link_options(-fsanitize=address,undefined)
endif()
