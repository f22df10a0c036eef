// The measurement loop that the peer programs (Gloo, Open MPI) share, so that their tables and
// CSV files match holmes-bench's column for column and the numbers can be set side by side.
//
// A peer program supplies an AllreducePeer (its library's float32 sum allreduce, barrier and
// two small reductions for bookkeeping) and hands it to run_allreduce_bench, which parses the
// holmes-bench options (-b -e -f -n -w -c --csv), checks, times and prints.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <string>

namespace holmes::peers {

// One rank of a job of some other collective library.
class AllreducePeer {
 public:
  virtual ~AllreducePeer() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Shown in the table's first line, e.g. "gloo 0.5.0 ring, tcp 127.0.0.1".
  virtual std::string describe() const = 0;

  // Float32 sum over all ranks; send == recv means in place.
  virtual void allreduce_sum(const float* send, float* recv, std::size_t count) = 0;
  virtual void barrier() = 0;
  // Bookkeeping reductions (timing and #wrong); not measured.
  virtual double max_over_ranks(double value) = 0;
  virtual double sum_over_ranks(double value) = 0;
};

// Parses argv as holmes-bench does (the optional positional collective must be "allreduce"),
// then calls connect() to join the job and runs the measurements. Returns the process exit
// status: 0 when every checked element was right, 1 when some were wrong or the library threw,
// 2 for a bad command line.
int run_allreduce_bench(const std::string& program, int argc, char** argv,
                        const std::function<std::unique_ptr<AllreducePeer>()>& connect);

}  // namespace holmes::peers
