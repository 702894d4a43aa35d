/*
 * sandbox-runner: runs one compiled program against many test cases inside one sandbox.
 *
 * The server drives it over a byte channel (the OCI backend: fd 3, a socket outside the
 * program's reach; the Docker backend: stdin/stdout of a `docker exec`). For each test the
 * server sends
 *
 *     RUN <timeout_ms> <output_limit> <argc> <nfiles> <stdin_len> <zygote_argc> [<piped>]\n
 *     (piped = 1: one byte carrying two file descriptors, SCM_RIGHTS: the test's stdin, stdout)
 *     argc x  <len>\n<arg bytes>
 *     zygote_argc x <len>\n<arg bytes>
 *     nfiles x <len>\n<name> <len>\n<content>      (written to /tmp/judge/<name>)
 *     <stdin bytes>
 *
 * and the runner answers, once the test's process and everything it started are gone,
 *
 *     DONE <exit|signal> <n> <timed_out 0|1> <wall_us> <cpu_us> <maxrss_kb> <out_len> <err_len>\n
 *     <stdout bytes><stderr bytes>
 *
 * A piped test (an interactive problem: the program and its interactor, each in its own
 * sandbox, talk through two pipes the server made) reads and writes those pipes instead: it
 * gets no stdin bytes and its stdout is not reported (out_len 0). The runner keeps no copy of
 * either end once the test has them, so the peer sees end-of-file when the test exits.
 *
 * `END\n` (or the channel closing) ends the runner. Each test is its own process with its own
 * deadline; stdin, stdout and stderr are anonymous in-memory files (no name another test or
 * process could open), output is capped with RLIMIT_FSIZE (a write past the cap gets SIGXFSZ),
 * and between tests every other process in the sandbox is killed, /tmp and /dev/shm are
 * emptied and System V IPC objects and POSIX message queues removed, so nothing one test
 * leaves behind reaches the next. The runner never sees expected outputs: verdicts are decided by the server from what
 * is reported here.
 *
 * The runner is not dumpable (the program, same uid, cannot reach its fds or memory through
 * /proc). As PID 1 (OCI backend) it cannot be killed from inside; under `docker exec` it is
 * a child subreaper and spares only the processes that existed before it started.
 *
 * With a zygote command (zygote_argc > 0; runtimes/python.toml), the test is not exec'd:
 * a warmed interpreter started once (and again if a test kills it) gets the test's argv
 * after argv[0] and its three files over a socket (SCM_RIGHTS), forks, runs it, and reports
 * "<exit|signal> <n> <cpu_us> <maxrss_kb>". It is not dumpable and outlives the tests; the
 * runner still keeps the deadline, the output files and the clean-up between tests.
 *
 * --deadline-ms N: a backstop should the server die; the runner exits after N ms.
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/msg.h>
#include <sys/prctl.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_ARGS 64
#define MAX_ARG_BYTES (64 * 1024)
#define MAX_FILES 8
#define MAX_NAME 64
#define MAX_PREEXISTING 256

static int chan_in = 0, chan_out = 1;
static pid_t preexisting[MAX_PREEXISTING];
static int n_preexisting;
static pid_t zygote_pid;      /* 0: no zygote running */
static int zygote_sock = -1;

static void deadline_passed(int sig, siginfo_t *info, void *context) {
    (void)sig;
    (void)context;
    if (info->si_code != SI_KERNEL) return; /* only our own timer, not a SIGALRM from the program */
    _exit(128 + SIGKILL);
}

static void on_child(int sig) { (void)sig; }

static int read_full(int fd, void *buf, size_t n) {
    char *p = buf;
    while (n > 0) {
        ssize_t got = read(fd, p, n);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) return -1;
        p += got;
        n -= (size_t)got;
    }
    return 0;
}

static int write_full(int fd, const void *buf, size_t n) {
    const char *p = buf;
    while (n > 0) {
        ssize_t put = write(fd, p, n);
        if (put < 0 && errno == EINTR) continue;
        if (put <= 0) return -1;
        p += put;
        n -= (size_t)put;
    }
    return 0;
}

