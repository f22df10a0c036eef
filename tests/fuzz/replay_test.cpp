// The fuzz targets inside the normal suite, with any compiler: every seed of
// tests/fuzz/corpus/<target>/ and then a bounded number of deterministic mutations of them go
// through the same functions the libFuzzer binaries call (targets.hpp). A mutation that makes a
// target throw anything but holmes::Error (or crash) fails the test; the input is written to a
// file named in the failure so that it can be replayed with the fuzz binary or added to the
// corpus. HOLMES_FUZZ_REPLAY_MUTATIONS overrides the number of mutations of every target.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.hpp"
#include "targets.hpp"

namespace holmes::fuzz {
namespace {

using Bytes = std::vector<std::uint8_t>;
namespace fs = std::filesystem;

constexpr std::size_t kMaxInputBytes = 1 << 16;

// `usual` unless HOLMES_FUZZ_REPLAY_MUTATIONS says otherwise.
std::size_t mutations(std::size_t usual) {
  if (const char* text = std::getenv("HOLMES_FUZZ_REPLAY_MUTATIONS")) {
    return static_cast<std::size_t>(std::strtoull(text, nullptr, 10));
  }
  return usual;
}

Bytes read_file(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

std::vector<Bytes> load_corpus(std::string_view target) {
  std::vector<fs::path> paths;
  for (const auto& entry : fs::directory_iterator(fs::path(HOLMES_FUZZ_CORPUS) / target)) {
    if (entry.is_regular_file()) paths.push_back(entry.path());
  }
  std::sort(paths.begin(), paths.end());  // the same mutation sequence on every machine
  std::vector<Bytes> corpus;
  for (const auto& path : paths) corpus.push_back(read_file(path));
  return corpus;
}

// Tokens that matter to the decoders: YAML structure and values near the parsers' bounds, and
// the store protocol's op codes and length limits (as little-endian bytes).
const std::vector<std::string>& tokens() {
  static const std::vector<std::string> kTokens = {"{",
                                                   "}",
                                                   "[",
                                                   "]",
                                                   ":",
                                                   ": ",
                                                   ",",
                                                   "- ",
                                                   "\n",
                                                   "\n  ",
                                                   "#",
                                                   "&a ",
                                                   "*a",
                                                   "!!str ",
                                                   "<<: ",
                                                   "'",
                                                   "\"",
                                                   "|\n",
                                                   "~",
                                                   "null",
                                                   "-1",
                                                   "0",
                                                   "1e309",
                                                   "nan",
                                                   "99999999999999999999",
                                                   "2147483648",
                                                   "count: ",
                                                   "width: 13",
                                                   "first: ",
                                                   "gpus: ",
                                                   "nics: ",
                                                   "hosts: ",
                                                   "islands: ",
                                                   "link_classes: ",
                                                   "fabric: ib",
                                                   "gbit_per_s: ",
                                                   "name_prefix: ",
                                                   "preset: ",
                                                   "layers: ",
                                                   "heads: ",
                                                   "global_batch: ",
                                                   "recompute: ",
                                                   std::string("\x00\x00\x00\x00", 4),
                                                   std::string("\xff\xff\xff\xff", 4),
                                                   std::string("\x00\x10\x00\x00", 4),
                                                   std::string("\x01\x00\x00\x04", 4),
                                                   std::string("\x48\x4d\x46\x31", 4)};
  return kTokens;
}

// One random edit of `input`, in the spirit of libFuzzer's mutators.
void mutate(Bytes& input, const std::vector<Bytes>& corpus, std::mt19937_64& rng) {
  auto below = [&](std::size_t n) { return n == 0 ? 0 : static_cast<std::size_t>(rng() % n); };
  switch (below(8)) {
    case 0:  // flip a bit
      if (!input.empty()) input[below(input.size())] ^= static_cast<std::uint8_t>(1u << below(8));
      break;
    case 1: {  // an interesting byte
      static constexpr std::uint8_t kBytes[] = {0, 1, 0x7f, 0x80, 0xff, '\n', ':', '-', '9'};
      if (!input.empty()) input[below(input.size())] = kBytes[below(std::size(kBytes))];
      break;
    }
    case 2: {  // insert a token
      const std::string& token = tokens()[below(tokens().size())];
      input.insert(input.begin() + static_cast<std::ptrdiff_t>(below(input.size() + 1)),
                   token.begin(), token.end());
      break;
    }
    case 3: {  // erase a range
      if (input.empty()) break;
      const std::size_t at = below(input.size());
      const std::size_t n = 1 + below(std::min<std::size_t>(16, input.size() - at));
      input.erase(input.begin() + static_cast<std::ptrdiff_t>(at),
                  input.begin() + static_cast<std::ptrdiff_t>(at + n));
      break;
    }
    case 4: {  // duplicate a range elsewhere
      if (input.empty()) break;
      const std::size_t from = below(input.size());
      const std::size_t n = 1 + below(std::min<std::size_t>(64, input.size() - from));
      const Bytes piece(input.begin() + static_cast<std::ptrdiff_t>(from),
                        input.begin() + static_cast<std::ptrdiff_t>(from + n));
      input.insert(input.begin() + static_cast<std::ptrdiff_t>(below(input.size() + 1)),
                   piece.begin(), piece.end());
      break;
    }
    case 5:  // truncate
      input.resize(below(input.size() + 1));
      break;
    case 6: {  // overwrite 4 bytes with a little-endian length near a limit
      static constexpr std::uint32_t kValues[] = {
          0, 1, 3, 4095, 4096, 4097, 0x7fffffff, 0xffffffff, 64u << 20, (4u << 20) + 1};
      if (input.size() < 4) break;
      const std::uint32_t v = kValues[below(std::size(kValues))];
      const std::size_t at = below(input.size() - 3);
      for (int i = 0; i < 4; ++i) input[at + i] = static_cast<std::uint8_t>(v >> (8 * i));
      break;
    }
    default: {  // splice with another seed
      const Bytes& other = corpus[below(corpus.size())];
      if (other.empty()) break;
      const std::size_t cut = below(input.size() + 1);
      const std::size_t from = below(other.size());
      input.resize(cut);
      input.insert(input.end(), other.begin() + static_cast<std::ptrdiff_t>(from), other.end());
      break;
    }
  }
  if (input.size() > kMaxInputBytes) input.resize(kMaxInputBytes);
}

// Runs one input; returns "" when the target accepted or refused it properly, else what it threw.
// With HOLMES_FUZZ_REPLAY_LAST=path every input is first written there, so that the input of a
// crash (which ends the process before any report) can be found and replayed.
std::string run_one(const Target& target, const Bytes& input) {
  if (const char* last = std::getenv("HOLMES_FUZZ_REPLAY_LAST")) {
    std::ofstream(last, std::ios::binary | std::ios::trunc)
        .write(reinterpret_cast<const char*>(input.data()),
               static_cast<std::streamsize>(input.size()));
  }
  try {
    target.run(Input(input.data(), input.size()));
    return "";
  } catch (const Error&) {
    return "";  // decoders may refuse with holmes::Error; targets catch it themselves anyway
  } catch (const Finding& e) {
    return std::string("finding: ") + e.what();
  } catch (const std::exception& e) {
    return std::string("unexpected exception: ") + e.what();
  } catch (...) {
    return "unexpected exception of unknown type";
  }
}

std::string save_failure(const Target& target, const Bytes& input, std::size_t index) {
  const fs::path path = fs::temp_directory_path() / ("holmes-fuzz-" + std::string(target.name) +
                                                     "-" + std::to_string(index) + ".bin");
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(input.data()),
             static_cast<std::streamsize>(input.size()));
  return path.string();
}

// FNV-1a of the target's name: a seed that is the same with every standard library.
std::uint64_t seed_of(std::string_view name) {
  std::uint64_t hash = 14695981039346656037ull;
  for (const char c : name) {
    hash ^= static_cast<unsigned char>(c);
    hash *= 1099511628211ull;
  }
  return hash;
}

const Target& target_named(std::string_view name) {
  for (const Target& target : all_targets()) {
    if (target.name == name) return target;
  }
  throw std::logic_error("no fuzz target named " + std::string(name));
}

// Every seed and `total` mutations of them through one target; a finding fails the test (at most
// five are reported).
void replay(std::string_view name, std::size_t total) {
  const Target& target = target_named(name);
  const std::vector<Bytes> corpus = load_corpus(target.name);
  ASSERT_FALSE(corpus.empty()) << "no seeds in corpus/" << target.name;
  std::size_t failures = 0;
  for (std::size_t i = 0; i < corpus.size(); ++i) {
    const std::string problem = run_one(target, corpus[i]);
    if (!problem.empty() && ++failures <= 5) {
      ADD_FAILURE() << target.name << " seed " << i << ": " << problem << " (input saved to "
                    << save_failure(target, corpus[i], i) << ")";
    }
  }
  // Seeded per target: each target's sequence stays the same when another target changes.
  std::mt19937_64 rng(seed_of(target.name));
  const auto start = std::chrono::steady_clock::now();
  for (std::size_t i = 0; i < total; ++i) {
    Bytes input = corpus[rng() % corpus.size()];
    const std::size_t edits = 1 + rng() % 4;
    for (std::size_t e = 0; e < edits; ++e) mutate(input, corpus, rng);
    const std::string problem = run_one(target, input);
    if (!problem.empty() && ++failures <= 5) {
      ADD_FAILURE() << target.name << " mutation " << i << ": " << problem << " (input saved to "
                    << save_failure(target, input, corpus.size() + i) << ")";
    }
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%s: %zu seeds + %zu mutations in %.2f s, %zu findings\n",
              std::string(target.name).c_str(), corpus.size(), total, seconds, failures);
  EXPECT_EQ(failures, 0u);
}

// Counts sized to about a second each here: the binary decoders take well under a microsecond per
// input, the YAML parsers about a hundred.
TEST(ReplayTest, FrameHeader) { replay("frame_header", mutations(1000000)); }
TEST(ReplayTest, StoreRequest) { replay("store_request", mutations(1000000)); }
TEST(ReplayTest, StoreReply) { replay("store_reply", mutations(200000)); }
TEST(ReplayTest, TopologyFile) { replay("topology_file", mutations(10000)); }
TEST(ReplayTest, ModelFile) { replay("model_file", mutations(20000)); }

// A target added to targets.cpp without a test above would never run here.
TEST(ReplayTest, EveryTargetHasATest) { EXPECT_EQ(all_targets().size(), 5u); }

}  // namespace
}  // namespace holmes::fuzz
