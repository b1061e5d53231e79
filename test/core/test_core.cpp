#include <catch2/catch.hpp>
#include <sys/stat.h>

#include <filesystem>
#include <set>

#include "kevo/core.hpp"

using namespace kevo;

TEST_CASE("diagnostic names file, line and column and puts a caret under the column", "[core]") {
  const std::string text = "kernel k(\n  A: bf16[M=4]\n  oops\n";
  const auto d = make_diagnostic(text, text.find("oops"), "k.kir", "expected ')'");
  CHECK(d.loc.line == 3);
  CHECK(d.loc.column == 3);
  CHECK(d.headline() == "k.kir:3:3: expected ')'");
  CHECK(d.str() == "k.kir:3:3: expected ')'\n    oops\n    ^");
}

TEST_CASE("printable escapes control bytes and broken UTF-8, keeps text", "[core]") {
  CHECK(printable("tile m=64") == "tile m=64");
  CHECK(printable("A\xc2\xb7" "B") == "A\xc2\xb7" "B");  // U+00B7 kept
  CHECK(printable(std::string("\x1b[31m\xff\x00x", 8)) == "\\x1b[31m\\xff\\x00x");
  CHECK(printable("\xe2\x82") == "\\xe2\\x82");  // a truncated sequence
  CHECK(printable("\xed\xa0\x80") == "\\xed\\xa0\\x80");  // a surrogate
  CHECK(printable("a\tb\n") == "a\\x09b\\x0a");
  // characters that reorder or hide what a terminal shows are valid UTF-8 but escaped too
  CHECK(printable("z\xe2\x80\xae" "fdp.exe") == "z\\u202efdp.exe");  // U+202E right-to-left override
  CHECK(printable("a\xc2\x85" "b\xe2\x81\xa6") == "a\\u0085b\\u2066");  // a C1 control; an isolate
  CHECK(printable("\xe2\x80\x94") == "\xe2\x80\x94");  // U+2014 kept
  CHECK(valid_utf8("tile \xc2\xb7 \xf0\x9f\x98\x80"));
  CHECK_FALSE(valid_utf8("rel\xff" "1"));
  CHECK_FALSE(valid_utf8("\xed\xa0\x80"));  // a surrogate
  CHECK_FALSE(valid_utf8("\xc0\xaf"));  // overlong
  CHECK_FALSE(valid_utf8("\xe2\x82"));  // cut short
  // A diagnostic on a line with raw bytes shows them escaped, the caret under the same character.
  const std::string text = "tile m=\x1b oops\n";
  const auto d = make_diagnostic(text, text.find("oops"), "s.schedule", "bad");
  CHECK(d.str() == "s.schedule:1:10: bad\n  tile m=\\x1b oops\n              ^");
}

TEST_CASE("excerpt keeps short values and cuts long ones between characters", "[core]") {
  CHECK(excerpt("M=512") == "M=512");
  CHECK(excerpt(std::string(64, 'x')) == std::string(64, 'x'));
  CHECK(excerpt(std::string(20000, '9')) == std::string(64, '9') + "... (20000 bytes)");
  // a two-byte character across the cut is left out whole, not split
  const std::string dots = std::string(63, 'a') + "\xc2\xb7" + "tail";
  CHECK(excerpt(dots) == std::string(63, 'a') + "... (69 bytes)");
  CHECK(excerpt("a\x1b" "b", 1) == "a... (3 bytes)");
  CHECK(excerpt("\x1b" "bc", 2) == "\\x1bb... (3 bytes)");
}

TEST_CASE("stable hash is fixed across runs", "[core]") {
  // Pinned values: a change here breaks every cache and checkpoint users have.
  CHECK(hex64(stable_hash("")) == hex64(StableHasher{}.u64(0).digest()));
  CHECK(stable_hash("matmul") != stable_hash("matmux"));
  CHECK(stable_hash("abc") == stable_hash(std::string("abc")));
  CHECK(hex64(0x1234abcdULL) == "000000001234abcd");
}

TEST_CASE("rng streams are pure functions of seed, stream and counter", "[core]") {
  Rng a(42, 7), b(42, 7), c(42, 8);
  for (int i = 0; i < 100; ++i) {
    const auto x = a();
    CHECK(x == b());
  }
  CHECK(Rng(42, 7)() != c());
  CHECK(Rng(1).fork(3)() == Rng(1).fork(3)());
  CHECK(Rng(1).fork(3)() != Rng(1).fork(4)());
  Rng r(5);
  std::vector<int> counts(6, 0);
  for (int i = 0; i < 60000; ++i) counts[r.below(6)]++;
  for (int c6 : counts) CHECK(c6 > 9000);
  for (int i = 0; i < 1000; ++i) {
    const double u = r.uniform();
    CHECK((u >= 0.0 && u < 1.0));
  }
}

