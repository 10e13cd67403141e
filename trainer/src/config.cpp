#include "config.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <set>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "mlip/data/elements.h"
#include "mlip/error.h"
#include "mlip/model/heads.h"

namespace mlip::trainer {
namespace {

// A mapping in the config whose keys are read one by one; finish() rejects the rest.
class Section {
 public:
  Section(const YAML::Node& node, std::string path, std::string file)
      : node_(node), path_(std::move(path)), file_(std::move(file)) {
    if (node_ && !node_.IsNull() && !node_.IsMap()) fail(node_, "must be a mapping");
  }

  bool has(const std::string& key) const { return node_ && node_.IsMap() && node_[key]; }

  template <typename T> T get(const std::string& key, const T& fallback) {
    known_.insert(key);
    if (!has(key)) return fallback;
    return convert<T>(node_[key], key);
  }
  template <typename T> T required(const std::string& key) {
    known_.insert(key);
    if (!has(key)) fail(node_, "missing required key '" + qualified(key) + "'");
    return convert<T>(node_[key], key);
  }
  Section section(const std::string& key) {
    known_.insert(key);
    return Section(has(key) ? node_[key] : YAML::Node(), qualified(key), file_);
  }
  YAML::Node raw(const std::string& key) {
    known_.insert(key);
    return has(key) ? node_[key] : YAML::Node();
  }
  void finish() const {
    if (!node_ || !node_.IsMap()) return;
    for (const auto& kv : node_) {
      const std::string key = kv.first.as<std::string>();
      if (!known_.count(key)) {
        std::string list;
        for (const auto& k : known_) list += (list.empty() ? "" : ", ") + k;
        fail(kv.first, "unknown key '" + qualified(key) + "' (known here: " + list + ")");
      }
    }
  }
  [[noreturn]] void fail(const YAML::Node& at, const std::string& what) const;
  [[noreturn]] void fail_in_file(const YAML::Node& at, const std::string& what) const {
    int line = 0;
    try {
      line = at.Mark().line + 1;  // yaml-cpp counts from 0; an invalid node has no mark
    } catch (const YAML::Exception&) {
    }
    throw Error(file_ + (line > 0 ? ":" + std::to_string(line) : "") + ": " + what);
  }
  std::string qualified(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }
  const YAML::Node& node() const { return node_; }

 private:
  template <typename T> T convert(const YAML::Node& n, const std::string& key) const {
    try {
      return n.as<T>();
    } catch (const YAML::Exception&) {
      fail(n, "key '" + qualified(key) + "' has the wrong type for its value '" + YAML::Dump(n) + "'");
    }
  }

