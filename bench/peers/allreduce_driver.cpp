#include "allreduce_driver.hpp"

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace holmes::peers {
namespace {

constexpr std::size_t kElementBytes = sizeof(float);

// Timed like holmes-bench: per row, out of place then in place.
struct Row {
  std::size_t size_bytes = 0;
  std::size_t count = 0;
  double time_us[2] = {0, 0};
  double algbw[2] = {0, 0};
  double busbw[2] = {0, 0};
  long long wrong[2] = {-1, -1};
};

std::size_t parse_size(const std::string& text) {
  std::size_t pos = 0;
  const double value = std::stod(text, &pos);
  const std::string suffix = text.substr(pos);
  double scale = 1;
  if (suffix == "K" || suffix == "k") {
    scale = 1024;
  } else if (suffix == "M" || suffix == "m") {
    scale = 1024.0 * 1024;
  } else if (suffix == "G" || suffix == "g") {
    scale = 1024.0 * 1024 * 1024;
  } else if (!suffix.empty() && suffix != "B") {
    throw std::invalid_argument("bad size " + text);
  }
  return static_cast<std::size_t>(value * scale);
}

// Small integers in [-4, 4]: sums over any number of ranks a test would use stay exact in
// float32 whatever order the library adds them in, so results compare exactly.
float input_value(int rank, std::size_t index) {
  return static_cast<float>(static_cast<int>((index * 7 + static_cast<std::size_t>(rank) * 3) % 9) -
                            4);
}

void fill_input(std::vector<float>& buffer, int rank) {
  for (std::size_t i = 0; i < buffer.size(); ++i) buffer[i] = input_value(rank, i);
}

std::size_t count_wrong(const std::vector<float>& got, int nranks) {
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < got.size(); ++i) {
    float expected = 0;
    for (int r = 0; r < nranks; ++r) expected += input_value(r, i);
    if (got[i] != expected) ++wrong;
  }
  return wrong;
}

// Fills the inputs with check data, runs once, and returns the wrong elements over all ranks.
long long check_once(AllreducePeer& peer, std::vector<float>& send, std::vector<float>& recv,
                     bool in_place) {
  if (in_place) {
    fill_input(recv, peer.rank());
  } else {
    fill_input(send, peer.rank());
    std::fill(recv.begin(), recv.end(), 0.0f);
  }
  peer.allreduce_sum(in_place ? recv.data() : send.data(), recv.data(), recv.size());
  const auto mine = static_cast<double>(count_wrong(recv, peer.size()));
  return static_cast<long long>(peer.sum_over_ranks(mine));
}

void print_header(const std::string& program, const AllreducePeer& peer, int iters, int warmup,
                  bool check) {
  fmt::print("# {}: {} ranks, dtype float32, op sum, root 0, iters {}, warmup {}{}\n", program,
             peer.size(), iters, warmup, check ? ", checked" : "");
  fmt::print("# {}\n", peer.describe());
  fmt::print(
      "# {:>12} {:>12} {:>9} {:>6} {:>5}  {:>10} {:>8} {:>8} {:>7}  {:>10} {:>8} "
      "{:>8} {:>7}\n",
      "", "", "", "", "", "out-of-place", "", "", "", "in-place", "", "", "");
  fmt::print(
      "# {:>12} {:>12} {:>9} {:>6} {:>5}  {:>10} {:>8} {:>8} {:>7}  {:>10} {:>8} "
      "{:>8} {:>7}\n",
      "size", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong", "time(us)",
      "algbw", "busbw", "#wrong");
  fmt::print("# allreduce\n");
}

void print_row(const Row& row) {
  auto wrong = [](long long w) { return w < 0 ? std::string("N/A") : std::to_string(w); };
  fmt::print(
      "  {:>12} {:>12} {:>9} {:>6} {:>5}  {:>10.1f} {:>8.3f} {:>8.3f} {:>7}  "
      "{:>10.1f} {:>8.3f} {:>8.3f} {:>7}\n",
      row.size_bytes, row.count, "float32", "sum", -1, row.time_us[0], row.algbw[0], row.busbw[0],
      wrong(row.wrong[0]), row.time_us[1], row.algbw[1], row.busbw[1], wrong(row.wrong[1]));
  std::fflush(stdout);
}

// The same header and number formats as holmes-bench --csv, so one reader takes both.
void write_csv(const std::string& path, const std::vector<Row>& rows, int nranks) {
  std::ofstream csv(path);
  if (!csv) throw std::runtime_error("cannot write " + path);
  csv << "collective,size,count,type,redop,root,time_us,algbw,busbw,wrong,"
         "time_us_inplace,algbw_inplace,busbw_inplace,wrong_inplace,ranks\n";
  for (const auto& row : rows) {
    csv << fmt::format(
        "allreduce,{},{},float32,sum,-1,{:.3f},{:.6f},{:.6f},{},{:.3f},{:.6f},{:.6f},"
        "{},{}\n",
        row.size_bytes, row.count, row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0],
        row.time_us[1], row.algbw[1], row.busbw[1], row.wrong[1], nranks);
  }
}

}  // namespace

