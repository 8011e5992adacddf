#include "common/elastic.h"

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/job_layout.h"
#include "common/layout.h"

namespace dhp {
namespace {

// One candidate: its three values and its world size.
struct Candidate {
  int vision = 1, text = 1, dp = 1;
  int world = 0;
  bool own = false;
};

std::pair<int, int> Bounds(const v1::ElasticRange& r, int value) {
  return {r.has_min() ? r.min() : value, r.has_max() ? r.max() : value};
}

// The values of one dimension within its bounds that pass `divides` and leave `spec`
// valid when changed alone (so a combination is rarely refused as a whole).
template <class Divides, class Choose>
std::vector<int> ValidValues(const v1::JobSpec& spec, const v1::ElasticRange& range, int value,
                             const SpecOptions& options, const Divides& divides,
                             const Choose& choose) {
  const auto [lo, hi] = Bounds(range, value);
  std::vector<int> out;
  for (int v = lo; v <= hi; ++v) {
    if (v == value) {
      out.push_back(v);
      continue;
    }
    if (!divides(v)) continue;
    LayoutChoice c;
    choose(c, v);
    v1::JobSpec changed = WithLayout(spec, c);
    if (NormalizeAndValidateSpec(&changed, options).ok()) out.push_back(v);
  }
  return out;
}

}  // namespace

v1::JobSpec WithLayout(v1::JobSpec spec, const LayoutChoice& choice) {
  if (choice.vision_degree.has_value()) spec.mutable_vision()->set_degree(*choice.vision_degree);
  if (choice.text_degree.has_value()) spec.mutable_text()->set_degree(*choice.text_degree);
  const int dp = spec.data_parallel_size();
  if (choice.data_parallel_size.has_value() && *choice.data_parallel_size != dp) {
    const v1::TrainingSpec& t = spec.training();
    const bool whole_share =
        dp >= 1 && t.batch_size() % dp == 0 && t.micro_batch_size() == t.batch_size() / dp;
    if (whole_share) spec.mutable_training()->clear_micro_batch_size();
    spec.set_data_parallel_size(*choice.data_parallel_size);
  }
  if (choice.placement != v1::PLACEMENT_UNSPECIFIED) spec.set_placement(choice.placement);
  return spec;
}

std::string DescribeLayoutChange(const v1::JobSpec& before, const v1::JobSpec& after) {
  std::string out = absl::StrCat(" on layout ", LayoutForSpec(after).DebugString(), " (was ",
                                 LayoutForSpec(before).DebugString(), ")");
  const int64_t micro = after.training().micro_batch_size();
  const int64_t was = before.training().micro_batch_size();
  if (micro != was) {
    absl::StrAppend(&out, ", training.micro_batch_size ", micro, " (was ", was, ")");
  }
  return out;
}

std::vector<v1::JobSpec> ElasticLayouts(const v1::JobSpec& spec, const SpecOptions& options) {
  const v1::ElasticSpec& e = spec.elastic();
  const int vision = spec.vision().degree(), text = spec.text().degree();
  const int dp = spec.data_parallel_size();
  absl::StatusOr<ModelPreset> model = ResolveSpecModel(spec, options);
  const bool known = model.ok();
  const int vision_heads = known ? model->vision.num_heads : 0;
  const int text_heads = known ? model->text.num_heads : 0;
  const int64_t batch = spec.training().batch_size();

  const std::vector<int> dps = ValidValues(
      spec, e.data_parallel_size(), dp, options, [&](int v) { return batch % v == 0; },
      [](LayoutChoice& c, int v) { c.data_parallel_size = v; });
  std::vector<int> texts{text}, visions{vision};
  if (known) {
    texts = ValidValues(
        spec, e.text_degree(), text, options, [&](int v) { return text_heads % v == 0; },
        [](LayoutChoice& c, int v) { c.text_degree = v; });
    visions = ValidValues(
        spec, e.vision_degree(), vision, options, [&](int v) { return vision_heads % v == 0; },
        [](LayoutChoice& c, int v) { c.vision_degree = v; });
  }
  if (dps.size() * texts.size() * visions.size() <= 1) return {spec};

  std::vector<Candidate> all;
  for (int d : dps) {
    for (int t : texts) {
      for (int v : visions) {
        comm::Layout layout = LayoutForSpec(spec);
        layout.dp = d;
        layout.text_degree = t;
        layout.vision_degree = v;
        all.push_back({v, t, d, layout.WorldSize(), v == vision && t == text && d == dp});
      }
    }
  }
  std::sort(all.begin(), all.end(), [](const Candidate& a, const Candidate& b) {
    return std::make_tuple(-a.world, !a.own, -a.dp, -a.text, -a.vision) <
           std::make_tuple(-b.world, !b.own, -b.dp, -b.text, -b.vision);
  });
  auto build = [&](const Candidate& c) -> std::optional<v1::JobSpec> {
    if (c.own) return spec;
    LayoutChoice choice;
    choice.vision_degree = c.vision;
    choice.text_degree = c.text;
    choice.data_parallel_size = c.dp;
    v1::JobSpec changed = WithLayout(spec, choice);
    if (!NormalizeAndValidateSpec(&changed, options).ok()) return std::nullopt;
    return changed;
  };
  std::vector<v1::JobSpec> out;
  // The smallest valid layout is always offered: the job can start as soon as it fits.
  std::optional<v1::JobSpec> smallest;
  size_t smallest_at = all.size();
  while (smallest_at > 0 && !smallest.has_value()) smallest = build(all[--smallest_at]);
  for (size_t i = 0; i < smallest_at && out.size() + 1 < kMaxElasticLayouts; ++i) {
    if (std::optional<v1::JobSpec> s = build(all[i])) out.push_back(*std::move(s));
  }
  if (smallest.has_value()) out.push_back(*std::move(smallest));
  return out;
}

}  // namespace dhp