  YAML::Node node_;
  std::string path_, file_;
  std::set<std::string> known_;
};

nlohmann::json to_json(const YAML::Node& n, const std::string& file) {
  switch (n.Type()) {
    case YAML::NodeType::Map: {
      nlohmann::json j = nlohmann::json::object();
      for (const auto& kv : n) {
        if (!kv.first.IsScalar()) {
          throw Error(file + ":" + std::to_string(kv.first.Mark().line + 1) + ":" +
                      std::to_string(kv.first.Mark().column + 1) + ": a key must be a name, not a list or mapping");
        }
        j[kv.first.Scalar()] = to_json(kv.second, file);
      }
      return j;
    }
    case YAML::NodeType::Sequence: {
      nlohmann::json j = nlohmann::json::array();
      for (const auto& v : n) j.push_back(to_json(v, file));
      return j;
    }
    case YAML::NodeType::Scalar: {
      const std::string s = n.Scalar();
      if (n.Tag() != "!") {  // unquoted: numbers and booleans keep their type
        try {
          std::size_t pos = 0;
          const long long i = std::stoll(s, &pos);
          if (pos == s.size()) return i;
        } catch (...) {
        }
        try {
          std::size_t pos = 0;
          const double d = std::stod(s, &pos);
          if (pos == s.size()) return d;
        } catch (...) {
        }
        if (s == "true" || s == "True") return true;
        if (s == "false" || s == "False") return false;
      }
      return s;
    }
    default:
      return nullptr;
  }
}

// The head index of a data source: `name` among a multi-head model's heads, or the default head
// when unnamed; -1 for a model without heads (naming a head then is an error).
int source_head(Section& item, const std::string& name, const ModelSpec& model) {
  std::vector<std::string> heads;
  int64_t fallback = 0;
  try {
    heads = model_heads(model.hyperparameters);
    fallback = default_head(model.hyperparameters);
  } catch (const Error& e) {
    item.fail(item.node(), std::string("model.hyperparameters: ") + e.what());
  }
  if (name.empty()) return heads.empty() ? -1 : int(fallback);
  if (heads.empty())
    item.fail(item.node()["head"], item.qualified("head") + ": '" + name + "', but the model has no heads (model.hyperparameters.heads)");
  const int64_t index = find_head(heads, name);
  if (index < 0)
    item.fail(item.node()["head"], item.qualified("head") + ": '" + name + "' is not one of the model's heads (" + head_list(heads) + ")");
  return int(index);
}

std::vector<DataSource> read_sources(Section& parent, const std::string& key, const std::string& file,
                                     const ModelSpec& model) {
  const YAML::Node list = parent.raw(key);
  std::vector<DataSource> out;
  if (!list || list.IsNull()) return out;
  if (!list.IsSequence()) parent.fail(list, "key '" + parent.qualified(key) + "' must be a list of data sources");
  for (std::size_t k = 0; k < list.size(); ++k) {
    DataSource src;
    if (list[k].IsScalar()) {
      src.path = list[k].as<std::string>();
      src.head = source_head(parent, "", model);   // the default head
    } else {
      Section item(list[k], parent.qualified(key) + "[" + std::to_string(k) + "]", file);
      src.path = item.required<std::string>("path");
      src.format = item.get<std::string>("format", "auto");
      src.weight = item.get<double>("weight", 1.0);
      if (item.raw("stream")) src.stream = item.get<bool>("stream", false);
      src.head = source_head(item, item.get<std::string>("head", ""), model);
      Section units = item.section("units");
      src.units.length = units.get<std::string>("length", "angstrom");
      src.units.energy = units.get<std::string>("energy", "eV");
      src.units.stress = units.get<std::string>("stress", "");
      units.finish();
      // Unknown unit names: an error here, naming the file, line and key, not when reading data.
      for (const char* which : {"length", "energy", "stress"}) {
        try {
          if (std::string(which) == "length") src.units.length_factor();
          if (std::string(which) == "energy") src.units.energy_factor();
          if (std::string(which) == "stress" && !src.units.stress.empty()) src.units.stress_factor();
        } catch (const Error& e) {
          units.fail(units.node()[which], units.qualified(which) + ": " + e.what());
        }
      }
      item.finish();
      if (!(src.weight > 0)) item.fail(list[k], "weight of " + src.path + " must be positive");
    }
    out.push_back(src);
  }
  return out;
}

// The value nodes --set put into the config, with their assignment: errors about them name the
// --set argument, not the file (read_config clears it first).
std::vector<std::pair<YAML::Node, std::string>>& override_nodes() {
  static thread_local std::vector<std::pair<YAML::Node, std::string>> nodes;
  return nodes;
}

void set_override(YAML::Node root, const std::string& assignment) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    throw Error("--set '" + assignment + "': expected key.subkey=value");
  }
  const std::string path = assignment.substr(0, eq);
  YAML::Node value;
  try {
    value = YAML::Load(assignment.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    throw Error("--set '" + assignment + "': value is not valid YAML: " + e.what());
  }
  std::vector<std::string> keys;
  std::stringstream ss(path);
  for (std::string k; std::getline(ss, k, '.');) keys.push_back(k);
  // yaml-cpp nodes are handles: walk down by reassigning, creating maps as needed.
  std::vector<YAML::Node> chain{root};
  for (std::size_t i = 0; i + 1 < keys.size(); ++i) {
    YAML::Node next = chain.back()[keys[i]];
    if (next && !next.IsMap()) throw Error("--set '" + assignment + "': '" + keys[i] + "' is not a mapping");
    chain.push_back(next);
  }
  chain.back()[keys.back()] = value;
  override_nodes().emplace_back(chain.back()[keys.back()], assignment);
}

// yaml-cpp keeps both entries of a key given twice and reads the first: an error instead.
void reject_duplicate_keys(const YAML::Node& node, const std::string& path) {
  if (node.IsSequence()) {
    for (const auto& item : node) reject_duplicate_keys(item, path);
  }
  if (!node.IsMap()) return;
  std::map<std::string, int> seen;  // key -> line
  for (const auto& kv : node) {
    if (kv.first.IsScalar()) {
      const std::string key = kv.first.Scalar();
      const int line = kv.first.Mark().line + 1;
      if (const auto it = seen.find(key); it != seen.end()) {
        throw Error(path + ":" + std::to_string(line) + ": duplicate key '" + key + "' (first at line " +
                    std::to_string(it->second) + ")");
      }
      seen.emplace(key, line);
    }
    reject_duplicate_keys(kv.second, path);
  }
}

// The first line (1-based) whose indentation holds a tab, 0 if none: YAML indents with spaces
// only, and yaml-cpp's message for a tab ("end of map not found") does not say so.
int first_tab_indented_line(const std::string& path) {
  std::ifstream in(path);
  int number = 0;
  for (std::string line; std::getline(in, line);) {
    ++number;
    const auto text = line.find_first_not_of(" \t");
    if (text != std::string::npos && line.find('\t') < text && line[text] != '#') return number;
  }
  return 0;
}

YAML::Node load(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    throw Error(path + ": cannot open config file");
  } catch (const YAML::ParserException& e) {
    const std::string where = path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1);
    if (const int tab = first_tab_indented_line(path); tab > 0) {
      throw Error(path + ":" + std::to_string(tab) + ": indented with a tab: YAML indents with spaces only (" + where +
                  ": " + e.msg + ")");
    }
    throw Error(where + ": YAML syntax error: " + e.msg);
  }
  if (!root.IsMap()) throw Error(path + ": the config must be a mapping (model:, data:, training:, output:)");
  reject_duplicate_keys(root, path);
  for (const auto& o : overrides) set_override(root, o);
  return root;
}

}  // namespace

