// The reply parser on messy model output: what comes out must be exactly the schedules.
#include <catch2/catch.hpp>

#include "kevo/llm/reply.hpp"

using kevo::llm::parse_reply;
using kevo::llm::ParsedReply;
using kevo::llm::ReplyParseOptions;
using Strings = std::vector<std::string>;

namespace {
Strings single(std::string_view s, bool truncated = false) {
  ReplyParseOptions o;
  o.truncated = truncated;
  return parse_reply(s, o).candidates;
}
Strings multi(std::string_view s, bool truncated = false) {
  ReplyParseOptions o;
  o.multiline = true;
  o.truncated = truncated;
  return parse_reply(s, o).candidates;
}
}  // namespace

TEST_CASE("a fenced block with one schedule per line gives each line") {
  CHECK(single("```schedule\na=1 b=2 c=3\na=4 b=5 c=6\n```\n") == Strings{"a=1 b=2 c=3", "a=4 b=5 c=6"});
}

TEST_CASE("prose around fenced blocks is ignored") {
  const char* r =
      "Looking at the profile, the vector engine is the bottleneck: I will increase b.\n\n"
      "```schedule\na=11 b=4 c=7\n```\n\nThis should reduce latency = good.\n";
  CHECK(single(r) == Strings{"a=11 b=4 c=7"});
}

TEST_CASE("several fenced blocks give one candidate each in reply order") {
  const char* r = "First:\n```\na=1 b=1 c=1\n```\nSecond:\n~~~text\na=2 b=2 c=2\n~~~\nThird:\n````schedule\na=3 b=3 c=3\n````";
  CHECK(single(r) == Strings{"a=1 b=1 c=1", "a=2 b=2 c=2", "a=3 b=3 c=3"});
}

TEST_CASE("CRLF and lone CR line ends are normalised") {
  CHECK(single("```\r\na=1 b=1 c=1\r\na=2 b=2 c=2\r\n```\r\n") == Strings{"a=1 b=1 c=1", "a=2 b=2 c=2"});
  CHECK(single("```\ra=1 b=1 c=1\ra=2 b=2 c=2\r```\r") == Strings{"a=1 b=1 c=1", "a=2 b=2 c=2"});
}

TEST_CASE("numbered and bulleted list markers are stripped") {
  const char* r = "```\n1. a=1 b=1 c=1\n2) a=2 b=2 c=2\n- a=3 b=3 c=3\n* a=4 b=4 c=4\n(5) a=5 b=5 c=5\n\xE2\x80\xA2 a=6 b=6 c=6\n```\n";
  CHECK(single(r) == Strings{"a=1 b=1 c=1", "a=2 b=2 c=2", "a=3 b=3 c=3", "a=4 b=4 c=4", "a=5 b=5 c=5", "a=6 b=6 c=6"});
}

TEST_CASE("an unfenced list inside prose yields only the schedule lines") {
  const char* r =
      "Here are three schedules to try:\n\n"
      "1. a=10 b=3 c=7\n"
      "2. `a=11 b=2 c=7`\n"
      "3. **a=12 b=3 c=6**\n\n"
      "These should all be faster than the parent because the tile is larger.\n";
  CHECK(single(r) == Strings{"a=10 b=3 c=7", "a=11 b=2 c=7", "a=12 b=3 c=6"});
}

TEST_CASE("schedule headers in front of items are stripped") {
  const char* r = "Schedule 1: a=1 b=1 c=1\nCandidate #2 - a=2 b=2 c=2\n**Option 3:** a=3 b=3 c=3\n";
  CHECK(single(r) == Strings{"a=1 b=1 c=1", "a=2 b=2 c=2", "a=3 b=3 c=3"});
}

TEST_CASE("exact duplicates are dropped and counted") {
  const ParsedReply p = parse_reply("```\na=1 b=1 c=1\na=1 b=1 c=1\n```\n```\na=1 b=1 c=1  \n```\n");
  CHECK(p.candidates == Strings{"a=1 b=1 c=1"});
  CHECK(p.duplicates == 2);
}

