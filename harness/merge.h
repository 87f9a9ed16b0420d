// Sharded campaigns, one verdict: `check --shard i/n --json si.json` on n
// machines, then `report merge s*.json` reads the shards' JSON back
// (ParseCheckJson), checks they are one campaign -- the same schema, tier,
// seed, backends, plug-ins and shard count, every shard 0..n-1 exactly
// once -- and merges them into the campaign they partition (MergeShards):
// counts summed, every failure with its reproducer, the decode report's
// verdict, so the merged run reports and exits as the unsharded run would.
#ifndef ATTNKIT_HARNESS_MERGE_H_
#define ATTNKIT_HARNESS_MERGE_H_

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "harness/campaign.h"
#include "harness/report.h"
#include "runtime/status.h"

namespace attnkit::harness {

// A campaign read back from a check's JSON (schema kJsonSchemaVersion).
// `context.plugins` views `plugins`: refresh it (Bind) after a copy.
struct CampaignReport {
  std::string source;  // the file it came from, for messages
  CampaignResult result;
  JsonContext context;
  std::vector<std::string> plugins;
  int64_t shard_index = 0;  // -1: a merged report (shard "all/n")
  int64_t shard_count = 1;
  void Bind() { context.plugins = plugins; }
};

// INVALID_ARGUMENT naming `source` and the field that is missing, of the
// wrong type or not understood (a case string, an outcome, the shard).
StatusOr<CampaignReport> ParseCheckJson(std::string_view text,
                                        std::string_view source);

// The shards' union as one campaign (shard "all/n"): INVALID_ARGUMENT when
// they are not one campaign's shards, naming the files and the field, or
// when a shard is missing or given twice. Failures are ordered by case
// index, then by backend, as the unsharded run finds them.
StatusOr<CampaignReport> MergeShards(std::vector<CampaignReport> shards);

// `attnkit_cli report merge FILE... [--json F] [--junit F]`: prints every
// failure, the summary and the verdict; exits as CheckVerdict (0, 1, 4), or
// 2 for bad usage or shards that are not one campaign.
int ReportMain(int argc, char** argv);

}  // namespace attnkit::harness

#endif  // ATTNKIT_HARNESS_MERGE_H_
