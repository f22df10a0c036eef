// Stream ordering on a caller's CUDA stream (hm_comm_set_cuda_stream), as NCCL orders its calls:
// a CudaStreamPoint marks where on the stream a call was made, so the host proxy can start the
// call once the work enqueued before it has finished; a CudaStreamGate holds the stream there
// until the proxy has finished the call, so work enqueued after it waits. The GPU does the
// waiting (a stream memory operation, or a one-thread kernel that sleeps between reads where the
// driver has none); no CPU core spins.
//
// Always built: without CUDA or a usable device the constructors throw HM_ERR_UNSUPPORTED.
#pragma once

#include <cstdint>

namespace holmes {

// Everything enqueued on `stream` when the point was made. The calling thread's current device
// must be the stream's (as for any work a thread enqueues on a stream).
class CudaStreamPoint {
 public:
  explicit CudaStreamPoint(void* stream);
  ~CudaStreamPoint();
  CudaStreamPoint(const CudaStreamPoint&) = delete;
  CudaStreamPoint& operator=(const CudaStreamPoint&) = delete;

  // Whether that work has finished; never blocks. Throws for a device error.
  bool reached() const;

 private:
  void* event_ = nullptr;  // cudaEvent_t
};

// A 32-bit ticket in page-locked host memory, mapped for every device, that streams wait on.
// Freed with cudaFreeHost, which waits for the devices to finish, so no stream reads it freed.
class CudaStreamGate {
 public:
  CudaStreamGate();
  ~CudaStreamGate();
  CudaStreamGate(const CudaStreamGate&) = delete;
  CudaStreamGate& operator=(const CudaStreamGate&) = delete;

  // Enqueues on `stream` a wait until the ticket is (cyclically) at least `ticket`.
  void hold(void* stream, std::uint32_t ticket);
  // Sets the ticket: streams held at it or before go on.
  void open(std::uint32_t ticket);

 private:
  std::uint32_t* word_ = nullptr;
};

}  // namespace holmes
