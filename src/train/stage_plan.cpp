#include "train/stage_plan.hpp"

#include "model/av_net.hpp"
#include "precision/precision_policy.hpp"

namespace avtrain {

StagePlan plan_stages(const RunConfig& c, Backend& be, const data::SetInfo& set, int pp) {
  ParamStore params;
  const PrecisionPolicy policy(c.precision);
  AVNet net(be, params, c.model, set, policy);
  StagePlan plan;
  for (std::size_t i = 0; i < net.layers().size(); ++i) {
    parallel::LayerCost cost;
    cost.name = net.layers()[i]->name();
    const auto [first, last] = net.param_range(i);
    for (ParamId id = first; id < last; ++id)
      if (params.info(id).trainable) cost.params += params.info(id).size;
    cost.flops = net.layers()[i]->forward_flops(c.train.micro_batch, net.geometry().tokens);
    plan.layers.push_back(cost);
  }
  for (const ParamInfo& p : params.params())
    if (p.trainable && (plan.modules.empty() || plan.modules.back() != p.module)) plan.modules.push_back(p.module);
  plan.stages = parallel::partition_stages(plan.layers, pp, c.parallel.partition);
  return plan;
}

}  // namespace avtrain
