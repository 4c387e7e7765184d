// pfsnet: the operator's command-line tool. Talks to the local pfsnetd over its admin
// socket (--socket, or PFSNET_SOCKET, default /run/pfsnet/pfsnetd.sock). Each subcommand
// is one add_* function (cli.h); this file only assembles them.
#include <pfsnet/version.h>

#include <cstdlib>

#include "cli.h"

int main(int argc, char** argv) {
  using namespace pfsnet::cli;
  CLI::App app{"pfsnet: operate and observe a pfsnet cluster through the local pfsnetd"};
  app.require_subcommand(1);
  app.set_version_flag("--version", pfsnet::version_line("pfsnet"));
  Invocation inv;
  const char* env = std::getenv("PFSNET_SOCKET");
  inv.socket = env && *env ? env : "/run/pfsnet/pfsnetd.sock";
  app.add_option("--socket", inv.socket, "admin socket of the local pfsnetd (env PFSNET_SOCKET)");
  add_ping(app, inv);
  add_keygen(app, inv);
  add_diag(app, inv);
  add_config(app, inv);
  add_nis_and_peers(app, inv);
  add_status(app, inv);
  add_health(app, inv);
  add_upgrade(app, inv);
  add_mesh(app, inv);
  add_netverify(app, inv);
  add_selftest(app, inv);
  add_tune(app, inv);
  add_fault(app, inv);
  add_route(app, inv);
  add_nrs(app, inv);
  add_storage(app, inv);
  try {
    app.parse(argc, argv);  // runs the chosen subcommand's callback
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return inv.rc;
}