/* One '\n'-terminated line (without it) into buf; -1 on end of channel or overlong line. */
static int read_line(char *buf, size_t cap) {
    size_t used = 0;
    for (;;) {
        char c;
        if (read_full(chan_in, &c, 1) < 0) return -1;
        if (c == '\n') break;
        if (used + 1 >= cap) return -1;
        buf[used++] = c;
    }
    buf[used] = '\0';
    return 0;
}

static int read_length(unsigned long max, unsigned long *out) {
    char line[32];
    char *end;
    if (read_line(line, sizeof line) < 0) return -1;
    *out = strtoul(line, &end, 10);
    return (*end != '\0' || end == line || *out > max) ? -1 : 0;
}

/* The byte that carries a piped test's stdin and stdout (exactly two descriptors). */
static int receive_pipes(int *in, int *out) {
    char byte;
    int fds[2];
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {&byte, 1};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t got;
    do {
        got = recvmsg(chan_in, &msg, MSG_CMSG_CLOEXEC);
    } while (got < 0 && errno == EINTR);
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    if (got != 1 || (msg.msg_flags & MSG_CTRUNC) || !cmsg || cmsg->cmsg_level != SOL_SOCKET ||
        cmsg->cmsg_type != SCM_RIGHTS || cmsg->cmsg_len != CMSG_LEN(sizeof fds))
        return -1;
    memcpy(fds, CMSG_DATA(cmsg), sizeof fds);
    *in = fds[0];
    *out = fds[1];
    return 0;
}

static int anonymous_file(const char *name) {
    int fd = (int)syscall(SYS_memfd_create, name, MFD_CLOEXEC);
    if (fd < 0) fd = open("/tmp", O_TMPFILE | O_RDWR | O_CLOEXEC, 0600); /* kernels without memfd */
    return fd;
}

/* Copy n bytes from the channel into fd (the test's stdin or a file). */
static int channel_to_fd(int fd, unsigned long n) {
    char buf[65536];
    while (n > 0) {
        size_t chunk = n < sizeof buf ? n : sizeof buf;
        if (read_full(chan_in, buf, chunk) < 0) return -1;
        if (fd >= 0 && write_full(fd, buf, chunk) < 0) fd = -1; /* keep draining the channel */
        n -= chunk;
    }
    return fd >= 0 ? 0 : -2;
}

static int fd_to_channel(int fd, off_t n) {
    char buf[65536];
    off_t offset = 0;
    while (offset < n) {
        size_t want = (size_t)(n - offset) < sizeof buf ? (size_t)(n - offset) : sizeof buf;
        ssize_t got = pread(fd, buf, want, offset);
        if (got < 0 && errno == EINTR) continue;
        if (got <= 0) { /* cannot happen for our own file; keep the framing intact */
            memset(buf, 0, want);
            got = (ssize_t)want;
        }
        if (write_full(chan_out, buf, (size_t)got) < 0) return -1;
        offset += got;
    }
    return 0;
}

static int is_preexisting(pid_t pid) {
    for (int i = 0; i < n_preexisting; i++)
        if (preexisting[i] == pid) return 1;
    return 0;
}

static void remember_preexisting(void) {
    DIR *proc = opendir("/proc");
    struct dirent *entry;
    if (!proc) return;
    while ((entry = readdir(proc)) && n_preexisting < MAX_PREEXISTING) {
        pid_t pid = (pid_t)strtol(entry->d_name, NULL, 10);
        if (pid > 0) preexisting[n_preexisting++] = pid;
    }
    closedir(proc);
}

static long elapsed_us(const struct timespec *since) {
    struct timespec now;
    clock_gettime(CLOCK_MONOTONIC, &now);
    return (now.tv_sec - since->tv_sec) * 1000000L + (now.tv_nsec - since->tv_nsec) / 1000;
}

/* A state of 'Z' (zombie) or 'X' (dead): killed already, waiting to be reaped. */
static int is_dead(pid_t pid) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return 1;
    buf[n] = '\0';
    char *end = strrchr(buf, ')');
    return !end || end[1] == '\0' || end[2] == 'Z' || end[2] == 'X';
}

static void forget_zygote(void) {
    if (zygote_sock >= 0) close(zygote_sock);
    zygote_sock = -1;
    zygote_pid = 0;
}

static void reap_all(void) {
    pid_t pid;
    while ((pid = waitpid(-1, NULL, WNOHANG)) > 0)
        if (pid == zygote_pid) forget_zygote();
}

