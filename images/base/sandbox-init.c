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
 *
 * --deadline-ms N is a backstop for the server's own deadline: should the server die
 * mid-step, init exits N ms after it started, and with it everything in the sandbox.
 *
 * --reap-only (no program): PID 1 of a warm template's child (images/python/python-template.py),
 * whose program is the template's fork, not ours: drops to uid 65534, then only reaps what ends
 * up as its child, until killed (which ends the PID namespace).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <grp.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#define STATUS_FD 3

static void deadline_passed(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)context;
    /* Only the timer counts: the program may send SIGALRM to PID 1 too, and must not be
     * able to end its sandbox without a status that way. */
    if (info->si_code != SI_KERNEL) return;
    _exit(128 + SIGKILL); /* PID 1 gone: the kernel kills the rest of the namespace */
}

int main(int argc, char **argv) {
    int first = 1;
    long deadline_ms = 0;
    if (argc > 2 && strcmp(argv[first], "--deadline-ms") == 0) {
        deadline_ms = strtol(argv[first + 1], NULL, 10);
        first += 2;
    }
    int reap_only = first < argc && strcmp(argv[first], "--reap-only") == 0;
    if (reap_only) first++;
    if (first < argc && strcmp(argv[first], "--") == 0) first++;
    if (first >= argc && !reap_only) {
        fprintf(stderr, "usage: sandbox-init [--deadline-ms N] [--reap-only | [--] program [args...]]\n");
        return 127;
    }
    if (deadline_ms > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = deadline_passed;
        sa.sa_flags = SA_SIGINFO;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval timer = {{0, 0}, {deadline_ms / 1000, (deadline_ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &timer, NULL);
    }
    if (reap_only) {
        /* Spawned by a root template: the sandbox's user, as the rest of the sandbox. */
        if (geteuid() == 0 && (setgroups(0, NULL) || setresgid(65534, 65534, 65534)
                               || setresuid(65534, 65534, 65534))) {
            perror("sandbox-init: dropping to uid 65534");
            return 127;
        }
        prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0);
        sigset_t children;
        sigemptyset(&children);
        sigaddset(&children, SIGCHLD);
        sigprocmask(SIG_BLOCK, &children, NULL); /* queued for sigwaitinfo, not dropped */
        prctl(PR_SET_DUMPABLE, 0);
        for (;;) {
            while (waitpid(-1, NULL, WNOHANG) > 0) {}
            sigwaitinfo(&children, NULL);
        }
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
        int found = errno != ENOENT && errno != ENOTDIR;
        fprintf(stderr, "sandbox-init: cannot run %s: %s\n", argv[first], strerror(errno));
        _exit(found ? 126 : 127); /* a shell's codes: found but not runnable, or not found */
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
