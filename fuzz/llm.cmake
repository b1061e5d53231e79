# libFuzzer target for the LLM reply parser; included from fuzz/CMakeLists.txt after its clang and
# KEVO_BUILD_FUZZ checks. The parser is std-only, so its one source file is compiled in with the
# fuzzer's instrumentation.
add_executable(fuzz_llm_reply ${PROJECT_SOURCE_DIR}/fuzz/fuzz_llm_reply.cpp ${PROJECT_SOURCE_DIR}/lib/llm/reply.cpp)
target_include_directories(fuzz_llm_reply PRIVATE ${PROJECT_SOURCE_DIR}/include)
target_compile_features(fuzz_llm_reply PRIVATE cxx_std_20)
target_compile_options(fuzz_llm_reply PRIVATE -fsanitize=fuzzer,address,undefined -fno-omit-frame-pointer)
target_link_options(fuzz_llm_reply PRIVATE -fsanitize=fuzzer,address,undefined)
