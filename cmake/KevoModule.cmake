# kevo_module(<name> [DEPS <kevo modules>] [PRIVATE_LIBS <libs>] [PUBLIC_LIBS <libs>])
# Builds lib/<name>/*.cpp into the static library kevo_<name> (alias kevo::<name>).
function(kevo_module name)
  cmake_parse_arguments(KM "" "" "DEPS;PRIVATE_LIBS;PUBLIC_LIBS" ${ARGN})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.cpp")
  add_library(kevo_${name} STATIC ${srcs})
  add_library(kevo::${name} ALIAS kevo_${name})
  set_target_properties(kevo_${name} PROPERTIES EXPORT_NAME ${name} OUTPUT_NAME kevo_${name})
  target_include_directories(kevo_${name} PUBLIC
    $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
    $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
  target_compile_features(kevo_${name} PUBLIC cxx_std_20)
  set(deps "")
  foreach(d IN LISTS KM_DEPS)
    list(APPEND deps kevo_${d})
  endforeach()
  target_link_libraries(kevo_${name} PUBLIC ${deps} ${KM_PUBLIC_LIBS}
                        PRIVATE ${KM_PRIVATE_LIBS} $<BUILD_INTERFACE:kevo_warnings>)
  set_property(GLOBAL APPEND PROPERTY KEVO_EXPORTED_TARGETS kevo_${name})
  set_property(GLOBAL APPEND PROPERTY KEVO_BUILT_MODULES kevo_${name})
endfunction()

# kevo_test(<module> [LIBS <extra libs>] [COST <seconds>]): test/<module>/*.cpp -> one binary
# test_<module>. COST is the binary's rough run time (seconds under the sanitizers): ctest -j starts
# the costliest first, which on a fresh build (no cost data yet, as in CI) keeps a long test from
# starting last and running alone.
function(kevo_test module)
  cmake_parse_arguments(KT "" "COST" "LIBS" ${ARGN})
  if(NOT KT_COST)
    set(KT_COST 1)
  endif()
  file(GLOB srcs CONFIGURE_DEPENDS "${CMAKE_CURRENT_SOURCE_DIR}/*.cpp")
  add_executable(test_${module} ${srcs})
  target_link_libraries(test_${module} PRIVATE kevo_catch_main kevo_${module} ${KT_LIBS} kevo_warnings)
  target_compile_definitions(test_${module} PRIVATE
    KEVO_SOURCE_DIR="${PROJECT_SOURCE_DIR}" KEVO_BINARY_DIR="${PROJECT_BINARY_DIR}")
  target_precompile_headers(test_${module} PRIVATE <catch2/catch.hpp> <string> <vector>)
  add_test(NAME ${module} COMMAND test_${module} --use-colour no)
  # 15 minutes per module binary; 40 under the sanitizers, where the lowering's brute-force
  # checks run several times slower (test/lower took 650-900 s under ASan on a loaded 2-core machine)
  if(KEVO_SANITIZE)
    set(kevo_test_timeout 2400)
  else()
    set(kevo_test_timeout 900)
  endif()
  set_tests_properties(${module} PROPERTIES TIMEOUT ${kevo_test_timeout} LABELS ${module} COST ${KT_COST})
endfunction()
