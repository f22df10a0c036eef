// "Bring your own key-value store" through the C API: forked ranks meet through a store of files
// in a directory (no HOLMES_STORE, no Holmes store server), run collectives and check them
// exactly; a broken or silent store makes hm_init fail naming the key, never hang.
#include <holmes/holmes.h>

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

namespace {

namespace fs = std::filesystem;

// A key-value store of files: a key's value is the file <dir>/<key with '/' as '%'>, written to
// a temporary name and renamed (readers never see half a value); counters are files updated
// under an flock.
struct FileStore {
  fs::path dir;
  int get_calls = 0;
  int fail_get_with = 0;  // nonzero: every get returns this

  fs::path path_of(const char* key) const {
    std::string name(key);
    for (char& c : name) {
      if (c == '/') c = '%';
    }
    return dir / name;
  }

  static int set(void* user, const char* key, const void* value, size_t length) {
    auto* self = static_cast<FileStore*>(user);
    const fs::path final_path = self->path_of(key);
    const fs::path tmp = final_path.string() + ".tmp" + std::to_string(::getpid());
    {
      std::ofstream out(tmp, std::ios::binary);
      out.write(static_cast<const char*>(value), static_cast<std::streamsize>(length));
      if (!out) return 2;
    }
    std::error_code ec;
    fs::rename(tmp, final_path, ec);
    return ec ? 2 : 0;
  }