TEST_CASE("space cardinality, containment, random and nth enumeration", "[core]") {
  Space s;
  s.add(Gene::ordinal("tile", {32, 64, 128}, "g"));
  s.add(Gene::permutation("order", {"m", "n", "k"}, "g"));
  s.add(Gene::boolean("fuse"));
  CHECK(s.width() == 5);
  REQUIRE(s.cardinality().has_value());
  CHECK(*s.cardinality() == 3 * 6 * 2);
  std::set<Genome> all;
  for (std::uint64_t i = 0; i < *s.cardinality(); ++i) {
    auto g = s.nth(i);
    CHECK(s.contains(g));
    all.insert(g);
  }
  CHECK(all.size() == 36);
  Rng rng(1);
  for (int i = 0; i < 200; ++i) CHECK(s.contains(s.random(rng)));
  Genome bad = s.first();
  bad[1] = bad[2];  // not a permutation
  CHECK_FALSE(s.contains(bad));
  Genome out = s.first();
  out[0] = 3;
  CHECK_FALSE(s.contains(out));
  CHECK(s.describe(s.first()) == "tile=32 order=m,n,k fuse=false");
  CHECK_THROWS_AS(s.add(Gene::boolean("fuse")), Error);
  CHECK(s.groups() == std::vector<std::string>{"g", ""});
}

TEST_CASE("genome hash distinguishes genomes and is stable", "[core]") {
  CHECK(genome_hash(Genome{1, 2, 3}) == genome_hash(Genome{1, 2, 3}));
  CHECK(genome_hash(Genome{1, 2, 3}) != genome_hash(Genome{1, 3, 2}));
  CHECK(genome_hash(Genome{}) != genome_hash(Genome{0}));
}

TEST_CASE("expected holds a value or an error", "[core]") {
  Expected<int, std::string> ok = 3;
  Expected<int, std::string> bad = unexpected(std::string("nope"));
  CHECK(ok.has_value());
  CHECK(*ok == 3);
  CHECK_FALSE(bad);
  CHECK(bad.error() == "nope");
  CHECK_THROWS_AS(bad.value(), Error);
}

namespace {
// A check in the style of lower::lower_into: fills `out`, returns nothing or the reason.
Expected<void, Invalid> halve(int x, int& out) {
  if (x % 2 != 0) return unexpected(Invalid{"odd", std::to_string(x) + " is odd", 0, 1});
  out = x / 2;
  return {};
}
}  // namespace

TEST_CASE("expected<void, E>: success carries nothing, failure its reason", "[core][errors]") {
  int out = 0;
  const auto ok = halve(8, out);
  CHECK(ok);
  CHECK(ok.has_value());
  CHECK_NOTHROW(ok.value());
  CHECK(out == 4);
  CHECK_THROWS(ok.error());  // no reason on success (not an empty one)

  const auto bad = halve(7, out);
  REQUIRE_FALSE(bad);
  CHECK_FALSE(bad.has_value());
  CHECK(out == 4);  // untouched
  CHECK(bad.error().code == "odd");
  CHECK(bad.error().str() == "odd: 7 is odd");
  CHECK(bad.error().has_fix());
  CHECK_THROWS_AS(bad.value(), Error);

  // an E that is not default-constructible works too
  struct Reason {
    explicit Reason(std::string w) : what(std::move(w)) {}
    std::string what;
  };
  Expected<void, Reason> r = unexpected(Reason("because"));
  CHECK(r.error().what == "because");
  Expected<void, Reason> fine;
  CHECK(fine);
}

TEST_CASE("the invalid-schedule type: code, message, optional repair hint", "[core][errors]") {
  const Invalid plain{"sbuf_overflow", "needs 230 KiB per partition, trn1 has 192 KiB"};
  CHECK_FALSE(plain.has_fix());
  CHECK(plain.fix_gene == -1);
  CHECK(plain.str() == "sbuf_overflow: needs 230 KiB per partition, trn1 has 192 KiB");
  const Invalid hinted{"tile_limit", "too wide", 3, 0};
  CHECK(hinted.has_fix());
  CHECK_FALSE(Invalid{"tile_limit", "x", 3, -1}.has_fix());
}

