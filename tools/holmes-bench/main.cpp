// holmes-bench: nccl-tests-style measurements of Holmes collectives. Run it under holmes-run
// (or any launcher Holmes understands); rank 0 prints the table.
//
//   holmes-bench COLLECTIVE[,COLLECTIVE...] [-b MIN] [-e MAX] [-f FACTOR] [-d DTYPE] [-o OP]
//                [-r ROOT] [--iters N] [--warmup W] [--check] [--csv F] [--json F]
//
// Columns as nccl-tests: size (bytes of the largest buffer), count (elements in it), type,
// redop, root, then time, algbw = size / time and busbw = algbw x factor (allreduce
// 2(n-1)/n; reduce_scatter, allgather, alltoall (n-1)/n; broadcast, reduce, sendrecv 1) in
// decimal GB/s, and #wrong (elements that differ from the exact expected result; -1 when not
// checked), out of place and in place.
#include <holmes/holmes.hpp>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <vector>

#include "check_data.hpp"
#include "communicator/runtime.hpp"
#include "core/cuda/memory.hpp"
#include "core/dtype.hpp"
#include "planner/calibration.hpp"

namespace {

using holmes::Communicator;

enum class Coll {
  kAllreduce,
  kReduceScatter,
  kAllgather,
  kBroadcast,
  kReduce,
  kAlltoall,
  kSendRecv
};

const std::map<std::string, Coll> kCollectives = {
    {"allreduce", Coll::kAllreduce}, {"reduce_scatter", Coll::kReduceScatter},
    {"allgather", Coll::kAllgather}, {"broadcast", Coll::kBroadcast},
    {"reduce", Coll::kReduce},       {"alltoall", Coll::kAlltoall},
    {"sendrecv", Coll::kSendRecv}};

const std::map<std::string, hm_dtype_t> kDtypes = {
    {"int8", HM_INT8},       {"uint8", HM_UINT8},   {"int32", HM_INT32},
    {"uint32", HM_UINT32},   {"int64", HM_INT64},   {"uint64", HM_UINT64},
    {"float16", HM_FLOAT16}, {"half", HM_FLOAT16},  {"bfloat16", HM_BFLOAT16},
    {"float32", HM_FLOAT32}, {"float", HM_FLOAT32}, {"float64", HM_FLOAT64},
    {"double", HM_FLOAT64}};

const std::map<std::string, hm_op_t> kOps = {
    {"sum", HM_SUM}, {"prod", HM_PROD}, {"min", HM_MIN}, {"max", HM_MAX}, {"avg", HM_AVG}};

bool reduces(Coll c) {
  return c == Coll::kAllreduce || c == Coll::kReduceScatter || c == Coll::kReduce;
}

double bus_factor(Coll c, int n) {
  switch (c) {
    case Coll::kAllreduce:
      return 2.0 * (n - 1) / n;
    case Coll::kReduceScatter:
    case Coll::kAllgather:
    case Coll::kAlltoall:
      return static_cast<double>(n - 1) / n;
    default:
      return 1.0;
  }
}

std::size_t parse_size(const std::string& text) {
  std::size_t pos = 0;
  const double value = std::stod(text, &pos);
  std::string suffix = text.substr(pos);
  double scale = 1;
  if (suffix == "K" || suffix == "k")
    scale = 1024;
  else if (suffix == "M" || suffix == "m")
    scale = 1024.0 * 1024;
  else if (suffix == "G" || suffix == "g")
    scale = 1024.0 * 1024 * 1024;
  else if (!suffix.empty() && suffix != "B")
    throw std::invalid_argument("bad size " + text);
  return static_cast<std::size_t>(value * scale);
}

// Buffers of one measurement: elements per rank in send and recv, as each collective needs.
struct Shape {
  std::size_t count;       // the count argument of the call
  std::size_t send_elems;  // send buffer length
  std::size_t recv_elems;  // recv buffer length
  std::size_t size_elems;  // elements reported in the "size" column
};

Shape shape_for(Coll c, std::size_t bytes, std::size_t es, int n) {
  const std::size_t total = bytes / es;
  const auto nn = static_cast<std::size_t>(n);
  switch (c) {
    case Coll::kReduceScatter: {
      const std::size_t per = total / nn;
      return {per, per * nn, per, per * nn};
    }
    case Coll::kAllgather: {
      const std::size_t per = total / nn;
      return {per, per, per * nn, per * nn};
    }
    case Coll::kAlltoall: {
      const std::size_t per = total / nn;
      return {per, per * nn, per * nn, per * nn};
    }
    default:
      return {total, total, total, total};
  }
}

// Host buffers always (check data is written and read there); with --device, device mirrors
// that the collectives actually run on.
struct Buffers {
  std::vector<std::byte> send;
  std::vector<std::byte> recv;
  holmes::DeviceMemory* device = nullptr;
  std::shared_ptr<std::byte> device_send;
  std::shared_ptr<std::byte> device_recv;