  static int get(void* user, const char* key, void* value, size_t capacity, size_t* length,
                 int timeout_ms) {
    auto* self = static_cast<FileStore*>(user);
    ++self->get_calls;
    if (self->fail_get_with != 0) return self->fail_get_with;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(timeout_ms);
    const fs::path path = self->path_of(key);
    while (!fs::exists(path)) {
      if (std::chrono::steady_clock::now() >= deadline) return 1;
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    std::ifstream in(path, std::ios::binary);
    const std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    *length = data.size();
    std::memcpy(value, data.data(), std::min(capacity, data.size()));
    return 0;
  }

  static int add(void* user, const char* key, int64_t delta, int64_t* result) {
    auto* self = static_cast<FileStore*>(user);
    const std::string path = self->path_of(key).string() + ".counter";
    const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (fd < 0 || ::flock(fd, LOCK_EX) != 0) return 2;
    char text[32] = {0};
    const ssize_t n = ::pread(fd, text, sizeof(text) - 1, 0);
    const int64_t now = (n > 0 ? std::strtoll(text, nullptr, 10) : 0) + delta;
    const int written = std::snprintf(text, sizeof(text), "%lld", static_cast<long long>(now));
    const bool ok = ::ftruncate(fd, 0) == 0 && ::pwrite(fd, text, written, 0) == written;
    ::flock(fd, LOCK_UN);
    ::close(fd);
    *result = now;
    return ok ? 0 : 2;
  }

  hm_kv_store_t c_store() {
    hm_kv_store_t s = HM_KV_STORE_INITIALIZER;
    s.user = this;
    s.set = &FileStore::set;
    s.get = &FileStore::get;
    s.add = &FileStore::add;
    return s;
  }
};

fs::path fresh_dir(const char* name) {
  const fs::path dir = fs::temp_directory_path() /
                       (std::string("holmes-kv-") + name + "-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// No variable of a launcher may leak in: the store must be the only way the ranks meet.
void clear_launcher_env() {
  for (const char* name : {"HOLMES_STORE", "HOLMES_RANK", "HOLMES_WORLD_SIZE", "MASTER_ADDR",
                           "MASTER_PORT", "RANK", "WORLD_SIZE", "HOLMES_STORE_SERVE"}) {
    ::unsetenv(name);
  }
}

// One rank's work; returns the process exit status (0: every check passed).
int run_rank(const fs::path& dir, int rank, int ranks) {
  clear_launcher_env();
  FileStore store{dir};
  const hm_kv_store_t c_store = store.c_store();
  hm_config_t config = HM_CONFIG_INITIALIZER;
  config.rank = rank;
  config.world_size = ranks;
  config.timeout_ms = 30000;
  config.local_addr = "127.0.0.1";
  config.kv_store = &c_store;
  hm_comm_t world = nullptr;
  if (hm_init(&config, &world) != HM_SUCCESS) {
    std::fprintf(stderr, "rank %d: hm_init: %s\n", rank, hm_last_error_message());
    return 10;
  }
  int failures = 0;
  // allreduce: every rank contributes (rank + 1) * (i + 1); the sum is known in closed form.
  std::vector<int64_t> data(1000);
  for (size_t i = 0; i < data.size(); ++i) data[i] = (rank + 1) * static_cast<int64_t>(i + 1);
  if (hm_allreduce(world, data.data(), data.data(), data.size(), HM_INT64, HM_SUM) != HM_SUCCESS)
    ++failures;
  const int64_t rank_sum = static_cast<int64_t>(ranks) * (ranks + 1) / 2;
  for (size_t i = 0; i < data.size(); ++i) {
    if (data[i] != rank_sum * static_cast<int64_t>(i + 1)) ++failures;
  }
  // allgather of each rank's number.
  std::vector<int32_t> all(static_cast<size_t>(ranks), -1);
  const int32_t mine = 100 + rank;
  if (hm_allgather(world, &mine, all.data(), 1, HM_INT32) != HM_SUCCESS) ++failures;
  for (int r = 0; r < ranks; ++r) {
    if (all[static_cast<size_t>(r)] != 100 + r) ++failures;
  }
  // A split needs no store: it goes through the world communicator.
  hm_comm_t half = nullptr;
  if (hm_comm_split(world, rank % 2, rank, &half) != HM_SUCCESS) {
    ++failures;
  } else {
    int32_t one = 1;
    int half_size = 0;
    hm_comm_size(half, &half_size);
    if (hm_allreduce(half, &one, &one, 1, HM_INT32, HM_SUM) != HM_SUCCESS || one != half_size)
      ++failures;
    hm_comm_destroy(half);
  }
  if (failures != 0) std::fprintf(stderr, "rank %d: %d checks failed\n", rank, failures);
  hm_comm_destroy(world);
  return failures == 0 ? 0 : 11;
}

// Forks `ranks` processes running run_rank; every one must exit 0 within the bound.
void run_world(const char* name, int ranks) {
  const fs::path dir = fresh_dir(name);
  std::vector<pid_t> children;
  for (int r = 0; r < ranks; ++r) {
    const pid_t pid = ::fork();
    ASSERT_GE(pid, 0);
    if (pid == 0) ::_exit(run_rank(dir, r, ranks));
    children.push_back(pid);
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(90);
  for (size_t r = 0; r < children.size(); ++r) {
    int status = 0;
    while (::waitpid(children[r], &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        for (pid_t pid : children) ::kill(pid, SIGKILL);
        ::waitpid(children[r], &status, 0);
        ADD_FAILURE() << "rank " << r << " did not finish in 90 s";
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
        << "rank " << r << " ended with status " << status;
  }
  fs::remove_all(dir);
}

TEST(KeyValueStore, TwoRanksMeetThroughAFileStore) { run_world("two", 2); }
TEST(KeyValueStore, FourRanksMeetThroughAFileStore) { run_world("four", 4); }

// hm_init of rank 1 of 2 with one store; returns its status and message.
hm_status_t init_alone(FileStore& store, const hm_kv_store_t& c_store, int timeout_ms,
                       std::string* message) {
  clear_launcher_env();
  hm_config_t config = HM_CONFIG_INITIALIZER;
  config.rank = 1;
  config.world_size = 2;
  config.timeout_ms = timeout_ms;
  config.local_addr = "127.0.0.1";
  config.kv_store = &c_store;
  hm_comm_t comm = nullptr;
  const hm_status_t status = hm_init(&config, &comm);
  *message = hm_last_error_message();
  EXPECT_EQ(comm, nullptr);
  (void)store;
  return status;
}

TEST(KeyValueStore, AFailingGetFailsInitNamingTheKey) {
  const fs::path dir = fresh_dir("failing");
  FileStore store{dir};
  store.fail_get_with = 7;
  const hm_kv_store_t c_store = store.c_store();
  std::string message;
  EXPECT_EQ(init_alone(store, c_store, 5000, &message), HM_ERR_TRANSPORT);
  EXPECT_NE(message.find("get of 'holmes/"), std::string::npos) << message;
  EXPECT_NE(message.find("returned 7"), std::string::npos) << message;
  EXPECT_NE(message.find("the store the caller brought"), std::string::npos) << message;
  EXPECT_EQ(store.get_calls, 1);
  fs::remove_all(dir);
}

TEST(KeyValueStore, ASilentStoreTimesOutWithinTheTimeout) {
  const fs::path dir = fresh_dir("silent");
  FileStore store{dir};
  const hm_kv_store_t c_store = store.c_store();
  std::string message;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(init_alone(store, c_store, 300, &message), HM_ERR_TIMEOUT);
  const auto took = std::chrono::steady_clock::now() - start;
  // Rank 0 never comes: the wait for its job key ends at the timeout, not later.
  EXPECT_LT(took, std::chrono::seconds(10));
  EXPECT_NE(message.find("holmes/world1/job"), std::string::npos) << message;
  fs::remove_all(dir);
}

TEST(KeyValueStore, AMalformedStoreIsRefusedNamingTheField) {
  FileStore store{fs::temp_directory_path()};
  hm_kv_store_t c_store = store.c_store();
  std::string message;
  c_store.add = nullptr;
  EXPECT_EQ(init_alone(store, c_store, 1000, &message), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("hm_kv_store_t.add is NULL"), std::string::npos) << message;
  c_store = store.c_store();
  c_store.size = 3;
  EXPECT_EQ(init_alone(store, c_store, 1000, &message), HM_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("hm_kv_store_t.size is 3"), std::string::npos) << message;
  EXPECT_EQ(store.get_calls, 0);
}

}  // namespace
