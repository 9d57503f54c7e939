// A crash reporter for test runs on machines without gdb (the lent machines):
//
//   gcc -O1 -shared -fPIC -o /tmp/segv_report.so benchmarks/segv_report.c
//   LD_PRELOAD=/tmp/segv_report.so python -m pytest ...
//
// On SIGSEGV / SIGBUS / SIGILL / SIGFPE / SIGABRT it prints the faulting address and
// a native backtrace, each frame as module + offset (for `addr2line -f -C -i -e
// MODULE OFFSET` on a -g build) and the nearest exported symbol, then lets the signal
// take its course (Python's faulthandler, which pytest enables, prints the Python
// stack first). It writes to the stderr the process started with, since pytest points
// fd 2 at its capture file during a test.
#define _GNU_SOURCE
#include <dlfcn.h>
#include <execinfo.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <ucontext.h>
#include <unistd.h>
#include <sys/syscall.h>
static struct sigaction prev[32];
static int errfd = 2;
static void put(const char* s) { if (write(errfd, s, strlen(s)) < 0) {} }
static void handler(int sig, siginfo_t* si, void* uc_) {
  ucontext_t* uc = (ucontext_t*)uc_;
  char line[512];
  void* rip = uc ? (void*)uc->uc_mcontext.gregs[REG_RIP] : 0;
  snprintf(line, sizeof line, "\n=== SEGV-REPORT sig %d code %d addr %p rip %p tid %ld pid %d\n",
           sig, si->si_code, si->si_addr, rip, (long)syscall(SYS_gettid), getpid());
  put(line);
  if (uc) {
    snprintf(line, sizeof line, "rsp %llx rbp %llx rdi %llx rsi %llx rax %llx rcx %llx rdx %llx\n",
             uc->uc_mcontext.gregs[REG_RSP], uc->uc_mcontext.gregs[REG_RBP],
             uc->uc_mcontext.gregs[REG_RDI], uc->uc_mcontext.gregs[REG_RSI],
             uc->uc_mcontext.gregs[REG_RAX], uc->uc_mcontext.gregs[REG_RCX],
             uc->uc_mcontext.gregs[REG_RDX]);
    put(line);
  }
  void* fr[64];
  int n = backtrace(fr, 64);
  if (rip) { fr[0] = rip; }
  for (int i = 0; i < n; ++i) {
    Dl_info d;
    if (dladdr(fr[i], &d) && d.dli_fname) {
      snprintf(line, sizeof line, "  #%d %s +0x%lx (%s)\n", i, d.dli_fname,
               (unsigned long)((char*)fr[i] - (char*)d.dli_fbase), d.dli_sname ? d.dli_sname : "?");
    } else {
      snprintf(line, sizeof line, "  #%d %p\n", i, fr[i]);
    }
    put(line);
  }
  put("=== END\n");
  sigaction(sig, &prev[sig], 0);
  raise(sig);
}
__attribute__((constructor)) static void init(void) {
  errfd = dup(2);  // pytest redirects fd 2 into its capture file during tests
  void* fr[2]; backtrace(fr, 2);  // load libgcc_s now, not in the handler
  int sigs[] = {SIGSEGV, SIGBUS, SIGILL, SIGFPE, SIGABRT};
  for (unsigned i = 0; i < sizeof sigs / sizeof *sigs; ++i) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_sigaction = handler;
    sa.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigaction(sigs[i], &sa, &prev[sigs[i]]);
  }
}
