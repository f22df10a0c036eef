// holmes-store: a standalone rendezvous store, for jobs whose ranks should not serve it
// themselves (set HOLMES_STORE_SERVE=0 on the ranks and point HOLMES_STORE here).
//
//   holmes-store [--host 0.0.0.0] [--port 29500] [--token T]   (token also from HOLMES_TOKEN)
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <signal.h>

#include "bootstrap/store_server.hpp"
#include "core/settings.hpp"
#include "core/status.hpp"

int main(int argc, char** argv) {
  CLI::App app{"holmes-store: the rendezvous store of a Holmes job"};
  std::string host = "0.0.0.0";
  int port = 29500;
  std::string token;
  token = holmes::process_settings().text_if_given(holmes::Setting::kToken).value_or("");
  app.add_option("--host", host, "address to listen on");
  app.add_option("--port", port, "port to listen on (0: any free port)")
      ->check(CLI::Range(0, 65535));
  app.add_option("--token", token, "job token clients must prove (default: $HOLMES_TOKEN)");
  CLI11_PARSE(app, argc, argv);

  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGINT);
  sigaddset(&stop, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);  // before the server thread starts
  try {
    holmes::StoreServer server({host, static_cast<std::uint16_t>(port), token});
    fmt::print("holmes-store listening on {}:{}{}\n", host, server.port(),
               token.empty() ? " (no token: any client is accepted)" : "");
    std::fflush(stdout);
    int sig = 0;
    sigwait(&stop, &sig);
    fmt::print("holmes-store: stopping ({} clients served, {} refused)\n",
               server.accepted_connections(), server.refused_connections());
  } catch (const holmes::Error& e) {
    fmt::print(stderr, "holmes-store: {}\n", e.what());
    return 1;
  }
  return 0;
}