// Whether `at` is `node` or lies inside it.
bool within(const YAML::Node& node, const YAML::Node& at) {
  if (!node.IsDefined()) return false;
  if (node.is(at)) return true;
  if (node.IsMap()) {
    for (const auto& kv : node) {
      if (within(kv.first, at) || within(kv.second, at)) return true;
    }
  } else if (node.IsSequence()) {
    for (const auto& item : node) {
      if (within(item, at)) return true;
    }
  }
  return false;
}

void Section::fail(const YAML::Node& at, const std::string& what) const {
  // The last --set of a key is the one in effect (yaml-cpp re-points the same entry).
  const auto& nodes = override_nodes();
  for (auto it = nodes.rbegin(); it != nodes.rend(); ++it) {
    if (at.IsDefined() && within(it->first, at)) throw Error("--set '" + it->second + "': " + what);
  }
  fail_in_file(at, what);
}

// The sections of a config, each checked key by key (Section::finish: unknown keys are errors).
static void read_model(Section& top, const YAML::Node& root, const std::string& path, Config& config) {
  ModelSpec& c = config.model;
  Section model = top.section("model");
  if (!model.node() || model.node().IsNull()) top.fail(root, "missing required section 'model'");
  c.architecture = model.required<std::string>("architecture");
  c.species = model.required<std::vector<std::string>>("species");
  if (c.species.empty()) model.fail(model.node()["species"], "model.species must list at least one element");
  for (const std::string& el : c.species) {
    if (atomic_number(el) == 0) model.fail(model.node()["species"], "model.species: '" + el + "' is not an element");
    if (std::count(c.species.begin(), c.species.end(), el) > 1) {
      model.fail(model.node()["species"], "model.species: '" + el + "' is listed twice");
    }
  }
  c.cutoff = model.required<double>("cutoff");
  c.dtype = model.get<std::string>("dtype", c.dtype);
  c.seed = model.get<uint64_t>("seed", c.seed);
  c.repulsion = model.get<std::string>("repulsion", c.repulsion);
  c.repulsion_width = model.get<double>("repulsion_width", c.repulsion_width);
  const YAML::Node hp = model.raw("hyperparameters");
  if (hp && !hp.IsNull()) {
    if (!hp.IsMap()) model.fail(hp, "key 'model.hyperparameters' must be a mapping");
    c.hyperparameters = to_json(hp, path);
  }
  model.finish();
  if (c.dtype != "float32" && c.dtype != "float64") model.fail(model.node()["dtype"], "model.dtype must be float32 or float64");
  if (!(c.cutoff > 0)) model.fail(model.node()["cutoff"], "model.cutoff must be positive");
  if (c.repulsion != "none" && c.repulsion != "zbl")
    model.fail(model.node()["repulsion"], "model.repulsion must be none or zbl");
  if (!(c.repulsion_width > 0))
    model.fail(model.node()["repulsion_width"], "model.repulsion_width must be positive");

}

