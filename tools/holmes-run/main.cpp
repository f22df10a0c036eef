// holmes-run: start a Holmes job of N local ranks.
//
//   holmes-run -n N [--topology FILE] [--token T] [--timeout S] [--torch] -- PROGRAM ARGS...
//   holmes-run --print-settings [--markdown]
//
// Serves the rendezvous store itself, starts N copies of PROGRAM with HOLMES_RANK,
// HOLMES_WORLD_SIZE, HOLMES_LOCAL_RANK, HOLMES_STORE, HOLMES_TOKEN (a random one unless given),
// HOLMES_STORE_SERVE=0 and HOLMES_TOPOLOGY set, and prefixes every line they print with
// "[rank K] ". SIGINT and SIGTERM are forwarded to every rank. When a rank fails (non-zero exit
// or a signal) the others are stopped (SIGTERM, then SIGKILL after a grace period) and
// holmes-run exits non-zero, naming the rank. With --elastic a rank killed by a signal is lost,
// not a failure: the others go on (they shrink their communicators, hm_comm_shrink) and the job
// succeeds when every rank that was not lost exits 0. With --torch the ranks also get torchrun's variables
// (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT: a free port for
// torch's own store, which rank 0 serves), so torch.distributed scripts start as under torchrun
// (Debian's torchrun fails under Python 3.11).
//
// --print-settings lists every setting its ranks would start with from this environment (and
// --topology): value and source; holmes-run itself gives each rank HOLMES_RANK,
// HOLMES_WORLD_SIZE, HOLMES_LOCAL_RANK, HOLMES_STORE, HOLMES_TOKEN and HOLMES_STORE_SERVE=0.
// With --markdown it prints the registry as the README's table instead.
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "bootstrap/auth.hpp"
#include "bootstrap/store_server.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"

extern char** environ;

namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  int fd = -1;
  FILE* sink = nullptr;  // stdout or stderr
  std::string pending;   // a line not yet ended
};

struct Rank {
  int index = 0;
  pid_t pid = -1;
  bool running = false;
  int exit_code = 0;  // 128 + signal for signalled exits
  std::string how;    // "exited with status 3", "was killed by signal 9 (Killed)"
  Stream out;
  Stream err;
};

// A port nobody listens on now, for torch's TCPStore (as torchrun picks one): bound, then freed.
int free_port(const std::string& host) {
  holmes::StoreServer probe(holmes::StoreServerOptions{host, 0, "probe"});
  return probe.port();
}

std::string random_token() {
  const auto nonce = holmes::auth::random_nonce();
  std::string out;
  for (int i = 0; i < 16; ++i) out += fmt::format("{:02x}", nonce[static_cast<std::size_t>(i)]);
  return out;
}

// Writes complete lines of `data` to the stream's sink with the rank prefix.
void emit(Stream& s, int rank, const char* data, std::size_t length, bool flush_partial) {
  s.pending.append(data, length);
  std::size_t start = 0;
  for (;;) {
    const auto newline = s.pending.find('\n', start);
    if (newline == std::string::npos) break;
    fmt::print(s.sink, "[rank {}] {}\n", rank,
               std::string_view(s.pending).substr(start, newline - start));
    start = newline + 1;
  }
  s.pending.erase(0, start);
  if (flush_partial && !s.pending.empty()) {
    fmt::print(s.sink, "[rank {}] {}\n", rank, s.pending);
    s.pending.clear();
  }
  std::fflush(s.sink);
}

