// The extension module of the Python package (python/tidal): configs, the Trainer with Python
// callbacks, the subcommands, and where a checkpoint's step directory is. The package's
// __init__.py builds the Python-facing API on these. One launch per process (MPI starts at the
// first use under mpirun / srun, and finishes when the interpreter exits), as in the tidal
// command: every rank runs the same script.
#include "cli/commands.h"
#include "config/config.h"
#include "core/blas_kernels.h"
#include "core/error.h"
#include "engine/checkpoint/metadata.h"
#include "engine/launch.h"
#include "engine/trainer.h"

#include <pybind11/functional.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <memory>
#include <string>
#include <vector>

namespace py = pybind11;

namespace {

using namespace tidal;

// Made at the first use; finished by the interpreter's exit handler (finish_launch).
engine::Launch* the_launch = nullptr;

engine::Launch& launch() {
  if (the_launch == nullptr) the_launch = new engine::Launch();
  return *the_launch;
}

void finish_launch() {
  delete the_launch;
  the_launch = nullptr;
}

// A JSON value as the Python object json.loads gives.
py::object to_python(const nlohmann::json& j) { return py::module_::import("json").attr("loads")(j.dump()); }

// A Python object as a callback: its on_step_end(metrics: dict), on_evaluation(step, eval_loss),
// on_checkpoint(step, dir) and should_stop() -> bool where it has them; a plain callable is
// called at each step's end with the metrics.
class PythonCallback final : public engine::Callback {
 public:
  explicit PythonCallback(py::object obj) : obj_(std::move(obj)) {}
  ~PythonCallback() override {
    py::gil_scoped_acquire gil;
    obj_ = py::object();
  }

  void on_step_end(const engine::StepEnd& s) override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(obj_, "on_step_end")) obj_.attr("on_step_end")(to_python(s.record));
    else if (PyCallable_Check(obj_.ptr())) obj_(to_python(s.record));
  }
  void on_evaluation(const engine::EvaluationEnd& e) override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(obj_, "on_evaluation")) obj_.attr("on_evaluation")(e.step, e.eval_loss);
  }
  void on_checkpoint(const engine::CheckpointSaved& c) override {
    py::gil_scoped_acquire gil;
    if (py::hasattr(obj_, "on_checkpoint")) obj_.attr("on_checkpoint")(c.step, c.dir);
  }
  bool should_stop() override {
    py::gil_scoped_acquire gil;
    return py::hasattr(obj_, "should_stop") && obj_.attr("should_stop")().cast<bool>();
  }

 private:
  py::object obj_;
};

// A Trainer with the callbacks it was given kept alive beside it.
class PyTrainer {
 public:
  PyTrainer(const config::Config& cfg, const std::string& metrics, bool quiet)
      : trainer_(cfg, launch().context(cfg), {.metrics_path = metrics, .quiet = quiet}) {}

  void add_callback(py::object obj) {
    callbacks_.push_back(std::make_unique<PythonCallback>(std::move(obj)));
    trainer_.add_callback(*callbacks_.back());
  }
  py::object fit() {
    engine::TrainSummary s;
    {
      py::gil_scoped_release release;  // callbacks take it back
      s = trainer_.fit();
    }
    return to_python(s.record);
  }
  double evaluate() {
    py::gil_scoped_release release;
    return trainer_.evaluate();
  }
  void save(const std::string& dir) {
    py::gil_scoped_release release;
    trainer_.save(dir);
  }
  void load(const std::string& dir) { trainer_.load(dir); }
  std::int64_t step() const { return trainer_.step(); }

 private:
  std::vector<std::unique_ptr<PythonCallback>> callbacks_;
  engine::Trainer trainer_;
};

int run_cli(const std::vector<std::string>& args) {
  std::vector<std::string> owned = args;
  std::vector<char*> argv;
  for (std::string& a : owned) argv.push_back(a.data());
  argv.push_back(nullptr);
  py::gil_scoped_release release;
  return cli::run(int(owned.size()), argv.data(), launch());
}

}  // namespace

PYBIND11_MODULE(_tidal, m) {
  m.doc() = "tidal's engine (use the tidal package)";
  py::register_exception<Error>(m, "TidalError", PyExc_RuntimeError);

  py::class_<config::Config>(m, "_Config")
      .def("to_toml", [](const config::Config& c) { return config::to_toml(c); });
  m.def("load_config", &config::load_config, py::arg("path"), py::arg("overrides"),
        "A config from a TOML file (\"\" = defaults) and key=value overrides, validated.");
  m.def("load_config_text", &config::load_config_text, py::arg("toml"), py::arg("where"));

  py::class_<PyTrainer>(m, "_Trainer")
      .def(py::init<const config::Config&, const std::string&, bool>(), py::arg("config"), py::arg("metrics") = "",
           py::arg("quiet") = false)
      .def("add_callback", &PyTrainer::add_callback)
      .def("fit", &PyTrainer::fit)
      .def("evaluate", &PyTrainer::evaluate)
      .def("save", &PyTrainer::save)
      .def("load", &PyTrainer::load)
      .def_property_readonly("step", &PyTrainer::step);

  m.def("cli", &run_cli, py::arg("argv"), "Runs a tidal subcommand (argv[0] the program name); returns its exit code.");
  m.def("checkpoint_step_dir", &engine::checkpoint_step_dir, py::arg("path"));
  m.def("rank", [] { return launch().rank(); });
  m.def("world_size", [] { return launch().world_size(); });
  m.def("better_blas_kernels", [] {
    const char* k = better_blas_kernels();
    return k ? std::string(k) : std::string();
  });
  m.def("blas_kernel_name", [] { return std::string(blas_kernel_name()); });
  // MPI finishes before the interpreter does, after what the script printed has gone out (a
  // launcher stops forwarding a rank's output when MPI ends).
  py::module_::import("atexit").attr("register")(py::cpp_function([] {
    py::module_ sys = py::module_::import("sys");
    for (const char* stream : {"stdout", "stderr"}) sys.attr(stream).attr("flush")();
    finish_launch();
  }));
}
