// The recommendation training loop; see rec_trainer.h.
#include "recsys/rec_trainer.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <optional>
#include <vector>

#include "comm/group.h"
#include "core/fs.h"
#include "core/json_line.h"
#include "core/timer.h"
#include "kernels/cpu/adamw.h"
#include "parallel/onebit_adam.h"
#include "parallel/reductions.h"
#include "recsys/local_store.h"
#include "recsys/metrics.h"
#include "recsys/rec_checkpoint.h"
#include "recsys/rec_model.h"

namespace cann::recsys {
namespace {

// Where a run's batches come from: the generator, or a Criteo file whose first eval_rows
// impressions are held out for evaluation and whose remainder is read round and round.
class ClickSource {
 public:
  static StatusOr<std::unique_ptr<ClickSource>> open(const RecSpec& spec,
                                                     const RecTrainConfig& config,
                                                     const RecWorkerContext& context) {
    auto s = std::unique_ptr<ClickSource>(new ClickSource());
    s->batch_ = config.batch_size;
    s->worker_ = context.worker;
    s->workers_ = context.workers;
    if (config.data_path.empty()) {
      auto gen = synthetic_spec_for(spec, config.seed);
      if (!gen.ok())
        return InvalidArgument("no --data, so synthetic clicks: " + gen.status().message() +
                               ", or pass a Criteo TSV file with --data");
      s->synthetic_.emplace(*gen);
      return s;
    }
    CANN_ASSIGN_OR_RETURN(s->reader_, CriteoReader::open(config.data_path, config.bad_lines));
    if (spec.dense_features != kCriteoDenseFeatures ||
        spec.sparse_features != kCriteoSparseFeatures)
      return InvalidArgument(
          spec.source + ": a Criteo file has " + std::to_string(kCriteoDenseFeatures) +
          " dense and " + std::to_string(kCriteoSparseFeatures) + " sparse features, the model " +
          std::to_string(spec.dense_features) + " and " + std::to_string(spec.sparse_features) +
          "; hint: use a Criteo-shaped spec such as dlrm_criteo_kaggle");
    if (!spec.hash_ids)
      return InvalidArgument(spec.source +
                             ": Criteo's categorical values are 32-bit hashes, far over any "
                             "table's rows; hint: set hash_ids: true");
    // The held-out rows.
    ClickBatch part;
    while (s->held_out_ < config.eval_rows) {
      const int want = static_cast<int>(std::min<int64_t>(4096, config.eval_rows - s->held_out_));
      CANN_ASSIGN_OR_RETURN(int got, s->reader_->next(want, &part));
      if (got == 0) break;
      s->eval_.push_back(part);
      s->held_out_ += got;
    }
    if (s->held_out_ == 0)
      return InvalidArgument(config.data_path +
                             ": no impressions to train or evaluate on; hint: check the file");
    return s;
  }

  // This worker's slice of the next global batch.
  Status next(int64_t step, ClickBatch* out) {
    const int local = batch_ / workers_;
    if (synthetic_) {
      synthetic_->fill(step * batch_ + static_cast<int64_t>(worker_) * local, local, out);
      return OkStatus();
    }
    if (workers_ == 1) return next_global(out);
    CANN_RETURN_IF_ERROR(next_global(&global_));
    slice_rows(global_, worker_ * local, local, out);
    return OkStatus();
  }

  // The next global batch of the file (a short batch at the end of the file is dropped and the
  // file read again from after the held-out rows).
  Status next_global(ClickBatch* out) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      CANN_ASSIGN_OR_RETURN(int got, reader_->next(batch_, out));
      if (got == batch_) return OkStatus();
      if (!first_pass_) first_pass_ = reader_->stats();
      CANN_RETURN_IF_ERROR(reader_->rewind());
      ClickBatch skip;
      for (int64_t skipped = 0; skipped < held_out_;) {
        CANN_ASSIGN_OR_RETURN(
            int n,
            reader_->next(static_cast<int>(std::min<int64_t>(4096, held_out_ - skipped)), &skip));
        if (n == 0) break;
        skipped += n;
      }
    }
    return InvalidArgument(reader_->path() + ": fewer impressions after the " +
                           std::to_string(held_out_) + " held out than one batch of " +
                           std::to_string(batch_) +
                           "; hint: lower --batch-size or --eval-rows, or give a longer file");
  }

