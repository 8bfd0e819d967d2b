// CPU time of a new thread's first parallel LibTorch op (docs/benchmarks.md
// §10): mode 1 sets 2 intra-op threads first (as the engine does), mode 0
// keeps LibTorch's default. Built against Debian's LibTorch 1.13:
//   g++ -O1 new_thread_cpu.cc -o new_thread_cpu -I/usr/include/torch/csrc/api/include \
//       -ltorch_cpu -lc10 -fopenmp && ./new_thread_cpu 1
// With a definition `extern "C" void* pthreadpool_create(size_t) { return nullptr; }`
// linked in (as common/engine/engine.cc has), mode 1 drops to ~1 ms a thread.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <sys/resource.h>
#include <chrono>
#include <thread>
#include <cstdio>
#include <cstdlib>
static double cpu(){ rusage u; getrusage(RUSAGE_SELF,&u); return u.ru_utime.tv_sec+u.ru_utime.tv_usec*1e-6+u.ru_stime.tv_sec+u.ru_stime.tv_usec*1e-6; }
int main(int argc,char**argv){
  int mode=atoi(argv[1]);
  if(mode==1) at::set_num_threads(2);
  at::Tensor a=at::ones({1<<20}), b=at::empty({1<<20});
  b.copy_(a);
  double c0=cpu(); auto t0=std::chrono::steady_clock::now();
  for(int i=0;i<20;i++){ std::thread t([&]{ b.copy_(a); }); t.join(); std::this_thread::sleep_for(std::chrono::milliseconds(50)); }
  double wall=std::chrono::duration<double>(std::chrono::steady_clock::now()-t0).count();
  printf("mode %d: 20 new threads each one copy: cpu %.3f s over %.2f s wall (%.1f ms cpu per thread), intra-op threads %d\n", mode, cpu()-c0, wall, (cpu()-c0)/20*1e3, at::get_num_threads());
}
