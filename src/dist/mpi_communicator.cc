#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <algorithm>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <ctime>

#include "core/error.h"
#include "dist/watchdog.h"

namespace myriad {

namespace {

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return MPI_FLOAT;
    case DType::kI32:
      return MPI_INT32_T;
    case DType::kI64:
      return MPI_INT64_T;
    case DType::kU8:
      return MPI_UINT8_T;
    case DType::kBF16:
    case DType::kF16:
      return MPI_UINT16_T;  // moved, never reduced (checked below)
    default:
      throw_error(ErrorKind::kUnsupported, "MPI collectives: no MPI type for ", dtype_name(dtype));
  }
}

MPI_Op mpi_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kMin:
      return MPI_MIN;
  }
  return MPI_SUM;
}

void check_reducible(const char* what, DType dtype) {
  MYRIAD_REQUIRE(dtype != DType::kBF16 && dtype != DType::kF16, kUnsupported, "MPI ", what, ": reductions of ",
                 dtype_name(dtype), " are not supported (reduce in F32)");
}

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, msg, &len);
  throw_error(ErrorKind::kIo, "MPI ", what, " failed: ", std::string(msg, size_t(len)));
}

int int_count(int64_t n, const char* what) {
  MYRIAD_REQUIRE(n >= 0 && n <= INT_MAX, kUnsupported, "MPI ", what, ": ", n,
                 " elements in one block exceed MPI's int count");
  return int(n);
}

// The largest piece a reduction or broadcast sends at once.
constexpr int64_t kPiece = int64_t(1) << 30;

bool g_initialized_here = false;

void finalize_at_exit() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

}  // namespace

// An MPI_Request of a non-blocking collective. Waiting is watched like a blocking collective (a rank that never
// takes part is reported by the watchdog).
class MpiPending final : public PendingCollective {
 public:
  explicit MpiPending(const char* what) : what_(what) {}
  // Not completed here only while an exception unwinds (the job is ending): the request is left to MPI_Abort, as
  // MPI forbids freeing or cancelling the request of a non-blocking collective.
  ~MpiPending() override = default;
  bool test() override {
    if (request == MPI_REQUEST_NULL) return true;
    int done = 0;
    check_mpi(MPI_Test(&request, &done, MPI_STATUS_IGNORE), what_);
    return done != 0;
  }
  void wait() override {
    if (request == MPI_REQUEST_NULL) return;
    const CollectiveWatch watch(what_);
    check_mpi(MPI_Wait(&request, MPI_STATUS_IGNORE), what_);
  }
  MPI_Request request = MPI_REQUEST_NULL;

 private:
  const char* what_;
};