static void read_data(Section& top, const YAML::Node& root, const std::string& path, Config& c) {
  Section data = top.section("data");
  if (!data.node() || data.node().IsNull()) top.fail(root, "missing required section 'data'");
  c.train = read_sources(data, "train", path, c.model);
  if (c.train.empty()) data.fail(data.node(), "missing required key 'data.train' (a list of data sources)");
  c.validation = read_sources(data, "validation", path, c.model);
  c.validation_fraction = data.get<double>("validation_fraction", c.validation_fraction);
  c.split_seed = data.get<uint64_t>("split_seed", c.split_seed);
  c.cache_dir = data.get<std::string>("cache_dir", c.cache_dir);
  c.prefetch = data.get<int64_t>("prefetch", c.prefetch);
  if (c.prefetch < 0) data.fail(data.node()["prefetch"], "data.prefetch must be >= 0 (batches built ahead; 0: none)");
  Section batch = data.section("batch");
  c.batch_frames = batch.get<int64_t>("frames", c.batch_frames);
  c.batch_atoms = batch.get<int64_t>("atoms", c.batch_atoms);
  c.accumulate = batch.get<int64_t>("accumulate", c.accumulate);
  batch.finish();
  data.finish();
  if (c.validation.empty() && !(c.validation_fraction > 0 && c.validation_fraction < 1)) {
    data.fail(data.node(), "data.validation_fraction must be in (0, 1) when no data.validation is given");
  }
  if (c.batch_frames < 1 || c.batch_atoms < 0 || c.accumulate < 1) {
    data.fail(data.node(), "data.batch: frames and accumulate must be >= 1, atoms >= 0");
  }

}