TEST_CASE("an unterminated fence cut mid-line drops only the incomplete last line") {
  const ParsedReply p = parse_reply("```schedule\na=1 b=1 c=1\na=2 b=2 c=2\na=3 b=");
  CHECK(p.candidates == Strings{"a=1 b=1 c=1", "a=2 b=2 c=2"});
  CHECK(p.dropped_partial == 1);
}

TEST_CASE("an unterminated fence that ended on a newline keeps every line") {
  CHECK(single("```\na=1 b=1 c=1\na=2 b=2 c=2\n") == Strings{"a=1 b=1 c=1", "a=2 b=2 c=2"});
}

TEST_CASE("a reply stopped by max_tokens drops its last item even when closed") {
  CHECK(single("```\na=1 b=1 c=1\na=2 b=2 c=2\n```\n", true) == Strings{"a=1 b=1 c=1"});
}

TEST_CASE("code blocks in programming languages are not schedules") {
  const char* r = "```python\nx = 1\nprint(x)\n```\n```schedule\na=1 b=1 c=1\n```\n";
  CHECK(single(r) == Strings{"a=1 b=1 c=1"});
}

TEST_CASE("comment and separator lines inside a block are skipped") {
  CHECK(single("```\n# fastest guess\na=1 b=1 c=1\n---\n// another\na=2 b=2 c=2\n```\n") ==
        Strings{"a=1 b=1 c=1", "a=2 b=2 c=2"});
}

TEST_CASE("a one-line inline fence is a block") {
  CHECK(single("Try ```a=5 b=5 c=5``` next.") == Strings{"a=5 b=5 c=5"});
}

TEST_CASE("a bare schedule with no fence and no newline is taken") { CHECK(single("a=9 b=9 c=9") == Strings{"a=9 b=9 c=9"}); }

TEST_CASE("pure prose gives no candidates") {
  CHECK(single("I am sorry, but I cannot help with that request.").empty());
  CHECK(single("The bottleneck is the vector engine: it is busy 90% of the time.\n").empty());
  CHECK(single("").empty());
  CHECK(single("```\n```\n").empty());
}

TEST_CASE("multi-line schedules are split at blank lines, separators and list markers") {
  const char* r =
      "```schedule\n"
      "tile m=128 n=512\n"
      "order k m n\n"
      "\n"
      "tile m=64 n=256\n"
      "order m n k\n"
      "---\n"
      "tile m=32 n=128\n"
      "order n m k\n"
      "```\n";
  CHECK(multi(r) == Strings{"tile m=128 n=512\norder k m n", "tile m=64 n=256\norder m n k", "tile m=32 n=128\norder n m k"});
}

TEST_CASE("multi-line schedules in separate fences are one candidate per fence") {
  const char* r = "Option A:\n```\n  tile m=128\n  order k m n\n```\nOption B:\n```\ntile m=64\norder m n k\n```\n";
  CHECK(multi(r) == Strings{"tile m=128\norder k m n", "tile m=64\norder m n k"});
}

TEST_CASE("multi-line schedules under numbered headers are separated") {
  const char* r = "```\n### Schedule 1\ntile m=128\norder k m n\n### Schedule 2\ntile m=64\norder m n k\n```\n";
  CHECK(multi(r) == Strings{"tile m=128\norder k m n", "tile m=64\norder m n k"});
}

TEST_CASE("multi-line mode drops the incomplete schedule of an unterminated fence") {
  const ParsedReply p = parse_reply("```\ntile m=128\norder k m n\n\ntile m=64\norder m",
                                    ReplyParseOptions{.multiline = true, .truncated = false, .max_candidates = 64, .item_start = ""});
  CHECK(p.candidates == Strings{"tile m=128\norder k m n"});
  CHECK(p.dropped_partial == 1);
}

TEST_CASE("the number of candidates is capped") {
  std::string r = "```\n";
  for (int i = 0; i < 200; ++i) r += "a=" + std::to_string(i) + " b=1 c=1\n";
  r += "```\n";
  CHECK(parse_reply(r, ReplyParseOptions{.multiline = false, .truncated = false, .max_candidates = 10, .item_start = ""}).candidates.size() == 10);
}