  // Calls fn(batch) for every held-out batch.
  template <typename Fn>
  Status for_each_eval(int64_t rows, Fn fn) {
    if (synthetic_) {
      ClickBatch b;
      for (int64_t done = 0; done < rows; done += 4096) {
        const int n = static_cast<int>(std::min<int64_t>(4096, rows - done));
        synthetic_->fill(kSyntheticEvalPosition + done, n, &b);
        CANN_RETURN_IF_ERROR(fn(b));
      }
      return OkStatus();
    }
    for (const ClickBatch& b : eval_) CANN_RETURN_IF_ERROR(fn(b));
    return OkStatus();
  }

  const SyntheticClicks* synthetic() const { return synthetic_ ? &*synthetic_ : nullptr; }
  // The file's malformed lines, counted over its first complete read (a later pass meets the
  // same ones again); null for synthetic data.
  const CriteoStats* file_stats() const {
    if (!reader_) return nullptr;
    return first_pass_ ? &*first_pass_ : &reader_->stats();
  }

 private:
  ClickSource() = default;
  int batch_ = 0, worker_ = 0, workers_ = 1;
  ClickBatch global_;
  std::optional<SyntheticClicks> synthetic_;
  std::unique_ptr<CriteoReader> reader_;
  std::vector<ClickBatch> eval_;
  int64_t held_out_ = 0;
  std::optional<CriteoStats> first_pass_;
};

struct Evaluation {
  double auc, log_loss;
};

StatusOr<Evaluation> evaluate(const RecSpec& spec, RecModel& model, EmbeddingStore& store,
                              ClickSource& source, int64_t rows) {
  AucAccumulator acc;
  PulledRows pulled;
  std::vector<float> logits;
  CANN_RETURN_IF_ERROR(source.for_each_eval(rows, [&](const ClickBatch& b) -> Status {
    CANN_RETURN_IF_ERROR(index_batch(spec, b, &pulled));
    CANN_RETURN_IF_ERROR(store.read(&pulled));
    logits.resize(b.batch);
    model.score(b, pulled, logits.data());
    acc.add(logits.data(), b.labels.data(), b.batch);
    return OkStatus();
  }));
  return Evaluation{acc.auc(), acc.log_loss_from_logits()};
}

}  // namespace

StatusOr<SyntheticClickSpec> synthetic_spec_for(const RecSpec& spec, uint64_t seed) {
  SyntheticClickSpec g;
  g.seed = seed;
  g.dense_features = spec.dense_features;
  const int F = spec.sparse_features;
  g.user_features = spec.architecture == RecArchitecture::kTwoTower ? spec.user_features : F / 2;
  g.item_features = F - g.user_features;
  if (g.user_features < 1 || g.item_features < 1)
    return InvalidArgument(spec.source +
                           ": synthetic clicks need at least one sparse feature per side (user, "
                           "item); hint: give sparse_features >= 2");
  g.users = spec.table_rows[0];
  g.items = spec.table_rows[g.user_features];
  if (g.user_features > 1 && g.item_features > 1 &&
      spec.table_rows[1] != spec.table_rows[g.user_features + 1])
    return InvalidArgument(spec.source +
                           ": the synthetic generator draws both sides' groups from one count, "
                           "but the group tables have " +
                           std::to_string(spec.table_rows[1]) + " and " +
                           std::to_string(spec.table_rows[g.user_features + 1]) +
                           " rows; hint: give features 1 and " +
                           std::to_string(g.user_features + 1) + " the same rows");
  if (g.user_features > 1) g.groups = spec.table_rows[1];
  CANN_RETURN_IF_ERROR(validate(g));
  return g;
}

