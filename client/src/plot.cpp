#include "plot.h"

#include <sys/wait.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>

#include "ddpd/common/job_options.h"

namespace ddpd::client {
namespace {

std::string terminal_for(const std::string& out) {
  const auto ext = std::filesystem::path(out).extension().string();
  // noenhanced: collective names hold underscores, which gnuplot would typeset as subscripts.
  if (ext == ".png") return "pngcairo noenhanced size 1000,640";
  if (ext == ".svg") return "svg noenhanced size 1000,640";
  throw OptionError("--plot", "'" + out + "' must end in .png or .svg");
}

// Runs gnuplot on `script` (data files already written beside it).
void run_gnuplot(const std::filesystem::path& dir, const std::string& script) {
  if (std::system("command -v gnuplot >/dev/null 2>&1") != 0) {
    throw std::runtime_error(
        "--plot needs gnuplot, which is not installed (Debian: apt-get install gnuplot-nox)");
  }
  const auto path = dir / "plot.gp";
  std::ofstream(path) << script;
  const std::string command =
      "gnuplot '" + path.string() + "' 2>'" + (dir / "gnuplot.err").string() + "'";
  const int rc = std::system(command.c_str());
  if (rc != 0) {
    std::ifstream err(dir / "gnuplot.err");
    std::string message((std::istreambuf_iterator<char>(err)), std::istreambuf_iterator<char>());
    throw std::runtime_error("gnuplot failed: " + message);
  }
}

std::filesystem::path scratch_dir() {
  std::string pattern = (std::filesystem::temp_directory_path() / "ddpctl-plot-XXXXXX").string();
  if (!mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
  return pattern;
}

std::string quoted(const std::string& s) { return "'" + s + "'"; }

}  // namespace

void plot_comm(const std::vector<CommBenchResult>& results, const std::string& out) {
  const std::string terminal = terminal_for(out);
  const auto dir = scratch_dir();
  std::string plots;
  int series = 0;
  for (const auto& result : results) {
    std::map<std::string, std::string> by_collective;
    for (const auto& row : result.rows) {
      by_collective[enum_name(row.collective)] +=
          std::to_string(static_cast<double>(row.size_bytes) / (1 << 20)) + " " +
          std::to_string(row.busbw_bytes_per_s / 1e9) + "\n";
    }
    for (const auto& [collective, data] : by_collective) {
      const auto file = dir / ("series" + std::to_string(series++) + ".dat");
      std::ofstream(file) << data;
      plots += std::string(plots.empty() ? "" : ", ") + quoted(file.string()) +
               " using 1:2 with linespoints title " +
               quoted(collective + ", " + std::to_string(result.world_size) + " ranks");
    }
  }
  if (plots.empty()) throw std::runtime_error("--plot: the job has no comm rows to draw");
  run_gnuplot(dir, "set terminal " + terminal + "\nset output " + quoted(out) +
                       "\nset title 'Collective bus bandwidth'\nset logscale x 2\n"
                       "set format x '%g'\nset xlabel 'size (MB)'\nset ylabel 'busbw (GB/s)'\n"
                       "set grid\n"
                       "set key left top\nplot " +
                       plots + "\n");
  std::filesystem::remove_all(dir);
}

void plot_ddp(const TrainingResult& result, const std::string& job_id, const std::string& out) {
  const std::string terminal = terminal_for(out);
  if (result.steps.empty()) {
    throw std::runtime_error("--plot: the job has no steps to draw");
  }
  const auto dir = scratch_dir();
  const auto file = dir / "steps.dat";
  {
    std::ofstream data(file);
    for (const auto& s : result.steps) {
      data << s.step << " " << s.step_seconds * 1e3 << " " << s.exposed_comm_seconds * 1e3 << " "
           << s.comm_fraction << "\n";
    }
  }
  const std::string f = quoted(file.string());
  run_gnuplot(dir, "set terminal " + terminal + "\nset output " + quoted(out) +
                       "\nset multiplot layout 2,1 title " +
                       quoted("job " + job_id + " step times") +
                       "\nset grid\nset xlabel 'step'\nset ylabel 'ms'\n"
                       "plot " +
                       f + " using 1:2 with linespoints title 'step time', " + f +
                       " using 1:3 with linespoints title 'exposed communication'\n"
                       "set ylabel 'comm fraction'\nset yrange [0:1]\n"
                       "plot " +
                       f +
                       " using 1:4 with linespoints title 'comm fraction'\n"
                       "unset multiplot\n");
  std::filesystem::remove_all(dir);
}

}  // namespace ddpd::client