TEST_CASE("hostile input neither crashes nor yields empty candidates") {
  std::string junk;
  static const char pattern[] = "```\n\x00\r\r\n1.\n- \n* *\n``` ```\n~~~~~~\n";
  for (std::size_t i = 0; i < 5000; ++i) junk += pattern[(i * 7) % (sizeof pattern - 1)];
  junk += std::string(100000, '`');
  junk += std::string(100000, '=');
  for (bool m : {false, true}) {
    ReplyParseOptions o;
    o.multiline = m;
    const ParsedReply p = parse_reply(junk, o);
    for (const auto& c : p.candidates) {
      CHECK_FALSE(c.empty());
      CHECK(c.find('\r') == std::string::npos);
    }
  }
}

TEST_CASE("item_start_of takes a schedule's leading word, with a nest name when present") {
  using kevo::llm::item_start_of;
  CHECK(item_start_of("fuse relu0=yes\nengine relu0=vector\n") == "fuse");
  CHECK(item_start_of("# comment\nnest acc: tile m=128; block m=1\nnest C: bufs 2\n") == "nest acc:");
  CHECK(item_start_of("tile m=128 n=512 k=128; block m=16") == "tile");
  CHECK(item_start_of("a=3\nb=5\n") == "a");
  CHECK(item_start_of("") == "");
}

TEST_CASE("multi-line schedules written back to back are split at their repeated first line") {
  ReplyParseOptions o;
  o.multiline = true;
  o.item_start = "fuse";
  const char* r =
      "```\n"
      "fuse relu0=yes\nengine relu0=vector\nnest acc: tile m=128\nnest C: bufs 2\n"
      "fuse relu0=no\nengine relu0=scalar\nnest acc: tile m=64\nnest C: bufs 1\n"
      "```\n";
  CHECK(parse_reply(r, o).candidates ==
        Strings{"fuse relu0=yes\nengine relu0=vector\nnest acc: tile m=128\nnest C: bufs 2",
                "fuse relu0=no\nengine relu0=scalar\nnest acc: tile m=64\nnest C: bufs 1"});
}

TEST_CASE("unfenced multi-line schedules keep keyword lines without assignments") {
  const char* r =
      "Here is my proposal:\n\n"
      "tile m=128 n=512 k=128; block m=16 n=2 k=8\n"
      "stationary A\n"
      "evict vector\n\n"
      "It keeps the tensor engine busy.\n";
  CHECK(multi(r) == Strings{"tile m=128 n=512 k=128; block m=16 n=2 k=8\nstationary A\nevict vector"});
}

TEST_CASE("schedules in kevo's own multi-line text form are read whole") {
  const std::string s1 =
      "tile m=128 n=512 k=128; block m=16 n=2 k=8; order n.b k.b m.b n m k\n"
      "stationary A; load A@m.b x1 dma=row q=1; load B@k.b x1 dma=row q=1\n"
      "acc sbuf x1; store C@n.b x1 dma=row q=1; evict vector";
  const std::string s2 =
      "tile m=128 n=256 k=128; block m=8 n=4 k=8; order n.b k.b m.b n m k\n"
      "stationary B; load A@k.b x2 dma=row q=2; load B@k.b x2 dma=row q=1\n"
      "acc psum x2; store C@n.b x2 dma=row q=1; evict scalar";
  ReplyParseOptions o;
  o.multiline = true;
  o.item_start = kevo::llm::item_start_of(s1);
  CHECK(o.item_start == "tile");
  const std::string reply = "Two ideas. First keeps A stationary:\n```schedule\n# bigger n tile\n" + s1 + "\n" + s2 +
                            "\n```\nThe second moves accumulation to PSUM.";
  const auto c = parse_reply(reply, o).candidates;
  REQUIRE(c.size() == 2);
  CHECK(c[0] == "# bigger n tile\n" + s1);
  CHECK(c[1] == s2);
}