  std::byte* send_ptr() { return device != nullptr ? device_send.get() : send.data(); }
  std::byte* recv_ptr() { return device != nullptr ? device_recv.get() : recv.data(); }
  void upload() {
    if (device == nullptr) return;
    device->from_host(device_send.get(), send.data(), send.size());
    device->from_host(device_recv.get(), recv.data(), recv.size());
  }
  void download() {
    if (device == nullptr) return;
    device->to_host(send.data(), device_send.get(), send.size());
    device->to_host(recv.data(), device_recv.get(), recv.size());
  }
};

// One call of the collective, out of place or in place.
void run_once(Communicator& comm, Coll c, Buffers& b, const Shape& s, hm_dtype_t dtype, hm_op_t op,
              int root, bool in_place) {
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t es = holmes::dtype_size(dtype);
  void* recv = b.recv_ptr();
  const void* send = in_place ? static_cast<const void*>(recv) : b.send_ptr();
  switch (c) {
    case Coll::kAllreduce:
      return comm.allreduce(send, recv, s.count, dtype, op);
    case Coll::kReduceScatter:
      // In place: NCCL's convention, recv is this rank's block of the send buffer.
      if (in_place) {
        return comm.reduce_scatter(b.send_ptr(),
                                   b.send_ptr() + static_cast<std::size_t>(r) * s.count * es,
                                   s.count, dtype, op);
      }
      return comm.reduce_scatter(send, recv, s.count, dtype, op);
    case Coll::kAllgather:
      if (in_place) {
        return comm.allgather(b.recv_ptr() + static_cast<std::size_t>(r) * s.count * es, recv,
                              s.count, dtype);
      }
      return comm.allgather(send, recv, s.count, dtype);
    case Coll::kBroadcast:
      // Out of place, the root broadcasts its send buffer (copied in by check_once).
      return comm.broadcast(recv, s.count, dtype, root);
    case Coll::kReduce:
      return comm.reduce(send, recv, s.count, dtype, op, root);
    case Coll::kAlltoall:
      return comm.alltoall(send, recv, s.count, dtype);
    case Coll::kSendRecv: {
      if (n == 1) return;
      auto sent = comm.isend(in_place ? recv : send, s.count, dtype, (r + 1) % n);
      auto got = comm.irecv(in_place ? b.send_ptr() : recv, s.count, dtype, (r + n - 1) % n);
      got.wait();
      sent.wait();
      return;
    }
  }
}

// Fills inputs with exact check data, runs once, and counts wrong elements on this rank.
std::size_t check_once(Communicator& comm, Coll c, Buffers& b, const Shape& s, hm_dtype_t dtype,
                       hm_op_t op, int root, bool in_place) {
  using namespace holmes::check;
  const int n = comm.size();
  const int r = comm.rank();
  const std::size_t es = holmes::dtype_size(dtype);
  const hm_op_t fill_op = reduces(c) ? op : HM_SUM;
  std::vector<std::byte> expected;
  // Inputs.
  std::byte* input =
      in_place && c != Coll::kReduceScatter && c != Coll::kSendRecv ? b.recv.data() : b.send.data();
  switch (c) {
    case Coll::kAllgather:
      if (in_place) input = b.recv.data() + static_cast<std::size_t>(r) * s.count * es;
      fill_input(input, dtype, fill_op, r, static_cast<std::size_t>(r) * s.count, s.count);
      break;
    case Coll::kBroadcast:
      fill_input(r == root ? b.recv.data() : b.send.data(), dtype, fill_op, root, 0, s.count);
      if (r == root && !in_place) fill_input(b.send.data(), dtype, fill_op, root, 0, s.count);
      if (r != root) std::memset(b.recv.data(), 0, b.recv.size());
      break;
    case Coll::kAlltoall:
      // Block j of rank r's input carries the values of "rank r, elements j*count...".
      fill_input(input, dtype, fill_op, r, 0, s.send_elems);
      break;
    case Coll::kSendRecv:
      fill_input(in_place ? b.recv.data() : b.send.data(), dtype, fill_op, r, 0, s.count);
      break;
    default:
      fill_input(input, dtype, fill_op, r, 0, s.send_elems);
  }
  b.upload();
  run_once(comm, c, b, s, dtype, op, root, in_place);
  b.download();
  // Expected results and where they are.
  const std::byte* got = b.recv.data();
  std::size_t elems = s.recv_elems;
  expected.resize(s.recv_elems * es);
  switch (c) {
    case Coll::kAllreduce:
      fill_expected(expected.data(), dtype, op, n, 0, s.count);
      break;
    case Coll::kReduceScatter:
      if (in_place) got = b.send.data() + static_cast<std::size_t>(r) * s.count * es;
      fill_expected(expected.data(), dtype, op, n, static_cast<std::size_t>(r) * s.count, s.count);
      break;
    case Coll::kReduce:
      if (r != root) return 0;
      fill_expected(expected.data(), dtype, op, n, 0, s.count);
      break;
    case Coll::kAllgather:
      for (int j = 0; j < n; ++j) {
        fill_input(expected.data() + static_cast<std::size_t>(j) * s.count * es, dtype, fill_op, j,
                   static_cast<std::size_t>(j) * s.count, s.count);
      }
      break;
    case Coll::kBroadcast:
      fill_input(expected.data(), dtype, fill_op, root, 0, s.count);
      break;
    case Coll::kAlltoall:
      for (int j = 0; j < n; ++j) {
        fill_input(expected.data() + static_cast<std::size_t>(j) * s.count * es, dtype, fill_op, j,
                   static_cast<std::size_t>(r) * s.count, s.count);
      }
      break;
    case Coll::kSendRecv:
      if (n == 1) return 0;
      if (in_place) got = b.send.data();
      fill_input(expected.data(), dtype, fill_op, (r + n - 1) % n, 0, s.count);
      elems = s.count;
      break;
  }
  return holmes::check::count_wrong(got, expected.data(), elems, dtype);
}

// The public collective of a benchmarked one (send/recv has none).
std::optional<hm_collective_t> public_collective(Coll c) {
  switch (c) {
    case Coll::kAllreduce:
      return HM_COLL_ALLREDUCE;
    case Coll::kReduceScatter:
      return HM_COLL_REDUCE_SCATTER;
    case Coll::kAllgather:
      return HM_COLL_ALLGATHER;
    case Coll::kBroadcast:
      return HM_COLL_BROADCAST;
    case Coll::kReduce:
      return HM_COLL_REDUCE;
    case Coll::kAlltoall:
      return HM_COLL_ALLTOALL;
    case Coll::kSendRecv:
      break;
  }
  return std::nullopt;
}

struct Row {
  std::string collective;
  std::string algorithm;  // what the selector ran, "-" for send/recv
  double predicted_us = 0;
  std::size_t size_bytes;
  std::size_t count;
  std::string type;
  std::string redop;
  int root;
  double time_us[2];
  double algbw[2];
  double busbw[2];
  long long wrong[2];
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"holmes-bench: nccl-tests-style collective benchmarks (run under holmes-run)"};
  std::string collectives_arg;
  std::string min_size = "32";
  std::string max_size = "32M";
  double factor = 2;
  std::string dtype_arg = "float32";
  std::string op_arg = "sum";
  int root = 0;
  int iters = 20;
  int warmup = 5;
  bool check = false;
  std::string csv_path;
  std::string json_path;
  app.add_option("collectives", collectives_arg,
                 "comma-separated: allreduce, reduce_scatter, allgather, broadcast, reduce, "
                 "alltoall, sendrecv, or all")
      ->required();
  app.add_option("-b,--minbytes", min_size, "smallest size (bytes; K, M, G suffixes)");
  app.add_option("-e,--maxbytes", max_size, "largest size");
  app.add_option("-f,--stepfactor", factor, "size multiplier between rows")
      ->check(CLI::Range(1.01, 1e6));
  app.add_option("-d,--datatype", dtype_arg, "element type");
  app.add_option("-o,--op", op_arg, "reduction: sum, prod, min, max, avg");
  app.add_option("-r,--root", root, "root of broadcast and reduce");
  app.add_option("-n,--iters", iters, "timed iterations per size")->check(CLI::Range(1, 1000000));
  app.add_option("-w,--warmup", warmup, "untimed iterations per size")
      ->check(CLI::Range(0, 1000000));
  app.add_flag("-c,--check", check, "check every result exactly (#wrong column)");
  app.add_option("--csv", csv_path, "also write the rows as CSV");
  app.add_option("--json", json_path, "also write the rows as JSON");
  std::string calibrate;
  app.add_option("--calibrate", calibrate,
                 "CLASS:FILE: fit latency and bandwidth to the sendrecv rows (run sendrecv between "
                 "two ranks across the link) and write them as link class CLASS into FILE, for "
                 "holmes-sim/holmes-plan --calibration");
  std::string algo_arg = "auto";
  app.add_option("--algo", algo_arg,
                 "force an algorithm (ring, rd, rhd, tree, chain, pairwise, hier, shm) for the "
                 "collectives that have it; default auto: the cost model picks per size");
  bool on_device = false;
  app.add_flag("--device", on_device,
               "run on device (CUDA) buffers: device to device inside a host (the ipc engine), "
               "else staged through pinned memory; reductions run on the GPU");
  CLI11_PARSE(app, argc, argv);

