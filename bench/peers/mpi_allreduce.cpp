// mpi-allreduce-bench: MPI_Allreduce (float32 sum) measured in holmes-bench's columns, so that
// Holmes can be compared with Open MPI in one run. The transport is mpirun's choice, e.g.
//
//   mpirun -np 4 --oversubscribe --allow-run-as-root --mca pml ob1 --mca btl tcp,self
//       mpi-allreduce-bench allreduce -b 1M -e 64M -f 4 -c        (or --mca btl vader,self)
#include <mpi.h>

#include <fmt/format.h>

#include <limits>
#include <memory>
#include <stdexcept>
#include <string>

#include "allreduce_driver.hpp"

namespace {

class MpiPeer final : public holmes::peers::AllreducePeer {
 public:
  MpiPeer(int* argc, char*** argv) {
    MPI_Init(argc, argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  ~MpiPeer() override { MPI_Finalize(); }
  MpiPeer(const MpiPeer&) = delete;
  MpiPeer& operator=(const MpiPeer&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string describe() const override {
    char version[MPI_MAX_LIBRARY_VERSION_STRING] = {};
    int length = 0;
    MPI_Get_library_version(version, &length);
    std::string text(version, static_cast<std::size_t>(length));
    // The first line names the library and version; the rest is build detail.
    text = text.substr(0, text.find_first_of(",\n"));
    return fmt::format("{}, MPI_Allreduce (transport chosen by mpirun's --mca options)", text);
  }

  void allreduce_sum(const float* send, float* recv, std::size_t count) override {
    if (count > static_cast<std::size_t>(std::numeric_limits<int>::max())) {
      throw std::invalid_argument("count exceeds MPI's int");
    }
    const void* source = send == recv ? MPI_IN_PLACE : static_cast<const void*>(send);
    check(MPI_Allreduce(source, recv, static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD));
  }

  void barrier() override { check(MPI_Barrier(MPI_COMM_WORLD)); }

  double max_over_ranks(double value) override { return reduce_double(value, MPI_MAX); }
  double sum_over_ranks(double value) override { return reduce_double(value, MPI_SUM); }

 private:
  double reduce_double(double value, MPI_Op op) {
    double result = 0;
    check(MPI_Allreduce(&value, &result, 1, MPI_DOUBLE, op, MPI_COMM_WORLD));
    return result;
  }

  // With the default MPI_ERRORS_ARE_FATAL handler errors abort the job before returning; this
  // covers a handler that returns.
  static void check(int code) {
    if (code != MPI_SUCCESS) throw std::runtime_error(fmt::format("MPI error {}", code));
  }

  int rank_ = 0;
  int size_ = 1;
};

}  // namespace

int main(int argc, char** argv) {
  return holmes::peers::run_allreduce_bench("mpi-allreduce-bench", argc, argv, [&argc, &argv] {
    return std::make_unique<MpiPeer>(&argc, &argv);
  });
}