class MpiCommunicator final : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN);
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owned_ && !finalized) MPI_Comm_free(&comm_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const char* backend() const override { return "mpi"; }
  Device device() const override { return Device::kCPU; }

  void all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    const CollectiveWatch watch("all_reduce");
    check_reducible("all_reduce", dtype);
    const int64_t esz = collective_bytes(dtype, 1);
    for (int64_t at = 0; at < count; at += kPiece) {
      const int n = int(std::min(kPiece, count - at));
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, static_cast<char*>(buf) + at * esz, n, mpi_type(dtype), mpi_op(op), comm_),
                "all_reduce");
    }
  }
  std::unique_ptr<PendingCollective> start_all_reduce(void* buf, int64_t count, DType dtype, ReduceOp op) override {
    if (count > INT_MAX) return Communicator::start_all_reduce(buf, count, dtype, op);  // pieces, blocking
    check_reducible("all_reduce", dtype);
    auto pending = std::make_unique<MpiPending>("all_reduce");
    check_mpi(MPI_Iallreduce(MPI_IN_PLACE, buf, int(count), mpi_type(dtype), mpi_op(op), comm_, &pending->request),
              "all_reduce (started)");
    return pending;
  }
  void all_reduce_f64(double* buf, int64_t count, ReduceOp op) override {
    const CollectiveWatch watch("all_reduce_f64");
    for (int64_t at = 0; at < count; at += kPiece)
      check_mpi(MPI_Allreduce(MPI_IN_PLACE, buf + at, int(std::min(kPiece, count - at)), MPI_DOUBLE, mpi_op(op), comm_),
                "all_reduce (f64)");
  }
  void reduce_scatter(const void* send, void* recv, int64_t count, DType dtype, ReduceOp op) override {
    const CollectiveWatch watch("reduce_scatter");
    check_reducible("reduce_scatter", dtype);
    check_mpi(
        MPI_Reduce_scatter_block(send, recv, int_count(count, "reduce_scatter"), mpi_type(dtype), mpi_op(op), comm_),
        "reduce_scatter");
  }
  void all_gather(const void* send, void* recv, int64_t count, DType dtype) override {
    const CollectiveWatch watch("all_gather");
    const int n = int_count(count, "all_gather");
    check_mpi(MPI_Allgather(send, n, mpi_type(dtype), recv, n, mpi_type(dtype), comm_), "all_gather");
  }
  void all_gather_v(const void* send, void* recv, std::span<const int64_t> counts, DType dtype) override {
    const CollectiveWatch watch("all_gather_v");
    MYRIAD_REQUIRE(int(counts.size()) == size_, kValue, "all_gather_v: ", counts.size(), " counts for ", size_,
                   " ranks");
    std::vector<int> c(static_cast<size_t>(size_)), d(static_cast<size_t>(size_));
    int64_t at = 0;
    for (int p = 0; p < size_; ++p) {
      c[size_t(p)] = int_count(counts[size_t(p)], "all_gather_v");
      d[size_t(p)] = int_count(at, "all_gather_v (displacement)");
      at += counts[size_t(p)];
    }
    check_mpi(MPI_Allgatherv(send, c[size_t(rank_)], mpi_type(dtype), recv, c.data(), d.data(), mpi_type(dtype), comm_),
              "all_gather_v");
  }
  void all_to_all_v(const void* send, std::span<const int64_t> send_counts, void* recv,
                    std::span<const int64_t> recv_counts, DType dtype) override {
    const CollectiveWatch watch("all_to_all_v");
    MYRIAD_REQUIRE(int(send_counts.size()) == size_ && int(recv_counts.size()) == size_, kValue,
                   "all_to_all_v: ", send_counts.size(), " send and ", recv_counts.size(), " receive counts for ",
                   size_, " ranks");
    std::vector<int> sc(static_cast<size_t>(size_)), sd(static_cast<size_t>(size_)), rc(static_cast<size_t>(size_)),
        rd(static_cast<size_t>(size_));
    int64_t s_at = 0, r_at = 0;
    for (int p = 0; p < size_; ++p) {
      sc[size_t(p)] = int_count(send_counts[size_t(p)], "all_to_all_v");
      rc[size_t(p)] = int_count(recv_counts[size_t(p)], "all_to_all_v");
      sd[size_t(p)] = int_count(s_at, "all_to_all_v (displacement)");
      rd[size_t(p)] = int_count(r_at, "all_to_all_v (displacement)");
      s_at += send_counts[size_t(p)];
      r_at += recv_counts[size_t(p)];
    }
    const MPI_Datatype t = mpi_type(dtype);
    check_mpi(MPI_Alltoallv(send, sc.data(), sd.data(), t, recv, rc.data(), rd.data(), t, comm_), "all_to_all_v");
  }
  void broadcast(void* buf, int64_t count, DType dtype, int root) override {
    const CollectiveWatch watch("broadcast");
    MYRIAD_REQUIRE(root >= 0 && root < size_, kValue, "broadcast: root ", root, " of ", size_, " ranks");
    const int64_t esz = collective_bytes(dtype, 1);
    for (int64_t at = 0; at < count; at += kPiece) {
      const int n = int(std::min(kPiece, count - at));
      check_mpi(MPI_Bcast(static_cast<char*>(buf) + at * esz, n, mpi_type(dtype), root, comm_), "broadcast");
    }
  }
  void broadcast_idle(void* buf, int64_t count, DType dtype, int root) override {
    MPI_Request req;
    check_mpi(MPI_Ibcast(buf, int_count(count, "broadcast"), mpi_type(dtype), root, comm_, &req), "broadcast");
    for (int done = 0;;) {
      check_mpi(MPI_Test(&req, &done, MPI_STATUS_IGNORE), "broadcast");
      if (done) return;
      const timespec pause{0, 1'000'000};  // 1 ms: the first token of a request waits at most that much longer
      nanosleep(&pause, nullptr);
    }
  }
  void barrier() override {
    const CollectiveWatch watch("barrier");
    check_mpi(MPI_Barrier(comm_), "barrier");
  }
  std::unique_ptr<Communicator> split(int color, int key) const override {
    const CollectiveWatch watch("comm_split");
    MPI_Comm sub;
    check_mpi(MPI_Comm_split(comm_, color, key, &sub), "comm_split");
    return std::make_unique<MpiCommunicator>(sub, true);
  }

 private:
  MPI_Comm comm_;
  bool owned_;
  int rank_ = 0, size_ = 1;
};

bool launched_by_mpirun() {
  // OpenMPI's launcher sets these in every rank's environment (PMIx for 4.x, OMPI_ for the rank layout).
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_RANK") != nullptr;
}

Communicator& mpi_world() {
  static std::unique_ptr<MpiCommunicator> world = [] {
    int initialized = 0;
    MPI_Initialized(&initialized);
    if (!initialized) {
      int provided = 0;
      // SERIALIZED: any one thread at a time may call MPI (a server's engine thread makes the collectives).
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "init");
      MYRIAD_REQUIRE(provided >= MPI_THREAD_SERIALIZED, kUnsupported,
                     "this MPI library does not allow calls from more than one thread (MPI_THREAD_SERIALIZED)");
      g_initialized_here = true;
      std::atexit(finalize_at_exit);
    }
    return std::make_unique<MpiCommunicator>(MPI_COMM_WORLD, false);
  }();
  return *world;
}

bool mpi_initialized() {
  return g_initialized_here;
}

std::string mpi_library_version() {
  char text[MPI_MAX_LIBRARY_VERSION_STRING] = {};
  int len = 0;
  if (MPI_Get_library_version(text, &len) != MPI_SUCCESS) return "unknown";
  std::string s(text, size_t(std::max(0, len)));
  const size_t cut = s.find_first_of(",\n");
  return cut == std::string::npos ? s : s.substr(0, cut);
}

void mpi_abort(int code) {
  MPI_Abort(MPI_COMM_WORLD, code);
  std::_Exit(code);
}

}  // namespace myriad