  std::vector<std::pair<std::string, Coll>> selected;
  std::stringstream list(collectives_arg);
  for (std::string name; std::getline(list, name, ',');) {
    if (name == "all") {
      for (const auto& [n, c] : kCollectives) selected.emplace_back(n, c);
      continue;
    }
    auto it = kCollectives.find(name);
    if (it == kCollectives.end()) {
      fmt::print(stderr, "holmes-bench: unknown collective '{}'\n", name);
      return 2;
    }
    selected.emplace_back(name, it->second);
  }
  const auto dtype_it = kDtypes.find(dtype_arg);
  const auto op_it = kOps.find(op_arg);
  if (dtype_it == kDtypes.end() || op_it == kOps.end()) {
    fmt::print(stderr, "holmes-bench: unknown {} '{}'\n",
               dtype_it == kDtypes.end() ? "dtype" : "op",
               dtype_it == kDtypes.end() ? dtype_arg : op_arg);
    return 2;
  }
  const hm_dtype_t dtype = dtype_it->second;
  const hm_op_t op = op_it->second;
  std::optional<hm_algorithm_t> forced;
  for (int a = 0; a < HM_ALGORITHM_COUNT; ++a) {
    if (algo_arg == hm_algorithm_name(static_cast<hm_algorithm_t>(a))) {
      forced = static_cast<hm_algorithm_t>(a);
    }
  }
  if (!forced) {
    fmt::print(stderr, "holmes-bench: unknown algorithm '{}'\n", algo_arg);
    return 2;
  }
  std::size_t lo = 0;
  std::size_t hi = 0;
  try {
    lo = parse_size(min_size);
    hi = parse_size(max_size);
  } catch (const std::exception& e) {
    fmt::print(stderr, "holmes-bench: {}\n", e.what());
    return 2;
  }