/* Kill every process a test may have left (daemons, setsid'd children, fork bombs), all but
 * the zygote. */
static void kill_all(void) {
    if (getpid() == 1 && zygote_pid == 0) {
        /* kill(-1) from PID 1 reaches everything else in the namespace; no fork can race it
         * (it holds the task list lock). Then reap until no child is left. */
        kill(-1, SIGKILL);
        while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {}
        return;
    }
    /* As PID 1 with a zygote to spare, a few rounds only: a fork bomb under the zygote forks
     * as fast as a scan kills, and each scan waits for a CPU behind it in the sandbox's
     * cgroup (past the test runner's report deadline, measured). */
    int rounds = getpid() == 1 ? 20 : 200;
    for (int round = 0; round < rounds; round++) {
        int found = 0;
        DIR *proc = opendir("/proc");
        struct dirent *entry;
        if (!proc) return;
        while ((entry = readdir(proc))) {
            pid_t pid = (pid_t)strtol(entry->d_name, NULL, 10);
            if (pid <= 0 || pid == getpid() || pid == zygote_pid || is_preexisting(pid)) continue;
            if (is_dead(pid)) continue;
            if (kill(pid, SIGKILL) == 0) found = 1;
        }
        closedir(proc);
        reap_all();
        if (!found) return;
        usleep(1000);
    }
    if (getpid() == 1) {
        /* Still forking: kill(-1) ends everything at once, the zygote too (the next test
         * starts a fresh one). */
        kill(-1, SIGKILL);
        while (waitpid(-1, NULL, 0) > 0 || errno == EINTR) {}
        forget_zygote();
    }
}

static int start_zygote(char **zargv) {
    int pair[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pair[0]);
        close(pair[1]);
        return -1;
    }
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        int devnull = open("/dev/null", O_RDWR | O_CLOEXEC); /* its copies at 0 and 1 stay */
        dup2(devnull, 0);
        dup2(devnull, 1);
        dup2(pair[1], 3); /* its control socket; stderr stays ours (diagnostics) */
        execvp(zargv[0], zargv);
        dprintf(2, "sandbox-runner: cannot start the zygote %s: %s\n", zargv[0], strerror(errno));
        _exit(127);
    }
    close(pair[1]);
    zygote_pid = pid;
    zygote_sock = pair[0];
    return 0;
}

/* Hand the test to the zygote: its argv (without the interpreter) and its three files. */
static int send_to_zygote(char **args, unsigned long output_limit, int in, int out, int err) {
    char payload[MAX_ARGS * 256 + 32];
    size_t used = (size_t)snprintf(payload, sizeof payload, "%lu", output_limit) + 1;
    for (int i = 1; args[i]; i++) {
        size_t len = strlen(args[i]) + 1;
        if (used + len > sizeof payload) return -1;
        memcpy(payload + used, args[i], len);
        used += len;
    }
    int fds[3] = {in, out, err};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {payload, used};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    return sendmsg(zygote_sock, &msg, MSG_NOSIGNAL) == (ssize_t)used ? 0 : -1;
}

/* The zygote's report, waiting at most wait_ms: 0 read, -1 none by then (the deadline), -2
 * none ever (the zygote is gone: its socket reads end-of-file as soon as it dies, before we
 * can reap it, so a dead zygote must not pass for one still running the test). */
static int zygote_report(long wait_ms, char *line, size_t cap) {
    size_t used = 0;
    struct timespec since;
    clock_gettime(CLOCK_MONOTONIC, &since);
    for (;;) {
        long left = wait_ms - elapsed_us(&since) / 1000;
        if (left <= 0) return -1;
        struct pollfd pfd = {zygote_sock, POLLIN, 0};
        int ready = poll(&pfd, 1, (int)left);
        reap_all(); /* orphans of the test come back to us */
        if (zygote_sock < 0) return -2;
        if (ready <= 0) continue;
        ssize_t got = read(zygote_sock, line + used, cap - 1 - used);
        if (got <= 0) return -2;
        used += (size_t)got;
        line[used] = '\0';
        if (memchr(line, '\n', used)) return 0;
        if (used >= cap - 1) return -2;
    }
}