static void read_optimization(Section& training, Config& c) {
  Section opt = training.section("optimizer");
  c.optimizer = opt.get<std::string>("type", c.optimizer);
  c.lr = opt.get<double>("lr", c.lr);
  c.weight_decay = opt.get<double>("weight_decay", c.weight_decay);
  c.amsgrad = opt.get<bool>("amsgrad", c.amsgrad);
  c.fused = opt.get<std::string>("fused", c.fused);
  opt.finish();
  if (c.fused != "auto" && c.fused != "true" && c.fused != "false")
    opt.fail(opt.node()["fused"], "training.optimizer.fused must be auto, true or false, not '" + c.fused + "'");
  if (c.optimizer != "adam" && c.optimizer != "adamw") {
    opt.fail(opt.node()["type"], "training.optimizer.type must be adam or adamw, not '" + c.optimizer + "'");
  }
  // A rate of 0 or below trains nothing or climbs the loss; one above float32's range is infinite
  // in a float32 model's optimiser (LibTorch's error would not name the key).
  const double most = c.model.dtype == "float32" ? std::numeric_limits<float>::max() : std::numeric_limits<double>::max();
  const auto text = [](double x) { return (std::ostringstream() << x).str(); };
  if (!(c.lr > 0 && c.lr <= most))
    opt.fail(opt.node()["lr"], "training.optimizer.lr must be positive and finite" +
                                   std::string(c.model.dtype == "float32" ? " in float32 (model.dtype)" : "") + ", not " +
                                   text(c.lr));
  if (!(c.weight_decay >= 0 && c.weight_decay <= most))
    opt.fail(opt.node()["weight_decay"], "training.optimizer.weight_decay must be >= 0 and finite, not " +
                                             text(c.weight_decay));
  Section sched = training.section("lr_schedule");
  c.schedule.type = sched.get<std::string>("type", c.schedule.type);
  c.schedule.final_lr = sched.get<double>("final_lr", c.schedule.final_lr);
  c.schedule.warmup_steps = sched.get<int64_t>("warmup_steps", c.schedule.warmup_steps);
  c.schedule.factor = sched.get<double>("factor", c.schedule.factor);
  c.schedule.patience = sched.get<int64_t>("patience", c.schedule.patience);
  c.schedule.threshold = sched.get<double>("threshold", c.schedule.threshold);
  sched.finish();
  if (c.schedule.type != "exponential" && c.schedule.type != "cosine" && c.schedule.type != "constant" &&
      c.schedule.type != "plateau") {
    sched.fail(sched.node()["type"], "training.lr_schedule.type must be exponential, cosine, constant or plateau");
  }
  Section loss = training.section("loss");
  c.loss = loss.get<std::string>("type", c.loss);
  c.huber_delta = loss.get<double>("huber_delta", c.huber_delta);
  for (auto [name, target] : {std::pair<const char*, PrefactorConfig*>{"energy", &c.energy},
                              {"forces", &c.forces},
                              {"virial", &c.virial}}) {
    Section p = loss.section(name);
    target->start = p.get<double>("start", target->start);
    target->limit = p.get<double>("limit", target->limit);
    p.finish();
  }
  loss.finish();
  if (c.loss != "mse" && c.loss != "huber") loss.fail(loss.node()["type"], "training.loss.type must be mse or huber");
}

static void read_training(Section& top, Config& c) {
  Section training = top.section("training");
  c.epochs = training.get<int64_t>("epochs", c.epochs);
  c.max_minutes = training.get<double>("max_minutes", c.max_minutes);
  c.seed = training.get<uint64_t>("seed", c.seed);
  c.grad_clip = training.get<double>("grad_clip", c.grad_clip);
  c.ema_decay = training.get<double>("ema_decay", c.ema_decay);
  c.early_stopping_patience = training.get<int64_t>("early_stopping_patience", c.early_stopping_patience);
  c.device = training.get<std::string>("device", c.device);
  c.data_on_device = training.get<std::string>("data_on_device", c.data_on_device);
  c.grouped = training.get<bool>("grouped", c.grouped);
  c.cuda_graph = training.get<std::string>("cuda_graph", c.cuda_graph);
  c.tf32 = training.get<bool>("tf32", c.tf32);
  c.deterministic = training.get<bool>("deterministic", c.deterministic);
  c.accumulate_dtype = training.get<std::string>("accumulate_dtype", c.accumulate_dtype);
  c.init_from = training.get<std::string>("init_from", c.init_from);
  c.freeze = training.get<std::string>("freeze", c.freeze);
  c.refit_energy_shift = training.get<bool>("refit_energy_shift", c.refit_energy_shift);
  c.refit_frames = training.get<int64_t>("refit_frames", c.refit_frames);
  if (c.refit_frames < 0) training.fail(training.node()["refit_frames"], "training.refit_frames must be >= 0");
  if (!c.init_from.empty() && !std::filesystem::exists(c.init_from)) {
    training.fail(training.node()["init_from"], "training.init_from: '" + c.init_from + "' does not exist");
  }
  if (c.freeze != "none" && c.freeze != "descriptor") {
    training.fail(training.node()["freeze"], "training.freeze must be none or descriptor, not '" + c.freeze + "'");
  }
  if (c.freeze != "none" && c.init_from.empty()) {
    training.fail(training.node()["freeze"], "training.freeze needs training.init_from (a trained model to keep part of)");
  }
  const bool gpu_index = c.device.rfind("cuda:", 0) == 0 && c.device.size() > 5 &&
                         c.device.find_first_not_of("0123456789", 5) == std::string::npos;
  if (c.device != "auto" && c.device != "cpu" && c.device != "cuda" && !gpu_index) {
    training.fail(training.node()["device"], "training.device must be auto, cpu, cuda or cuda:N, not '" + c.device + "'");
  }
  if (c.data_on_device != "auto" && c.data_on_device != "true" && c.data_on_device != "false") {
    training.fail(training.node()["data_on_device"], "training.data_on_device must be auto, true or false");
  }
  if (c.cuda_graph != "false" && c.cuda_graph != "true" && c.cuda_graph != "eager") {
    training.fail(training.node()["cuda_graph"], "training.cuda_graph must be false, true or eager, not '" + c.cuda_graph + "'");
  }
  if (c.accumulate_dtype != "float64" && c.accumulate_dtype != "float32") {
    training.fail(training.node()["accumulate_dtype"], "training.accumulate_dtype must be float64 or float32");
  }
  read_optimization(training, c);
  training.finish();
  if (c.epochs < 1) training.fail(training.node(), "training.epochs must be >= 1");

}

