#include <catch2/catch.hpp>

#include "kevo/llm/reply.hpp"
using namespace kevo::llm;
TEST_CASE("placeholder") { CHECK(parse_reply("a=1\n").candidates.size() == 1); }