  try {
    Communicator comm = Communicator::init_from_env();
    const int n = comm.size();
    const int r = comm.rank();
    if (root < 0 || root >= n) {
      if (r == 0) fmt::print(stderr, "holmes-bench: root {} outside [0, {})\n", root, n);
      return 2;
    }
    const std::size_t es = holmes::dtype_size(dtype);
    holmes::DeviceMemory* device = nullptr;
    if (on_device) {
      device = holmes::detail::Runtime::get().device_memory();
      if (device == nullptr) {
        std::string why;
        holmes::cuda_device_available(&why);
        if (r == 0) fmt::print(stderr, "holmes-bench: --device: no usable CUDA device: {}\n", why);
        return 2;
      }
    }
    for (const auto& [name, coll] : selected) {
      const auto c = public_collective(coll);
      if (!c || *forced == HM_ALGO_AUTO) continue;
      try {
        comm.set_algorithm(*c, *forced);
      } catch (const holmes::Error&) {
        if (selected.size() == 1) throw;  // asked for one collective: say it has no such thing
      }
    }
    std::vector<Row> rows;
    if (r == 0) {
      fmt::print("# holmes-bench: {} ranks, dtype {}, op {}, root {}, iters {}, warmup {}{}{}\n", n,
                 holmes::dtype_name(dtype), holmes::op_name(op), root, iters, warmup,
                 check ? ", checked" : "", device != nullptr ? ", device buffers" : "");
      fmt::print(
          "# {:>12} {:>12} {:>9} {:>6} {:>5}  {:>10} {:>8} {:>8} {:>7}  {:>10} {:>8} "
          "{:>8} {:>7}  {:>6} {:>10}\n",
          "", "", "", "", "", "out-of-place", "", "", "", "in-place", "", "", "", "", "model");
      fmt::print(
          "# {:>12} {:>12} {:>9} {:>6} {:>5}  {:>10} {:>8} {:>8} {:>7}  {:>10} {:>8} "
          "{:>8} {:>7}  {:>6} {:>10}\n",
          "size", "count", "type", "redop", "root", "time(us)", "algbw", "busbw", "#wrong",
          "time(us)", "algbw", "busbw", "#wrong", "algo", "pred(us)");
    }
    for (const auto& [name, coll] : selected) {
      if (r == 0) fmt::print("# {}\n", name);
      for (double bytes_d = static_cast<double>(std::max<std::size_t>(lo, es));
           bytes_d <= static_cast<double>(hi) * 1.0000001; bytes_d *= factor) {
        const auto bytes = static_cast<std::size_t>(bytes_d);
        const Shape s = shape_for(coll, bytes, es, n);
        if (s.count == 0) continue;
        Buffers b;
        b.send.resize(std::max(s.send_elems, s.recv_elems) * es);
        b.recv.resize(std::max(s.send_elems, s.recv_elems) * es);
        if (device != nullptr) {
          b.device = device;
          b.device_send = device->allocate(b.send.size());
          b.device_recv = device->allocate(b.recv.size());
          b.upload();
          b.device = &device->bound_to(b.device_send.get());
        }
        std::string algorithm = "-";
        double predicted_us = 0;
        if (const auto c = public_collective(coll)) {
          const std::size_t per_call =
              coll == Coll::kReduceScatter || coll == Coll::kAllgather || coll == Coll::kAlltoall
                  ? s.size_elems / static_cast<std::size_t>(n)
                  : s.size_elems;
          const auto choice = comm.query_algorithm(*c, per_call, dtype);
          algorithm = hm_algorithm_name(choice.algorithm);
          predicted_us = choice.predicted_us;
        }
        Row row{name,
                algorithm,
                predicted_us,
                s.size_elems * es,
                s.size_elems,
                holmes::dtype_name(dtype),
                reduces(coll) ? holmes::op_name(op) : "none",
                coll == Coll::kBroadcast || coll == Coll::kReduce ? root : -1,
                {},
                {},
                {},
                {-1, -1}};
        for (int place = 0; place < 2; ++place) {
          const bool in_place = place == 1;
          if (check) {
            const auto wrong =
                static_cast<double>(check_once(comm, coll, b, s, dtype, op, root, in_place));
            double total = 0;
            comm.allreduce(&wrong, &total, 1, HM_FLOAT64, HM_SUM);
            row.wrong[place] = static_cast<long long>(total);
          }
          for (int i = 0; i < warmup; ++i) run_once(comm, coll, b, s, dtype, op, root, in_place);
          comm.barrier();
          const auto start = std::chrono::steady_clock::now();
          for (int i = 0; i < iters; ++i) run_once(comm, coll, b, s, dtype, op, root, in_place);
          const double mine =
              std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          double slowest = 0;
          comm.allreduce(&mine, &slowest, 1, HM_FLOAT64, HM_MAX);
          const double seconds = slowest / iters;
          row.time_us[place] = seconds * 1e6;
          row.algbw[place] = static_cast<double>(row.size_bytes) / seconds / 1e9;
          row.busbw[place] = row.algbw[place] * bus_factor(coll, n);
        }
        if (r == 0) {
          auto wrong = [](long long w) { return w < 0 ? std::string("N/A") : std::to_string(w); };
          fmt::print(
              "  {:>12} {:>12} {:>9} {:>6} {:>5}  {:>10.1f} {:>8.3f} {:>8.3f} {:>7}  "
              "{:>10.1f} {:>8.3f} {:>8.3f} {:>7}  {:>6} {:>10.1f}\n",
              row.size_bytes, row.count, row.type, row.redop, row.root, row.time_us[0],
              row.algbw[0], row.busbw[0], wrong(row.wrong[0]), row.time_us[1], row.algbw[1],
              row.busbw[1], wrong(row.wrong[1]), row.algorithm, row.predicted_us);
          std::fflush(stdout);
        }
        rows.push_back(row);
      }
    }
    long long total_wrong = 0;
    double busbw_sum = 0;
    for (const auto& row : rows) {
      total_wrong += std::max(0LL, row.wrong[0]) + std::max(0LL, row.wrong[1]);
      busbw_sum += row.busbw[0];
    }
    if (r == 0) {
      fmt::print("# Out of bounds values : {} {}\n", total_wrong,
                 total_wrong == 0 ? "OK" : "FAILED");
      fmt::print("# Avg bus bandwidth    : {:.3f} GB/s\n",
                 rows.empty() ? 0.0 : busbw_sum / static_cast<double>(rows.size()));
      if (!csv_path.empty()) {
        std::ofstream csv(csv_path);
        csv << "collective,size,count,type,redop,root,time_us,algbw,busbw,wrong,"
               "time_us_inplace,algbw_inplace,busbw_inplace,wrong_inplace,ranks,algorithm,"
               "predicted_us\n";
        for (const auto& row : rows) {
          csv << fmt::format(
              "{},{},{},{},{},{},{:.3f},{:.6f},{:.6f},{},{:.3f},{:.6f},{:.6f},{},{},{},{:.1f}\n",
              row.collective, row.size_bytes, row.count, row.type, row.redop, row.root,
              row.time_us[0], row.algbw[0], row.busbw[0], row.wrong[0], row.time_us[1],
              row.algbw[1], row.busbw[1], row.wrong[1], n, row.algorithm, row.predicted_us);
        }
      }
      if (!json_path.empty()) {
        nlohmann::json out = nlohmann::json::array();
        for (const auto& row : rows) {
          out.push_back({{"collective", row.collective},
                         {"size", row.size_bytes},
                         {"count", row.count},
                         {"type", row.type},
                         {"redop", row.redop},
                         {"root", row.root},
                         {"ranks", n},
                         {"algorithm", row.algorithm},
                         {"predicted_us", row.predicted_us},
                         {"out_of_place",
                          {{"time_us", row.time_us[0]},
                           {"algbw", row.algbw[0]},
                           {"busbw", row.busbw[0]},
                           {"wrong", row.wrong[0]}}},
                         {"in_place",
                          {{"time_us", row.time_us[1]},
                           {"algbw", row.algbw[1]},
                           {"busbw", row.busbw[1]},
                           {"wrong", row.wrong[1]}}}});
        }
        std::ofstream(json_path) << out.dump(2) << "\n";
      }
      if (!calibrate.empty()) {
        const auto colon = calibrate.find(':');
        if (colon == std::string::npos || colon == 0 || colon + 1 == calibrate.size()) {
          fmt::print(stderr, "holmes-bench: --calibrate wants CLASS:FILE, got '{}'\n", calibrate);
          return 2;
        }
        std::vector<std::pair<double, double>> points;
        for (const auto& row : rows) {
          if (row.collective == "sendrecv")
            points.push_back({double(row.size_bytes), row.time_us[0] / 1e6});
        }
        const auto fit = holmes::planner::fit_link(points);
        holmes::planner::write_calibration(calibrate.substr(colon + 1), calibrate.substr(0, colon),
                                           fit, n);
        fmt::print("# calibrated link class {}: {:.3f} Gbit/s, {:.1f} us ({} points) -> {}\n",
                   calibrate.substr(0, colon), fit.gbit_per_s, fit.latency_us, fit.points,
                   calibrate.substr(colon + 1));
      }
    }
    return total_wrong == 0 ? 0 : 1;
  } catch (const holmes::Error& e) {
    fmt::print(stderr, "holmes-bench: {} ({})\n", e.what(), hm_status_string(e.status()));
    return 1;
  }
}
