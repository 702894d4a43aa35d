/*
 * sandbox-init: PID 1 of a sandbox started by the OCI backend.
 *
 * Runs argv as its child, reaps every process that ends up as its child (zombies), and when
 * the child ends writes one line to fd 3 (a pipe the server holds):
 *     "exit CODE MAXRSS_KB UTIME_US STIME_US\n"  or  "signal N MAXRSS_KB UTIME_US STIME_US\n"
 * waits until the server closes its end (so the cgroup is still there to be read), then
 * exits, which makes the kernel kill whatever else is left in the PID namespace.
 *
 * The status travels outside the program's stdout/stderr, so no output can forge it, and
 * init is not dumpable, so the program (same uid) cannot reach fd 3 through /proc/1/fd.
 * A PID 1 ignores signals it has no handler for, which is why the program is never PID 1:
 * its own SIGSEGV, SIGABRT or kill(getpid(), ...) must behave as anywhere else.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#define STATUS_FD 3

int main(int argc, char **argv) {
    int first = 1;
    if (argc > 1 && strcmp(argv[1], "--") == 0) first = 2;
    if (first >= argc) {
        fprintf(stderr, "usage: sandbox-init [--] program [args...]\n");
        return 127;
    }
    int have_status_fd = fcntl(STATUS_FD, F_GETFD) != -1;
    if (have_status_fd) fcntl(STATUS_FD, F_SETFD, FD_CLOEXEC);
    prctl(PR_SET_DUMPABLE, 0);

    pid_t child = fork();
    if (child < 0) {
        perror("sandbox-init: fork");
        return 127;
    }
    if (child == 0) {
        execvp(argv[first], &argv[first]);
        fprintf(stderr, "sandbox-init: cannot run %s: %s\n", argv[first], strerror(errno));
        _exit(127);
    }
    for (;;) {
        int status;
        struct rusage usage;
        pid_t pid = wait4(-1, &status, 0, &usage);
        if (pid < 0) {
            if (errno == EINTR) continue;
            return 127;
        }
        if (pid != child) continue; /* a reaped orphan */
        if (have_status_fd) {
            char line[160];
            long utime = usage.ru_utime.tv_sec * 1000000L + usage.ru_utime.tv_usec;
            long stime = usage.ru_stime.tv_sec * 1000000L + usage.ru_stime.tv_usec;
            int n;
            if (WIFSIGNALED(status))
                n = snprintf(line, sizeof line, "signal %d %ld %ld %ld\n", WTERMSIG(status),
                             usage.ru_maxrss, utime, stime);
            else
                n = snprintf(line, sizeof line, "exit %d %ld %ld %ld\n", WEXITSTATUS(status),
                             usage.ru_maxrss, utime, stime);
            if (write(STATUS_FD, line, n) == n) {
                /* Hold the container (and its cgroup) until the server has read its memory
                 * facts and closes its end. */
                char ack;
                while (read(STATUS_FD, &ack, 1) < 0 && errno == EINTR) {}
            }
        }
        return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : WEXITSTATUS(status);
    }
}