#define EMPTY_DEPTH 32 /* folders open at once while emptying; deeper ones move up first */

/* Remove everything in the folder open at dir_fd, whatever a test did to it: a folder it made
 * unreadable is opened up before it is entered (at any depth), and a tree deeper than
 * EMPTY_DEPTH has its deep part moved up to `top` (a later pass removes it), so neither
 * descriptors nor PATH_MAX run out. */
static void empty_at(int dir_fd, int top, int depth, unsigned long *moved) {
    DIR *dir = fdopendir(dir_fd);
    if (!dir) {
        close(dir_fd);
        return;
    }
    struct dirent *entry;
    while ((entry = readdir(dir))) {
        const char *name = entry->d_name;
        if (!strcmp(name, ".") || !strcmp(name, "..")) continue;
        if (unlinkat(dirfd(dir), name, 0) == 0) continue;
        if (errno != EISDIR) continue;
        if (depth >= EMPTY_DEPTH) {
            char up[32];
            snprintf(up, sizeof up, ".runner-deep-%lu", (*moved)++);
            renameat(dirfd(dir), name, top, up);
            continue;
        }
        fchmodat(dirfd(dir), name, S_IRWXU, 0);
        int child = openat(dirfd(dir), name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (child >= 0) empty_at(child, top, depth + 1, moved);
        unlinkat(dirfd(dir), name, AT_REMOVEDIR);
    }
    closedir(dir);
}

/* Empty a scratch folder (kept itself: a mount point), even of folders the last test made
 * unreadable or nested past PATH_MAX. */
static void empty_folder(const char *path) {
    unsigned long moved = 0;
    for (int pass = 0; pass < 100000; pass++) {
        int top = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (top < 0) return;
        int again = dup(top);
        if (again < 0) {
            close(top);
            return;
        }
        unsigned long before = moved;
        empty_at(again, top, 0, &moved);
        close(top);
        if (moved == before) return; /* nothing moved up: a pass more would change nothing */
    }
}

#ifndef SHM_STAT_ANY /* Linux 4.17: the entry whatever its permissions (a test may chmod it 000) */
#define SHM_STAT_ANY 15
#endif
#ifndef SEM_STAT_ANY
#define SEM_STAT_ANY 20
#endif
#ifndef MSG_STAT_ANY
#define MSG_STAT_ANY 13
#endif

/* System V shared memory, semaphores and message queues outlive the processes that made them,
 * in the sandbox's IPC namespace that every test of it shares: a segment or a queue holds
 * memory charged to the sandbox (a test leaving 180 MB in one made a later test of a 256 MB
 * cap run out of memory), and any of them carries data to the next test. Remove them all: we
 * made none, and our uid created theirs (IPC_RMID is the creator's or the owner's to do). */
static void remove_ipc(void) {
    struct shmid_ds shm;
    struct semid_ds sem;
    struct msqid_ds msg;
    int top = shmctl(0, SHM_INFO, &shm);
    for (int i = 0; i <= top; i++) {
        int id = shmctl(i, SHM_STAT_ANY, &shm);
        if (id < 0) id = shmctl(i, SHM_STAT, &shm);
        if (id >= 0) shmctl(id, IPC_RMID, NULL);
    }
    top = semctl(0, 0, SEM_INFO, &sem);
    for (int i = 0; i <= top; i++) {
        int id = semctl(i, 0, SEM_STAT_ANY, &sem);
        if (id < 0) id = semctl(i, 0, SEM_STAT, &sem);
        if (id >= 0) semctl(id, 0, IPC_RMID);
    }
    top = msgctl(0, MSG_INFO, &msg);
    for (int i = 0; i <= top; i++) {
        int id = msgctl(i, MSG_STAT_ANY, &msg);
        if (id < 0) id = msgctl(i, MSG_STAT, &msg);
        if (id >= 0) msgctl(id, IPC_RMID, NULL);
    }
}

static void free_args(char **args) {
    for (int i = 0; args[i]; i++) free(args[i]);
}

struct outcome {
    int signaled, number, timed_out;
    long cpu_us, maxrss_kb;
};

/* A piped test's peer must see end-of-file when the test exits: keep no copy of its pipes. */
static void hand_over(int *in, int *out) {
    close(*in);
    close(*out);
    *in = *out = -1;
}

/* fork + exec the test; wait for it until the deadline. */
static void run_exec(char **args, unsigned long timeout_ms, unsigned long output_limit, int *in,
                     int *out, int err, int piped, const struct timespec *started,
                     struct outcome *o) {
    pid_t child = fork();
    if (child == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        signal(SIGPIPE, SIG_DFL);
        dup2(*in, 0);
        dup2(*out, 1);
        dup2(err, 2);
        /* Only 0, 1 and 2 survive exec: everything else here is close-on-exec. */
        struct rlimit cap = {output_limit + 1, output_limit + 1};
        setrlimit(RLIMIT_FSIZE, &cap);
        execvp(args[0], args);
        dprintf(2, "sandbox-runner: cannot run %s: %s\n", args[0], strerror(errno));
        _exit(127);
    }
    if (piped) hand_over(in, out);
    if (child < 0) {
        o->number = 127;
        dprintf(err, "sandbox-runner: cannot start the test: %s\n", strerror(errno));
        return;
    }
    int status = 0, reaped = 0;
    struct rusage usage;
    memset(&usage, 0, sizeof usage);
    while (!reaped) {
        long left_us = (long)timeout_ms * 1000L - elapsed_us(started);
        if (left_us <= 0) {
            o->timed_out = 1;
            kill_all();
            while (wait4(child, &status, 0, &usage) < 0 && errno == EINTR) {}
            break;
        }
        sigset_t chld;
        sigemptyset(&chld);
        sigaddset(&chld, SIGCHLD);
        struct timespec wait = {left_us / 1000000L, (left_us % 1000000L) * 1000L};
        sigtimedwait(&chld, NULL, &wait);
        pid_t pid;
        int st;
        struct rusage ru;
        while ((pid = wait4(-1, &st, WNOHANG, &ru)) > 0) {
            if (pid == child) {
                status = st;
                usage = ru;
                reaped = 1;
            } else if (pid == zygote_pid) {
                forget_zygote();
            }
        }
    }
    o->signaled = WIFSIGNALED(status);
    o->number = o->signaled ? WTERMSIG(status) : WEXITSTATUS(status);
    o->cpu_us = usage.ru_utime.tv_sec * 1000000L + usage.ru_utime.tv_usec +
                usage.ru_stime.tv_sec * 1000000L + usage.ru_stime.tv_usec;
    o->maxrss_kb = usage.ru_maxrss;
}

/* The same through the zygote, started (again) when needed. */
static void run_in_zygote(char **args, char **zargs, unsigned long timeout_ms,
                          unsigned long output_limit, int *in, int *out, int err, int piped,
                          const struct timespec *started, struct outcome *o) {
    if (zygote_pid == 0 && start_zygote(zargs) < 0) {
        if (piped) hand_over(in, out);
        o->number = 127;
        dprintf(err, "sandbox-runner: cannot start the zygote: %s\n", strerror(errno));
        return;
    }
    if (send_to_zygote(args, output_limit, *in, *out, err) < 0) {
        /* It died since the last test (a test may kill it): one fresh start. Reaping it may
         * already have zeroed zygote_pid, and kill(0) would signal our own process group. */
        if (zygote_pid) kill(zygote_pid, SIGKILL);
        forget_zygote();
        kill_all();
        if (start_zygote(zargs) < 0 || send_to_zygote(args, output_limit, *in, *out, err) < 0) {
            if (piped) hand_over(in, out);
            o->number = 127;
            dprintf(err, "sandbox-runner: the zygote does not answer\n");
            return;
        }
    }
    if (piped) hand_over(in, out);
    char line[160];
    long left_ms = (long)timeout_ms - elapsed_us(started) / 1000;
    int got = zygote_report(left_ms > 0 ? left_ms : 0, line, sizeof line);
    if (got == -1 && zygote_pid != 0 && zygote_sock >= 0) {
        /* The deadline: kill the test (the zygote then reports it) or a stopped zygote. */
        o->timed_out = 1;
        kill_all();
        got = zygote_report(1000, line, sizeof line);
        if (got < 0) {
            if (zygote_pid) kill(zygote_pid, SIGKILL);
            forget_zygote();
            kill_all();
        }
    }
    char kind[16] = "";
    if (got < 0 || sscanf(line, "%15s %d %ld %ld", kind, &o->number, &o->cpu_us, &o->maxrss_kb) != 4) {
        if (!o->timed_out) { /* the test ended its own interpreter: a crash, not a verdict */
            o->signaled = 1;
            o->number = SIGKILL;
            dprintf(err, "\nsandbox-runner: the test's interpreter was killed\n");
        }
        if (zygote_pid) kill(zygote_pid, SIGKILL);
        forget_zygote();
        kill_all();
        return;
    }
    o->signaled = strcmp(kind, "signal") == 0;
}

static int read_args(unsigned long count, char **args) {
    for (unsigned long i = 0; i < count; i++) {
        unsigned long len;
        if (read_length(MAX_ARG_BYTES, &len) < 0 || !(args[i] = calloc(1, len + 1)) ||
            read_full(chan_in, args[i], len) < 0 || memchr(args[i], '\0', len))
            return -1;
    }
    return 0;
}

static int run_test(const char *header) {
    unsigned long timeout_ms, output_limit, argc, nfiles, stdin_len, zargc, piped = 0;
    int fields = sscanf(header, "RUN %lu %lu %lu %lu %lu %lu %lu", &timeout_ms, &output_limit,
                        &argc, &nfiles, &stdin_len, &zargc, &piped);
    if ((fields != 6 && fields != 7) || argc < 1 || argc > MAX_ARGS || nfiles > MAX_FILES ||
        zargc > MAX_ARGS || piped > 1 || (piped && stdin_len))
        return -1;
    int pipe_in = -1, pipe_out = -1;
    if (piped && receive_pipes(&pipe_in, &pipe_out) < 0) return -1;
    char *args[MAX_ARGS + 1] = {0}, *zargs[MAX_ARGS + 1] = {0};
    if (read_args(argc, args) < 0 || read_args(zargc, zargs) < 0) {
        free_args(args);
        free_args(zargs);
        if (piped) hand_over(&pipe_in, &pipe_out);
        return -1;
    }

    kill_all();
    remove_ipc();
    empty_folder("/tmp");
    empty_folder("/dev/shm");
    empty_folder("/dev/mqueue"); /* POSIX message queues (mounted for the runner's sandbox) */

    int files_ok = 1;
    if (nfiles > 0 && mkdir("/tmp/judge", 0700) < 0) files_ok = 0;
    for (unsigned long i = 0; i < nfiles; i++) {
        char name[MAX_NAME + 1] = {0}, path[MAX_NAME + 16];
        unsigned long name_len, size;
        if (read_length(MAX_NAME, &name_len) < 0 || read_full(chan_in, name, name_len) < 0 ||
            read_length(~0UL, &size) < 0) {
            free_args(args);
            free_args(zargs);
            if (piped) hand_over(&pipe_in, &pipe_out);
            return -1;
        }
        int fd = -1;
        if (files_ok && name_len > 0 && !strchr(name, '/') && strcmp(name, ".") && strcmp(name, "..")) {
            snprintf(path, sizeof path, "/tmp/judge/%s", name);
            fd = open(path, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        }
        int copied = channel_to_fd(fd, size);
        if (fd >= 0) close(fd);
        if (copied == -1) {
            free_args(args);
            free_args(zargs);
            if (piped) hand_over(&pipe_in, &pipe_out);
            return -1;
        }
        if (copied != 0) files_ok = 0;
    }

    int in = piped ? pipe_in : anonymous_file("stdin");
    int out = piped ? pipe_out : anonymous_file("stdout");
    int err = anonymous_file("stderr");
    /* Append-only, like the pipes programs expect: a memfd's file position is not updated
     * atomically, so two threads printing at once would overwrite each other's output. */
    if (out >= 0 && !piped) fcntl(out, F_SETFL, O_APPEND);
    if (err >= 0) fcntl(err, F_SETFL, O_APPEND);
    int stdin_copied = channel_to_fd(in, stdin_len);
    if (stdin_copied == -1) {
        free_args(args);
        free_args(zargs);
        return -1;
    }
    if (in >= 0 && !piped) lseek(in, 0, SEEK_SET);

    struct timespec started;
    clock_gettime(CLOCK_MONOTONIC, &started);
    struct outcome o = {0};
    if (in < 0 || out < 0 || err < 0 || !files_ok || stdin_copied) {
        o.number = 127; /* could not set the test up */
        if (err >= 0) dprintf(err, "sandbox-runner: cannot set the test up: %s\n", strerror(errno));
        if (piped) hand_over(&in, &out);
    } else if (zargc > 0) {
        run_in_zygote(args, zargs, timeout_ms, output_limit, &in, &out, err, (int)piped, &started, &o);
    } else {
        run_exec(args, timeout_ms, output_limit, &in, &out, err, (int)piped, &started, &o);
    }
    free_args(args);
    free_args(zargs);
    long wall_us = elapsed_us(&started);
    kill_all();

    struct stat out_st = {0}, err_st = {0};
    if (out >= 0 && !piped) fstat(out, &out_st);
    if (err >= 0) fstat(err, &err_st);
    off_t out_len = out_st.st_size > (off_t)output_limit + 1 ? (off_t)output_limit + 1 : out_st.st_size;
    off_t err_len = err_st.st_size > (off_t)output_limit + 1 ? (off_t)output_limit + 1 : err_st.st_size;
    char line[256];
    int n = snprintf(line, sizeof line, "DONE %s %d %d %ld %ld %ld %lld %lld\n",
                     o.signaled ? "signal" : "exit", o.number, o.timed_out, wall_us, o.cpu_us,
                     o.maxrss_kb, (long long)out_len, (long long)err_len);
    int sent = write_full(chan_out, line, (size_t)n) == 0 && fd_to_channel(out, out_len) == 0 &&
               fd_to_channel(err, err_len) == 0;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    if (err >= 0) close(err);
    return sent ? 0 : -1;
}

int main(int argc, char **argv) {
    long deadline_ms = 0;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--deadline-ms") == 0 && i + 1 < argc) {
            deadline_ms = strtol(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--channel-fd") == 0 && i + 1 < argc) {
            chan_in = chan_out = (int)strtol(argv[++i], NULL, 10);
        } else {
            fprintf(stderr, "usage: sandbox-runner [--deadline-ms N] [--channel-fd FD]\n");
            return 2;
        }
    }
    if (fcntl(chan_in, F_GETFD) == -1 || fcntl(chan_out, F_GETFD) == -1) {
        fprintf(stderr, "sandbox-runner: no channel\n");
        return 2;
    }
    prctl(PR_SET_DUMPABLE, 0);
    if (getpid() != 1) {
        prctl(PR_SET_CHILD_SUBREAPER, 1); /* orphans of a test come back to us to be reaped */
        remember_preexisting();
    }
    /* Keep the channel (and everything else of ours) out of the tests' processes; a test's
     * 0, 1 and 2 are replaced by its own files before exec. */
    for (int fd = 3; fd < 1024; fd++)
        if (fcntl(fd, F_GETFD) != -1) fcntl(fd, F_SETFD, FD_CLOEXEC);

    /* A handler (not SIG_DFL) so that SIGCHLD is queued even for a PID 1; it stays blocked
     * and is taken with sigtimedwait. */
    signal(SIGCHLD, on_child);
    sigset_t chld;
    sigemptyset(&chld);
    sigaddset(&chld, SIGCHLD);
    sigprocmask(SIG_BLOCK, &chld, NULL);
    signal(SIGPIPE, SIG_IGN);
    if (deadline_ms > 0) {
        struct sigaction sa;
        memset(&sa, 0, sizeof sa);
        sa.sa_sigaction = deadline_passed;
        sa.sa_flags = SA_SIGINFO | SA_RESTART;
        sigaction(SIGALRM, &sa, NULL);
        struct itimerval timer = {{0, 0}, {deadline_ms / 1000, (deadline_ms % 1000) * 1000}};
        setitimer(ITIMER_REAL, &timer, NULL);
    }
    char header[160];
    while (read_line(header, sizeof header) == 0) {
        if (strcmp(header, "END") == 0) break;
        if (run_test(header) < 0) {
            fprintf(stderr, "sandbox-runner: bad request or channel closed\n");
            kill_all();
            return 3;
        }
    }
    if (zygote_pid) kill(zygote_pid, SIGKILL);
    forget_zygote();
    kill_all();
    return 0;
}