// Reads what is available; closes the stream at end of file.
void drain(Stream& s, int rank) {
  char buffer[65536];
  for (;;) {
    const ssize_t n = ::read(s.fd, buffer, sizeof(buffer));
    if (n > 0) {
      emit(s, rank, buffer, static_cast<std::size_t>(n), false);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return;
    emit(s, rank, nullptr, 0, true);
    ::close(s.fd);
    s.fd = -1;
    return;
  }
}

std::string describe_exit(int status, int& code) {
  if (WIFEXITED(status)) {
    code = WEXITSTATUS(status);
    return fmt::format("exited with status {}", code);
  }
  if (WIFSIGNALED(status)) {
    code = 128 + WTERMSIG(status);
    return fmt::format("was killed by signal {} ({})", WTERMSIG(status),
                       ::strsignal(WTERMSIG(status)));
  }
  code = 1;
  return "stopped";
}

void signal_all(std::vector<Rank>& ranks, int sig) {
  for (auto& r : ranks) {
    if (r.running) ::kill(-r.pid, sig);  // the rank's whole process group
  }
}

int print_settings_and_exit(bool markdown, const std::string& topology) {
  if (markdown) {
    fmt::print("{}", holmes::Settings::markdown_table());
    return 0;
  }
  try {
    holmes::Settings settings = holmes::Settings::from_environment();
    if (!topology.empty()) {
      settings.set(holmes::Setting::kTopology, topology, holmes::SettingSource::kEnvironment,
                   "holmes-run --topology");
    }
    fmt::print("{}", settings.dump());
    settings.check();
  } catch (const holmes::Error& e) {
    fmt::print(stderr, "holmes-run: {}\n", e.what());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"holmes-run: start N local ranks of a Holmes job"};
  int nranks = 0;
  std::string topology;
  std::string token;
  double timeout_s = 0;
  double grace_s = 5;
  std::string host = "127.0.0.1";
  std::vector<std::string> command;
  bool print_settings = false;
  bool markdown = false;
  app.add_option("-n,--np", nranks, "number of ranks")->check(CLI::Range(1, 4096));
  app.add_option("--topology", topology, "topology file (sets HOLMES_TOPOLOGY)")
      ->check(CLI::ExistingFile);
  app.add_option("--token", token, "job token (default: a fresh random one)");
  app.add_option("--timeout", timeout_s, "stop the job after this many seconds (0: never)");
  app.add_option("--grace", grace_s, "seconds between SIGTERM and SIGKILL when stopping ranks");
  app.add_option("--host", host, "address the store listens on");
  bool elastic = false;
  app.add_flag("--elastic", elastic,
               "a rank killed by a signal is lost, not a failure: the others go on (they shrink)");
  bool torch_env = false;
  app.add_flag("--torch", torch_env,
               "also set torchrun's RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR "
               "and MASTER_PORT (a free port)");
  app.add_option("command", command, "program and its arguments (after --)");
  app.add_flag("--print-settings", print_settings,
               "print every setting the ranks would start with, its value and source, and exit");
  app.add_flag("--markdown", markdown,
               "with --print-settings: the settings registry as a Markdown table (the README's)");
  app.prefix_command(false);
  CLI11_PARSE(app, argc, argv);
  if (print_settings) return print_settings_and_exit(markdown, topology);
  if (nranks < 1 || command.empty()) {
    fmt::print(stderr, "holmes-run: -n N and a program (after --) are required\n{}", app.help());
    return 2;
  }

  if (token.empty()) token = random_token();
  // Block the signals we handle so that they arrive through the signalfd only. This comes
  // before the store's thread starts: threads inherit the mask, and a thread that did not block
  // SIGTERM would take the default action and kill us.
  sigset_t handled;
  sigemptyset(&handled);
  sigaddset(&handled, SIGINT);
  sigaddset(&handled, SIGTERM);
  sigaddset(&handled, SIGCHLD);
  sigset_t previous;
  ::pthread_sigmask(SIG_BLOCK, &handled, &previous);
  const int signals = ::signalfd(-1, &handled, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signals < 0) {
    fmt::print(stderr, "holmes-run: signalfd: {}\n", std::strerror(errno));
    return 1;
  }

  std::optional<holmes::StoreServer> store;
  try {
    store.emplace(holmes::StoreServerOptions{host, 0, token});
  } catch (const holmes::Error& e) {
    fmt::print(stderr, "holmes-run: {}\n", e.what());
    return 1;
  }
  const std::string store_address = fmt::format("{}:{}", host, store->port());
  int torch_port = 0;
  if (torch_env) {
    try {
      torch_port = free_port(host);
    } catch (const holmes::Error& e) {
      fmt::print(stderr, "holmes-run: no free port for torch's store: {}\n", e.what());
      return 1;
    }
  }

  // Everything the children need is prepared before fork(): between fork and exec only
  // async-signal-safe calls are allowed.
  std::vector<std::string> base_env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto name = entry.substr(0, entry.find('='));
    // Do not pass on a launcher's identity that would contradict ours.
    if (name.rfind("HOLMES_", 0) == 0 || name == "RANK" || name == "WORLD_SIZE" ||
        name == "LOCAL_RANK" || name == "LOCAL_WORLD_SIZE" || name == "MASTER_ADDR" ||
        name == "MASTER_PORT") {
      continue;
    }
    base_env.push_back(entry);
  }
  // Ranks inherit HOLMES_* settings we do not set ourselves (log level, timeouts, ...).
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const auto name = entry.substr(0, entry.find('='));
    if (name.rfind("HOLMES_", 0) == 0 && name != "HOLMES_RANK" && name != "HOLMES_WORLD_SIZE" &&
        name != "HOLMES_LOCAL_RANK" && name != "HOLMES_STORE" && name != "HOLMES_TOKEN" &&
        name != "HOLMES_STORE_SERVE" && name != "HOLMES_TOPOLOGY") {
      base_env.push_back(entry);
    }
  }
  std::vector<char*> args;
  for (auto& a : command) args.push_back(a.data());
  args.push_back(nullptr);

  std::vector<Rank> ranks(static_cast<std::size_t>(nranks));
  for (int i = 0; i < nranks; ++i) {
    auto env = base_env;
    env.push_back(fmt::format("HOLMES_RANK={}", i));
    env.push_back(fmt::format("HOLMES_WORLD_SIZE={}", nranks));
    env.push_back(fmt::format("HOLMES_LOCAL_RANK={}", i));
    env.push_back(fmt::format("HOLMES_STORE={}", store_address));
    env.push_back(fmt::format("HOLMES_TOKEN={}", token));
    env.push_back("HOLMES_STORE_SERVE=0");
    if (!topology.empty()) env.push_back(fmt::format("HOLMES_TOPOLOGY={}", topology));
    if (torch_env) {
      env.push_back(fmt::format("RANK={}", i));
      env.push_back(fmt::format("WORLD_SIZE={}", nranks));
      env.push_back(fmt::format("LOCAL_RANK={}", i));
      env.push_back(fmt::format("LOCAL_WORLD_SIZE={}", nranks));
      env.push_back(fmt::format("MASTER_ADDR={}", host));
      env.push_back(fmt::format("MASTER_PORT={}", torch_port));
    }
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);

    int out_pipe[2];
    int err_pipe[2];
    if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) {
      fmt::print(stderr, "holmes-run: pipe: {}\n", std::strerror(errno));
      signal_all(ranks, SIGKILL);
      return 1;
    }
    const pid_t pid = ::fork();
    if (pid < 0) {
      fmt::print(stderr, "holmes-run: fork: {}\n", std::strerror(errno));
      signal_all(ranks, SIGKILL);
      return 1;
    }
    if (pid == 0) {
      // Child: own process group (so terminal signals reach only holmes-run, which forwards
      // them), die with holmes-run, stdin from /dev/null, output into the pipes.
      ::setpgid(0, 0);
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      ::pthread_sigmask(SIG_SETMASK, &previous, nullptr);
      const int null_fd = ::open("/dev/null", O_RDONLY);
      if (null_fd >= 0) ::dup2(null_fd, STDIN_FILENO);
      ::dup2(out_pipe[1], STDOUT_FILENO);
      ::dup2(err_pipe[1], STDERR_FILENO);
      ::execvpe(args[0], args.data(), envp.data());
      const char* message = "holmes-run: cannot execute the program\n";
      (void)!::write(STDERR_FILENO, message, std::strlen(message));
      ::_exit(127);
    }
    ::setpgid(pid, pid);  // also from the parent, so the group exists before we signal it
    ::close(out_pipe[1]);
    ::close(err_pipe[1]);
    auto& r = ranks[static_cast<std::size_t>(i)];
    r.index = i;
    r.pid = pid;
    r.running = true;
    r.out = {out_pipe[0], stdout, {}};
    r.err = {err_pipe[0], stderr, {}};
    ::fcntl(r.out.fd, F_SETFL, O_NONBLOCK);
    ::fcntl(r.err.fd, F_SETFL, O_NONBLOCK);
  }

  const auto started = Clock::now();
  std::optional<Clock::time_point> kill_at;  // SIGKILL stragglers after the grace period
  int first_failure = -1;                    // rank index
  bool interrupted = false;
  bool timed_out = false;
  int running = nranks;
  int lost = 0;  // --elastic: ranks killed by a signal
  auto stop_others = [&](const char* why) {
    if (kill_at) return;
    if (why != nullptr) fmt::print(stderr, "holmes-run: {}; stopping the other ranks\n", why);
    signal_all(ranks, SIGTERM);
    kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long>(grace_s * 1000));
  };

  while (running > 0 || std::any_of(ranks.begin(), ranks.end(),
                                    [](const Rank& r) { return r.out.fd >= 0 || r.err.fd >= 0; })) {
    std::vector<pollfd> fds;
    std::vector<Stream*> streams;
    std::vector<int> owners;
    fds.push_back({signals, POLLIN, 0});
    for (auto& r : ranks) {
      for (Stream* s : {&r.out, &r.err}) {
        if (s->fd >= 0) {
          fds.push_back({s->fd, POLLIN, 0});
          streams.push_back(s);
          owners.push_back(r.index);
        }
      }
    }
    int wait_ms = 1000;
    const int rc = ::poll(fds.data(), fds.size(), wait_ms);
    if (rc < 0 && errno != EINTR) {
      fmt::print(stderr, "holmes-run: poll: {}\n", std::strerror(errno));
      break;
    }
    for (std::size_t i = 1; i < fds.size(); ++i) {
      if (fds[i].revents != 0) drain(*streams[i - 1], owners[i - 1]);
    }
    if (fds[0].revents & POLLIN) {
      signalfd_siginfo info;
      while (::read(signals, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
        if (info.ssi_signo == SIGINT || info.ssi_signo == SIGTERM) {
          if (interrupted) {
            signal_all(ranks, SIGKILL);  // a second interrupt: no more patience
          } else {
            interrupted = true;
            fmt::print(stderr, "holmes-run: got {}, forwarding to every rank\n",
                       ::strsignal(static_cast<int>(info.ssi_signo)));
            signal_all(ranks, static_cast<int>(info.ssi_signo));
            kill_at = Clock::now() + std::chrono::milliseconds(static_cast<long>(grace_s * 1000));
          }
        }
      }
    }
    // Reap whoever has exited.
    for (;;) {
      int status = 0;
      const pid_t pid = ::waitpid(-1, &status, WNOHANG);
      if (pid <= 0) break;
      for (auto& r : ranks) {
        if (r.pid != pid || !r.running) continue;
        r.running = false;
        --running;
        r.how = describe_exit(status, r.exit_code);
        if (elastic && WIFSIGNALED(status) && !interrupted && !kill_at) {
          fmt::print(stderr, "holmes-run: rank {} {}: lost (--elastic: the others go on)\n",
                     r.index, r.how);
          ++lost;
          continue;
        }
        if (r.exit_code != 0 && first_failure < 0 && !interrupted && !kill_at) {
          first_failure = r.index;
          stop_others(fmt::format("rank {} {}", r.index, r.how).c_str());
        }
      }
    }
    const auto now = Clock::now();
    if (timeout_s > 0 && !kill_at && running > 0 &&
        now - started > std::chrono::milliseconds(static_cast<long>(timeout_s * 1000))) {
      fmt::print(stderr, "holmes-run: the job ran past --timeout {} s\n", timeout_s);
      interrupted = true;
      timed_out = true;
      stop_others(nullptr);
    }
    if (kill_at && now >= *kill_at && running > 0) {
      signal_all(ranks, SIGKILL);
      kill_at = now + std::chrono::hours(24);
    }
  }

  if (first_failure >= 0) {
    const auto& r = ranks[static_cast<std::size_t>(first_failure)];
    fmt::print(stderr, "holmes-run: job failed: rank {} {}\n", r.index, r.how);
    return r.exit_code != 0 ? r.exit_code : 1;
  }
  if (interrupted) {
    fmt::print(stderr, "holmes-run: job stopped\n");
    return timed_out ? 124 : 130;
  }
  if (lost == nranks) {
    fmt::print(stderr, "holmes-run: every rank was lost\n");
    return 1;
  }
  return 0;
}
