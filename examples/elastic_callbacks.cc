// The engine's own training loop in a user's program, under the engine's elastic agent, with
// the program told about every step and every fault through callbacks (as a fault handler
// registered with the launcher would be):
//
//   elastic_callbacks [STEPS]
//
// Started plainly, the program is the agent: it launches two workers (this same program, which
// find the agent's environment and train) with --elastic's supervision and prints what the
// agent's fault handler is told. Each worker trains gpt_tiny on the fortunes corpus and prints
// every tenth committed step, and a fault it survived: the peer it lost and the step it resumes
// after, or, for a replacement process, that it was restored and from where. Kill a worker
// (kill -9) while it trains: the agent replaces it, both callbacks report, and training ends at
// STEPS with exit status 0.
#include <cstdio>
#include <cstdlib>
#include <string>

#include "cann_train/elastic/agent.h"
#include "cann_train/train/dist_env.h"
#include "cann_train/train/trainer.h"

using namespace cann;

int main(int argc, char** argv) {
  const int steps = argc > 1 ? std::atoi(argv[1]) : 200;
  auto env = train::detect_dist_env();
  if (!env.ok()) {
    std::fprintf(stderr, "elastic_callbacks: %s\n", env.status().message().c_str());
    return 2;
  }
  if (!env->has_value()) {
    elastic::AgentConfig agent;
    agent.nproc_per_node = 2;
    agent.elastic = true;
    agent.worker_args = {std::to_string(steps)};
    agent.on_fault = [](const elastic::AgentConfig::WorkerFault& f) {
      std::printf("agent: rank %d failed (%s); generation %d restarts %d worker(s) from %s\n",
                  f.rank, f.cause.c_str(), f.generation, f.replaced, f.restored_from.c_str());
      std::fflush(stdout);
    };
    auto code = elastic::run_agent(agent);
    if (!code.ok()) {
      std::fprintf(stderr, "elastic_callbacks: %s\n", code.status().message().c_str());
      return 1;
    }
    return *code;
  }
  train::TrainConfig config;
  config.model = "gpt_tiny";
  config.steps = steps;
  config.batch_size = 4;
  config.seq_len = 32;
  config.threads = 1;
  config.eval_every = 0;
  config.sample_tokens = 0;
  config.quiet = true;
  auto trainer = train::Trainer::create(config, &**env);
  if (!trainer.ok()) {
    std::fprintf(stderr, "elastic_callbacks: %s\n", trainer.status().message().c_str());
    return trainer.status().exit_code();
  }
  train::TrainCallbacks callbacks;
  callbacks.on_step = [](const train::StepEvent& e) {
    if (e.step % 10 == 0) {
      std::printf("rank %d: step %d, loss %.4f (generation %d)\n", e.rank, e.step, e.loss,
                  e.generation);
      std::fflush(stdout);
    }
  };
  callbacks.on_fault = [](const train::FaultEvent& f) {
    std::printf(
        "rank %d: fault handled: %s; generation %d resumes after step %d, restored from "
        "%s\n",
        f.rank, f.what_failed.c_str(), f.generation, f.restored_step, f.restored_from.c_str());
    std::fflush(stdout);
  };
  (*trainer)->set_callbacks(std::move(callbacks));
  train::RunSummary summary;
  if (Status s = (*trainer)->run(&summary); !s.ok()) {
    std::fprintf(stderr, "elastic_callbacks: %s\n", s.message().c_str());
    return s.exit_code();
  }
  std::printf("rank %d: done at step %d, loss %.4f\n", (*env)->rank, summary.last_step,
              summary.last_loss);
  return 0;
}
