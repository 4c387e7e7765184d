// Where a client's job id comes from when its caller names none (issue 70, item 4; Lustre's
// jobid_var and jobid_name): an environment variable of the calling process (SLURM_JOB_ID,
// PBS_JOBID, LSB_JOBID, ...), or a template of facts about it:
//   rpc.jobid_var = "disable"       no job id (the default, as Lustre's)
//                 = "procname_uid"  the template "%e.%u": executable name and uid ("dd.1000")
//                 = "nodelocal"     rpc.jobid_name, expanded
//                 = any other name  that variable's value; where the process has none,
//                                   rpc.jobid_name expanded -- unless it names %j (the
//                                   variable's value): then no job id
// rpc.jobid_name's codes: %e executable name, %u uid, %g gid, %h host name, %H its first
// label, %p pid, %j the variable's value, %% a '%'. The result is cut to 64 bytes and any
// byte that is not printable ASCII, or a space, becomes '_' (a job id's wire form).
// Thread safety: pure functions but this_process(), which reads /proc and the environment.
#pragma once

#include <pfsnet/status.h>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

namespace pfsnet {

struct JobIdRule {
  std::string var = "disable";
  std::string name = "%e.%u";
  bool enabled() const { return !var.empty() && var != "disable"; }
};

// What the rule may read of a process.
struct ProcessFacts {
  std::string exe;   // the executable's name (no directory)
  std::string host;  // the host's name
  uint32_t uid = 0, gid = 0;
  int64_t pid = 0;
  std::function<std::optional<std::string>(const std::string&)> env;  // a variable's value
};
// This process's.
ProcessFacts this_process();

// OK, or what is wrong with a template (an unknown %-code, a '%' at its end).
Status check_job_name(std::string_view tmpl);
// `tmpl` with its codes replaced (`var_value` for %j); an unknown code is kept as written.
std::string expand_job_name(std::string_view tmpl, const ProcessFacts& p,
                            std::string_view var_value);
// The job id `rule` gives a process with `facts`; "" for none.
std::string resolve_job_id(const JobIdRule& rule, const ProcessFacts& facts);
// The same for this process, whose facts are read only when the rule is enabled (the
// default, "disable", reads nothing: RpcOptions::from runs at every config change).
std::string resolve_job_id(const JobIdRule& rule);

}  // namespace pfsnet
