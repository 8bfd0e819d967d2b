// Starting the real server binaries from a test: fork/exec with the log in
// a file, the bound port read from the log, SIGKILL / SIGTERM on demand.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace pdserve::testing {

class ChildProcess {
 public:
  ChildProcess() = default;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess() { Stop(SIGKILL); }

  // Starts argv[0] with `argv`, stdout+stderr to `log_path`. Every child
  // runs one intra-op thread with a passive OpenMP wait policy: several
  // LibTorch processes share 2 cores here, and spinning OpenMP threads of
  // one process starve the others.
  //
  // The log is truncated here, before the fork: a restarted process writes
  // to its predecessor's log path, and WaitForPort must never read the
  // predecessor's ports from it (the child's own open could come too late).
  void Start(const std::vector<std::string>& argv, const std::string& log_path) {
    log_path_ = log_path;
    const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    pid_ = fork();
    if (pid_ == 0) {
      if (log_fd >= 0) {
        dup2(log_fd, 1);
        dup2(log_fd, 2);
      }
      setenv("OMP_WAIT_POLICY", "PASSIVE", 1);
      setenv("OMP_NUM_THREADS", "1", 1);
      std::vector<char*> args;
      for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
      args.push_back(nullptr);
      execv(args[0], args.data());
      std::perror("execv");
      _exit(127);
    }
    if (log_fd >= 0) close(log_fd);
  }

  // Waits until the log has "serving on port N" (every pdserve server
  // prints it); returns N, or 0 after `timeout` or when the process died.
  int WaitForPort(std::chrono::seconds timeout = std::chrono::seconds(60),
                  const std::string& pattern = "serving on port ([0-9]+)") {
    const std::regex re(pattern);
    const auto end = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < end) {
      std::smatch m;
      const std::string log = Log();
      if (std::regex_search(log, m, re)) return std::stoi(m[1]);
      if (!Alive()) return 0;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return 0;
  }

  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

  bool Alive() {
    if (pid_ <= 0) return false;
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return false;
    }
    return true;
  }

  // Sends `sig` and reaps the process. Returns its exit status (-1 when it
  // was not running).
  int Stop(int sig) {
    if (pid_ <= 0) return -1;
    kill(pid_, sig);
    int status = 0;
    waitpid(pid_, &status, 0);
    pid_ = -1;
    return status;
  }

  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  std::string log_path_;
};

}  // namespace pdserve::testing