void slice_rows(const ClickBatch& in, int begin, int n, ClickBatch* out) {
  const int B = in.batch, D = in.dense_features, F = in.sparse_features;
  out->batch = n;
  out->dense_features = D;
  out->sparse_features = F;
  out->dense.assign(in.dense.begin() + static_cast<int64_t>(begin) * D,
                    in.dense.begin() + static_cast<int64_t>(begin + n) * D);
  out->labels.assign(in.labels.begin() + begin, in.labels.begin() + begin + n);
  if (in.click_prob.empty())
    out->click_prob.clear();
  else
    out->click_prob.assign(in.click_prob.begin() + begin, in.click_prob.begin() + begin + n);
  out->offsets.assign(1, 0);
  out->ids.clear();
  for (int f = 0; f < F; ++f)
    for (int b = begin; b < begin + n; ++b) {
      out->ids.insert(out->ids.end(), in.ids.begin() + in.bag_begin(b, f),
                      in.ids.begin() + in.bag_end(b, f));
      out->offsets.push_back(static_cast<int64_t>(out->ids.size()));
    }
  (void)B;
}

StatusOr<RecRunSummary> train_recsys(const RecSpec& spec, const RecTrainConfig& config,
                                     std::FILE* out, const RecWorkerContext& context) {
  if (config.steps < 1 || config.batch_size < 1)
    return InvalidArgument("--steps and --batch-size must be positive");
  const int W = context.workers;
  if (config.batch_size % W != 0)
    return InvalidArgument("--batch-size " + std::to_string(config.batch_size) +
                           " does not split over " + std::to_string(W) +
                           " workers; hint: give a multiple of " + std::to_string(W));
  CANN_ASSIGN_OR_RETURN(std::unique_ptr<ClickSource> source,
                        ClickSource::open(spec, config, context));
  RecModel model(spec, config.seed);
  std::unique_ptr<LocalEmbeddingStore> local;
  EmbeddingStore* store = context.store;
  if (!store) {
    ShardConfig rows;
    rows.optimizer = config.sparse;
    rows.seed = config.seed;
    rows.admit_after = config.admit_after;
    rows.evict_after = config.evict_after;
    local = std::make_unique<LocalEmbeddingStore>(spec, rows);
    store = local.get();
  }
  const bool lead = context.worker == 0;
  // The dense gradients: one bucket, reduced as the transformers' data-parallel buckets are.
  plan::Bucket dense_bucket;
  dense_bucket.end = static_cast<size_t>(model.num_dense());
  using Compression = RecWorkerContext::DenseCompression;
  std::unique_ptr<parallel::FullReduction> dense_reduction;
  std::unique_ptr<parallel::TopKReduction> topk;
  std::unique_ptr<parallel::OneBitAdam> onebit;
  if (context.dense_group &&
      (context.compression == Compression::kOneBit || context.compression == Compression::kTopK)) {
    optim::AdamWConfig adam;
    adam.beta1 = 0.9f;
    adam.beta2 = 0.999f;
    adam.eps = 1e-8f;
    adam.weight_decay = 0.0f;
    adam.grad_clip = 0.0f;
    // As for the transformers: 15% of the run, but at least Adam's variance window (1000 steps
    // at beta2 = 0.999), or the frozen variance is the first gradients' noise.
    const int warmup = context.onebit_warmup >= 0 ? context.onebit_warmup
                                                  : std::max(1000, config.steps * 15 / 100);
    const std::vector<plan::Bucket> buckets = {dense_bucket};
    double ratio = 0.0;
    if (context.compression == Compression::kTopK) {
      ratio = context.topk_ratio;
      topk = std::make_unique<parallel::TopKReduction>(*context.dense_group, buckets, ratio);
    }
    onebit =
        std::make_unique<parallel::OneBitAdam>(model.table(), adam, *context.dense_group, buckets,
                                               warmup, /*warmup_bf16=*/true, topk.get(), ratio);
  } else if (context.dense_group) {
    dense_reduction = std::make_unique<parallel::FullReduction>(
        *context.dense_group, context.compression == Compression::kBf16);
  }
  std::vector<float> m(model.num_dense(), 0.0f), v(model.num_dense(), 0.0f);
  RecRunSummary summary;
  const bool checkpoints = !config.checkpoint_dir.empty();
  int resumed = 0;
  if (checkpoints && config.resume) {
    CANN_ASSIGN_OR_RETURN(resumed, committed_step(config.checkpoint_dir));
    if (resumed > 0) {
      CANN_RETURN_IF_ERROR(load_dense(config.checkpoint_dir, resumed, model.dense(), m.data(),
                                      v.data(), model.num_dense()));
      // Shard processes load their own rows when they start; the in-process tables here.
      if (local) CANN_RETURN_IF_ERROR(local->tables().load(config.checkpoint_dir, resumed));
      // A file is read from the start: its batches before the resumed step are passed over.
      ClickBatch skip;
      if (!config.data_path.empty())
        for (int s = 1; s <= resumed; ++s) CANN_RETURN_IF_ERROR(source->next(s - 1, &skip));
    }
  }
  summary.first_step = resumed + 1;
  if (const SyntheticClicks* gen = source->synthetic()) {
    summary.ceiling_auc = planted_auc(*gen, kSyntheticEvalPosition, config.eval_rows);
    summary.ceiling_log_loss = planted_log_loss(*gen, kSyntheticEvalPosition, config.eval_rows);
  }
  auto say = [&](const char* fmt, auto... args) {
    if (lead && !config.quiet && out) {
      std::fprintf(out, fmt, args...);
      std::fflush(out);
    }
  };
  say("%s: %s, %lld dense parameters, %lld embedding rows x %d in %d tables; %s\n",
      spec.name.c_str(), spec.architecture == RecArchitecture::kDlrm ? "dlrm" : "two_tower",
      static_cast<long long>(model.num_dense()), static_cast<long long>(spec.embedding_rows()),
      spec.embedding_dim, spec.sparse_features,
      config.data_path.empty() ? "synthetic clicks with planted structure"
                               : config.data_path.c_str());
  auto eval_line = [&](int step) -> Status {
    if (!lead) return OkStatus();
    store->set_step(step);
    CANN_ASSIGN_OR_RETURN(Evaluation e, evaluate(spec, model, *store, *source, config.eval_rows));
    summary.auc = e.auc;
    summary.log_loss = e.log_loss;
    if (std::isnan(summary.ceiling_auc))
      say("eval step %d: auc %.4f, log loss %.4f\n", step, e.auc, e.log_loss);
    else
      say("eval step %d: auc %.4f, log loss %.4f (planted ceiling: auc %.4f, log loss %.4f)\n",
          step, e.auc, e.log_loss, summary.ceiling_auc, summary.ceiling_log_loss);
    return OkStatus();
  };

  std::unique_ptr<std::FILE, int (*)(std::FILE*)> step_log(nullptr, &std::fclose);
  if (lead && !config.log_json.empty()) {
    step_log.reset(std::fopen(config.log_json.c_str(), "a"));  // a resumed run continues it
    if (!step_log)
      return IoError(config.log_json + ": cannot open the step log (" + errno_text() +
                     "); hint: check that its directory exists and is writable");
  }
  ClickBatch batch;
  PulledRows pulled;
  RowGrads row_grads;
  double window_loss = 0.0;
  int window = 0;
  double train_seconds = 0.0;
  if (resumed > 0)
    say("resumed from the checkpoint of step %d in %s\n", resumed, config.checkpoint_dir.c_str());
  for (int step = resumed + 1; step <= config.steps; ++step) {
    const auto t0 = std::chrono::steady_clock::now();
    CANN_RETURN_IF_ERROR(source->next(step - 1, &batch));
    CANN_RETURN_IF_ERROR(index_batch(spec, batch, &pulled));
    store->set_step(step);
    CANN_RETURN_IF_ERROR(store->pull(&pulled));
    std::fill(model.dense_grad(), model.dense_grad() + model.num_dense(), 0.0f);
    // Each worker's loss is the mean over its slice: the dense gradients are averaged over the
    // workers, the rows' scaled by 1/W so the shards' sum is the global batch's mean.
    double loss = model.forward_backward(batch, pulled, &row_grads);
    if (W > 1)
      for (auto& g : row_grads)
        for (float& v : g) v *= 1.0f / W;
    CANN_RETURN_IF_ERROR(store->push(pulled, row_grads));
    if (context.dense_group) {
      if (onebit)
        CANN_RETURN_IF_ERROR(onebit->reduction()->reduce(dense_bucket, 0, model.dense_grad()));
      else
        CANN_RETURN_IF_ERROR(dense_reduction->reduce(dense_bucket, 0, model.dense_grad()));
      float mean_loss = static_cast<float>(loss / W);
      CANN_RETURN_IF_ERROR(
          context.dense_group
              ->allreduce(&mean_loss, 1, comm::DataType::kFloat32, comm::ReduceOp::kSum)
              ->wait());
      loss = mean_loss;
    }
    if (onebit) {
      CANN_RETURN_IF_ERROR(onebit->step(model.dense(), model.dense_grad(), config.lr).status());
    } else {
      const kernels::AdamWHyper h{config.lr, 0.9f, 0.999f, 1e-8f, 0.0f, step, 1.0f};
      kernels::adamw_update(model.dense(), m.data(), v.data(), model.dense_grad(),
                            model.num_dense(), h);
    }
    const double step_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    train_seconds += step_s;
    if (checkpoints && ((config.checkpoint_every > 0 && step % config.checkpoint_every == 0) ||
                        step == config.steps)) {
      // Every eighth checkpoint is a base of every row seen, the others the rows touched since
      // the previous one: a resume reads at most a base and seven deltas.
      const int index = config.checkpoint_every > 0 ? step / config.checkpoint_every : 1;
      CANN_RETURN_IF_ERROR(store->checkpoint(config.checkpoint_dir, step, index % 8 == 1));
      if (lead) {
        CANN_RETURN_IF_ERROR(save_dense(config.checkpoint_dir, step, model.dense(), m.data(),
                                        v.data(), model.num_dense()));
        CANN_RETURN_IF_ERROR(commit_step(config.checkpoint_dir, step));
      }
    }
    summary.samples += static_cast<int64_t>(batch.batch) * W;
    if (step == summary.first_step) summary.first_loss = loss;
    summary.last_loss = loss;
    window_loss += loss;
    ++window;
    if (step % std::max(1, config.log_interval) == 0 || step == config.steps) {
      say("step %d/%d: loss %.4f, %.0f samples/s\n", step, config.steps, window_loss / window,
          summary.samples / train_seconds);
      window_loss = 0.0;
      window = 0;
    }
    const bool evaluated =
        (config.eval_interval > 0 && step % config.eval_interval == 0) || step == config.steps;
    if (evaluated) CANN_RETURN_IF_ERROR(eval_line(step));
    if (step_log) {
      const int64_t samples = static_cast<int64_t>(batch.batch) * W;
      JsonLine j;
      j.add("step", step).add("time", unix_seconds()).add("loss", loss).add("lr", config.lr);
      j.add("step_time_s", step_s).add("samples", samples).add("samples_per_s", samples / step_s);
      if (evaluated) {
        j.add("auc", summary.auc).add("log_loss", summary.log_loss);
        if (!std::isnan(summary.ceiling_auc)) j.add("ceiling_auc", summary.ceiling_auc);
      }
      if (std::fprintf(step_log.get(), "%s\n", j.str().c_str()) < 0 ||
          std::fflush(step_log.get()) != 0)
        return IoError(config.log_json + ": cannot append the step log (" + errno_text() +
                       "); hint: check the disk has room");
    }
    if (context.on_step) context.on_step(step);
  }
  summary.steps = config.steps;
  summary.train_seconds = train_seconds;
  summary.samples_per_s = summary.samples / std::max(train_seconds, 1e-9);
  if (const CriteoStats* st = source->file_stats(); st && st->bad > 0)
    say("%s: %s\n", config.data_path.c_str(), describe(*st, config.bad_lines).c_str());
  return summary;
}

}  // namespace cann::recsys