TEST_CASE("atomic write replaces a file and read_file reports missing files", "[core]") {
  const auto dir = std::filesystem::temp_directory_path() / "kevo_core_io_test";
  std::filesystem::create_directories(dir);
  const auto p = dir / "x.txt";
  write_file_atomic(p, "one");
  write_file_atomic(p, "two");
  CHECK(read_file(p) == "two");
  CHECK_FALSE(std::filesystem::exists(p.string() + ".tmp"));
  // a file named like the old fixed temporary is left alone (`kevo db export dump --db dump.tmp`
  // truncated the database it exported), and no temporary is left behind
  write_file_atomic(p.string() + ".tmp", "precious");
  write_file_atomic(p, "three");
  CHECK(read_file(p.string() + ".tmp") == "precious");
  CHECK(read_file(p) == "three");
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator(dir)) ++files;
  CHECK(files == 2);
  std::filesystem::remove(p.string() + ".tmp");
  write_file_atomic(p, "two");
  CHECK_THROWS_WITH(read_file(dir / "missing"), Catch::Contains("cannot read") && Catch::Contains("missing"));
  // a bounded read stops past its limit (/dev/zero never ends); at the limit it reads whole
  CHECK(read_file(p, 3) == "two");
  CHECK_THROWS_WITH(read_file(p, 2), Catch::Contains("cannot read") && Catch::Contains("more than 2 bytes"));
  CHECK_THROWS_WITH(read_file("/dev/zero", 1 << 20), Catch::Contains("/dev/zero: more than 1048576 bytes"));
  // an output that is an input, by another path, is refused; another file is not
  CHECK_THROWS_WITH(check_not_input(dir / "." / "x.txt", "--out", {p}), Catch::Contains("--out") && Catch::Contains("which this command reads"));
  CHECK_NOTHROW(check_not_input(dir / "other.txt", "--out", {p}));
  CHECK_NOTHROW(check_not_input(p, "--out", {dir / "missing"}));
  // only a regular file is replaced: the rename would swap a symlink, a FIFO or a device for a file
  const auto link = dir / "link.json", fifo = dir / "fifo";
  std::filesystem::create_symlink(p, link);
  CHECK_THROWS_WITH(write_file_atomic(link, "x"), Catch::Contains("is a symbolic link"));
  CHECK(std::filesystem::is_symlink(link));
  REQUIRE(::mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THROWS_WITH(write_file_atomic(fifo, "x"), Catch::Contains("is a FIFO"));
  CHECK_THROWS_WITH(write_file_atomic(dir, "x"), Catch::Contains("is a directory"));
  CHECK(read_file(p) == "two");
  std::filesystem::remove_all(dir);
}

TEST_CASE("status strings round-trip", "[core]") {
  for (auto s : {Status::ok, Status::invalid, Status::incorrect, Status::timeout, Status::crashed, Status::error})
    CHECK(status_from_string(to_string(s)) == s);
  CHECK_FALSE(status_from_string("fine").has_value());
}

TEST_CASE("continuous genes: positions map to reals in their interval, linear or geometric", "[core][genes]") {
  Space s;
  s.add(Gene::continuous("x", -2.0, 3.0));
  s.add(Gene::continuous("lr", 1e-5, 1e-1, true));
  const Gene& x = s.gene(0);
  const Gene& lr = s.gene(1);
  CHECK(x.choices() == static_cast<std::size_t>(Gene::kContinuousSteps) + 1);
  CHECK(x.real(0) == -2.0);
  CHECK(x.real(Gene::kContinuousSteps) == 3.0);
  CHECK(x.real(Gene::kContinuousSteps / 2) == Approx(0.5));
  CHECK(lr.real(0) == Approx(1e-5));
  CHECK(lr.real(Gene::kContinuousSteps) == 1e-1);
  CHECK(lr.real(Gene::kContinuousSteps / 2) == Approx(1e-3));  // the geometric midpoint
  CHECK(lr.real(Gene::kContinuousSteps / 4) == Approx(1e-4));
  for (double v : {-2.0, -1.25, 0.0, 0.1, 2.999, 3.0}) CHECK(x.real(x.position(v)) == Approx(v).margin(5.0 / Gene::kContinuousSteps));
  for (double v : {1e-5, 3e-4, 0.02, 0.1}) CHECK(lr.real(lr.position(v)) == Approx(v).epsilon(1e-6));
  CHECK(x.position(-10) == 0);  // clamped
  CHECK(x.position(10) == Gene::kContinuousSteps);
  CHECK(x.position(std::nan("")) == 0);
  Genome g{x.position(0.5), lr.position(1e-3)};
  CHECK(s.contains(g));
  CHECK(s.real(g, 0) == Approx(0.5));
  CHECK(s.describe(g) == "x=0.5 lr=0.001");
  CHECK_FALSE(s.contains(Genome{Gene::kContinuousSteps + 1, 0}));
  CHECK_FALSE(s.contains(Genome{-1, 0}));
  Rng rng(3);
  for (int i = 0; i < 1000; ++i) {
    const auto r = s.random(rng);
    REQUIRE(s.contains(r));
    REQUIRE((s.real(r, 0) >= -2.0 && s.real(r, 0) <= 3.0));
  }
  CHECK(s.log10_cardinality() == Approx(2 * std::log10(Gene::kContinuousSteps + 1.0)));
}

TEST_CASE("continuous genes: bad bounds are rejected by name; bounds are part of the space's identity", "[core][genes]") {
  Space s;
  CHECK_THROWS_WITH(s.add(Gene::continuous("a", 1.0, 1.0)), Catch::Contains("'a'") && Catch::Contains("lo < hi"));
  CHECK_THROWS_WITH(s.add(Gene::continuous("b", 0.0, 1.0, true)), Catch::Contains("'b'") && Catch::Contains("lo > 0"));
  CHECK_THROWS_WITH(s.add(Gene::continuous("c", 0.0, INFINITY)), Catch::Contains("'c'"));
  Space a, b, c;
  a.add(Gene::continuous("x", 0.0, 1.0));
  b.add(Gene::continuous("x", 0.0, 2.0));
  c.add(Gene::continuous("x", 0.1, 1.0, true));
  CHECK(space_fingerprint(a) != space_fingerprint(b));
  CHECK(space_fingerprint(b) != space_fingerprint(c));
}