static void read_communication_and_output(Section& top, Config& c) {
  Section comm = top.section("communication");
  c.comm_backend = comm.get<std::string>("backend", c.comm_backend);
  c.bucket_mb = comm.get<double>("bucket_mb", c.bucket_mb);
  c.comm_timeout = comm.get<double>("timeout", c.comm_timeout);
  comm.finish();
  if (c.comm_backend != "auto" && c.comm_backend != "mpi" && c.comm_backend != "nccl") {
    comm.fail(comm.node()["backend"], "communication.backend must be auto, mpi or nccl, not '" + c.comm_backend + "'");
  }
  if (!(c.bucket_mb > 0)) comm.fail(comm.node()["bucket_mb"], "communication.bucket_mb must be > 0");
  if (!(c.comm_timeout >= 0 && c.comm_timeout < 1e9))
    comm.fail(comm.node()["timeout"], "communication.timeout must be >= 0 seconds and < 1e9 (0: no limit)");

  Section output = top.section("output");
  c.output_dir = output.get<std::string>("dir", c.output_dir);
  c.keep_checkpoints = output.get<int64_t>("keep_checkpoints", c.keep_checkpoints);
  c.log_every = output.get<int64_t>("log_every", c.log_every);
  c.checkpoint_every_steps = output.get<int64_t>("checkpoint_every_steps", c.checkpoint_every_steps);
  if (c.checkpoint_every_steps < 0)
    output.fail(output.node()["checkpoint_every_steps"], "output.checkpoint_every_steps must be >= 0 (0: at epoch ends only)");
  if (c.keep_checkpoints < 1) output.fail(output.node()["keep_checkpoints"], "output.keep_checkpoints must be >= 1");
  if (c.log_every < 0) output.fail(output.node()["log_every"], "output.log_every must be >= 0");
  output.finish();
}

static Config read_config_checked(const std::string& path, const std::vector<std::string>& overrides) {
  override_nodes().clear();
  const YAML::Node root = load(path, overrides);
  Config c;
  c.file = path;
  Section top(root, "", path);
  read_model(top, root, path, c);
  read_data(top, root, path, c);
  read_training(top, c);
  read_communication_and_output(top, c);
  top.finish();
  return c;
}

Config read_config(const std::string& path, const std::vector<std::string>& overrides) {
  // yaml-cpp's own exceptions (a conversion no check above foresaw) still name the file and place.
  try {
    return read_config_checked(path, overrides);
  } catch (const YAML::Exception& e) {
    throw Error(path + ":" + std::to_string(e.mark.line + 1) + ":" + std::to_string(e.mark.column + 1) + ": " +
                e.msg);
  }
}

std::string config_text(const std::string& path, const std::vector<std::string>& overrides) {
  YAML::Emitter out;
  out << load(path, overrides);
  return out.c_str();
}

}  // namespace mlip::trainer
