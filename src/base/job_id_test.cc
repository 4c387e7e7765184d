// Where a job id comes from (base/job_id.h): Lustre's jobid_var and jobid_name rules on the
// facts of a process given by the test.
#include "base/job_id.h"

#include <gtest/gtest.h>

#include <map>

namespace pfsnet {
namespace {

ProcessFacts facts(std::map<std::string, std::string> env) {
  ProcessFacts p;
  p.exe = "dd";
  p.host = "c042.cluster.example";
  p.uid = 1000;
  p.gid = 100;
  p.pid = 4711;
  p.env = [env](const std::string& k) -> std::optional<std::string> {
    auto it = env.find(k);
    if (it == env.end()) return std::nullopt;
    return it->second;
  };
  return p;
}

TEST(JobIdTest, LustresRulesGiveTheJobId) {
  const ProcessFacts in_job = facts({{"SLURM_JOB_ID", "41325311"}});
  const ProcessFacts outside = facts({});
  EXPECT_EQ(resolve_job_id({"disable", "%e.%u"}, in_job), "") << "the default: none";
  EXPECT_EQ(resolve_job_id({"", "%e.%u"}, in_job), "");
  EXPECT_EQ(resolve_job_id({"procname_uid", "ignored"}, in_job), "dd.1000");
  EXPECT_EQ(resolve_job_id({"nodelocal", "%H-%p"}, in_job), "c042-4711");
  EXPECT_EQ(resolve_job_id({"SLURM_JOB_ID", "%e.%u"}, in_job), "41325311");
  // The variable unset: the template, unless it wants the variable.
  EXPECT_EQ(resolve_job_id({"SLURM_JOB_ID", "%e.%u"}, outside), "dd.1000");
  EXPECT_EQ(resolve_job_id({"SLURM_JOB_ID", "%j.%u"}, outside), "");
  EXPECT_EQ(resolve_job_id({"SLURM_JOB_ID", "%j.%u"}, in_job), "41325311.1000");
  EXPECT_EQ(resolve_job_id({"SLURM_JOB_ID", "%e.%u"}, facts({{"SLURM_JOB_ID", ""}})), "dd.1000")
      << "an empty value is no value";
  // Every code; an unknown one kept as written.
  EXPECT_EQ(expand_job_name("%e %u %g %h %H %p %j %% %x", in_job, "J"),
            "dd 1000 100 c042.cluster.example c042 4711 J % %x");
  // A job id's wire form: printable, no space, at most 64 bytes.
  EXPECT_EQ(resolve_job_id({"PBS_JOBID", ""}, facts({{"PBS_JOBID", "12 34\tx"}})), "12_34_x");
  EXPECT_EQ(resolve_job_id({"PBS_JOBID", ""}, facts({{"PBS_JOBID", std::string(100, 'a')}})),
            std::string(64, 'a'));
}

TEST(JobIdTest, ATemplateWithAnUnknownCodeIsRefused) {
  EXPECT_TRUE(check_job_name("%e.%u").ok());
  EXPECT_TRUE(check_job_name("job-%j%%").ok());
  Status s = check_job_name("%e.%q");
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("unknown code %q"), std::string::npos) << s.message();
  EXPECT_FALSE(check_job_name("%e%").ok());
}

TEST(JobIdTest, ThisProcessIsNamed) {
  ProcessFacts p = this_process();
  EXPECT_FALSE(p.exe.empty());
  EXPECT_GT(p.pid, 0);
  ASSERT_TRUE(p.env);
  EXPECT_TRUE(p.env("PATH").has_value() || !p.env("PFSNET_SURELY_UNSET_VARIABLE").has_value());
  EXPECT_FALSE(p.env("PFSNET_SURELY_UNSET_VARIABLE").has_value());
  // Resolved for this process: nothing read while disabled, its own facts when not.
  EXPECT_EQ(resolve_job_id(JobIdRule{}), "");
  EXPECT_EQ(resolve_job_id(JobIdRule{"procname_uid", ""}), p.exe + "." + std::to_string(p.uid));
}

}  // namespace
}  // namespace pfsnet