int run_allreduce_bench(const std::string& program, int argc, char** argv,
                        const std::function<std::unique_ptr<AllreducePeer>()>& connect) {
  CLI::App app{program + ": float32 sum allreduce, in holmes-bench's columns"};
  std::string collective = "allreduce";
  std::string min_size = "32";
  std::string max_size = "32M";
  double factor = 2;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  std::string csv_path;
  app.add_option("collective", collective, "only allreduce")->check(CLI::IsMember({"allreduce"}));
  app.add_option("-b,--minbytes", min_size, "smallest size (bytes; K, M, G suffixes)");
  app.add_option("-e,--maxbytes", max_size, "largest size");
  app.add_option("-f,--stepfactor", factor, "size multiplier between rows")
      ->check(CLI::Range(1.01, 1e6));
  app.add_option("-n,--iters", iters, "timed iterations per size")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup", warmup, "untimed iterations per size")
      ->check(CLI::Range(0, 1000000));
  app.add_flag("-c,--check", check, "check every result exactly (#wrong column)");
  app.add_option("--csv", csv_path, "also write the rows as CSV (rank 0)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;  // --help is a ParseError too
  }

  std::size_t lo = 0;
  std::size_t hi = 0;
  try {
    lo = parse_size(min_size);
    hi = parse_size(max_size);
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 2;
  }

  try {
    const std::unique_ptr<AllreducePeer> peer = connect();
    const int n = peer->size();
    const bool leader = peer->rank() == 0;
    if (leader) print_header(program, *peer, iters, warmup, check);
    std::vector<Row> rows;
    for (double bytes_d = static_cast<double>(std::max(lo, kElementBytes));
         bytes_d <= static_cast<double>(hi) * 1.0000001; bytes_d *= factor) {
      Row row;
      row.count = static_cast<std::size_t>(bytes_d) / kElementBytes;
      row.size_bytes = row.count * kElementBytes;
      if (row.count == 0) continue;
      std::vector<float> send(row.count);
      std::vector<float> recv(row.count);
      for (int place = 0; place < 2; ++place) {
        const bool in_place = place == 1;
        if (check) row.wrong[place] = check_once(*peer, send, recv, in_place);
        const float* source = in_place ? recv.data() : send.data();
        for (int i = 0; i < warmup; ++i) peer->allreduce_sum(source, recv.data(), row.count);
        peer->barrier();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) peer->allreduce_sum(source, recv.data(), row.count);
        const double mine =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        const double seconds = peer->max_over_ranks(mine) / iters;
        row.time_us[place] = seconds * 1e6;
        row.algbw[place] = static_cast<double>(row.size_bytes) / seconds / 1e9;
        row.busbw[place] = row.algbw[place] * 2.0 * (n - 1) / n;
      }
      if (leader) print_row(row);
      rows.push_back(row);
    }
    long long total_wrong = 0;
    double busbw_sum = 0;
    for (const auto& row : rows) {
      total_wrong += std::max(0LL, row.wrong[0]) + std::max(0LL, row.wrong[1]);
      busbw_sum += row.busbw[0];
    }
    if (leader) {
      fmt::print("# Out of bounds values : {} {}\n", total_wrong,
                 total_wrong == 0 ? "OK" : "FAILED");
      fmt::print("# Avg bus bandwidth    : {:.3f} GB/s\n",
                 rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size()));
      std::fflush(stdout);
      if (!csv_path.empty()) write_csv(csv_path, rows, n);
    }
    return total_wrong == 0 ? 0 : 1;
  } catch (const std::exception& e) {
    fmt::print(stderr, "{}: {}\n", program, e.what());
    return 1;
  }
}

}  // namespace holmes::peers
