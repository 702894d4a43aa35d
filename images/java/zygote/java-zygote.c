/*
 * The system calls the Java zygote (JavaZygote.java) has no Java API for: receiving a
 * test's three files over the runner's socket (SCM_RIGHTS) onto fds 0-2, the output cap
 * (RLIMIT_FSIZE), this process's CPU time, and a sentinel process whose death tells the
 * zygote that the runner's deadline killed the test's processes.
 *
 * fd 3 is the runner's control socket (images/base/sandbox-runner.c, run_in_zygote).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <jni.h>
#include <signal.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define CONTROL_FD 3
#define MAX_MESSAGE (1 << 20)

/* Not dumpable: a test (same uid) cannot reach this process's memory or its control socket
 * through /proc. */
JNIEXPORT void JNICALL Java_JavaZygote_hide(JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
}

/* The next test: "<output limit>\0<argv>..." with its stdin, stdout and stderr, which become
 * fds 0, 1 and 2. NULL when the runner is gone. */
JNIEXPORT jbyteArray JNICALL Java_JavaZygote_receive(JNIEnv *env, jclass cls) {
    (void)cls;
    static char buf[MAX_MESSAGE];
    int fds[3];
    char control[CMSG_SPACE(sizeof fds)];
    struct iovec iov = {buf, sizeof buf};
    struct msghdr msg = {0};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof control;
    ssize_t got;
    do got = recvmsg(CONTROL_FD, &msg, MSG_CMSG_CLOEXEC);
    while (got < 0 && errno == EINTR);
    if (got <= 0) return NULL;
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    if (!cmsg || cmsg->cmsg_level != SOL_SOCKET || cmsg->cmsg_type != SCM_RIGHTS ||
        cmsg->cmsg_len != CMSG_LEN(sizeof fds))
        return NULL;
    memcpy(fds, CMSG_DATA(cmsg), sizeof fds);
    for (int target = 0; target < 3; target++) dup2(fds[target], target);
    for (int i = 0; i < 3; i++)
        if (fds[i] > 2) close(fds[i]);
    jbyteArray message = (*env)->NewByteArray(env, (jsize)got);
    if (message) (*env)->SetByteArrayRegion(env, message, 0, (jsize)got, (const jbyte *)buf);
    return message;
}

/* fds 0-2 on /dev/null again: the test's files (pipes, for an interactive problem) are
 * released, so its peer sees end-of-file and a thread the test left writes nowhere. */
JNIEXPORT void JNICALL Java_JavaZygote_releaseFiles(JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    int null = open("/dev/null", O_RDWR | O_CLOEXEC);
    for (int target = 0; target < 3; target++) dup2(null, target);
    if (null > 2) close(null);
}

JNIEXPORT void JNICALL Java_JavaZygote_limitOutput(JNIEnv *env, jclass cls, jlong bytes) {
    (void)env;
    (void)cls;
    struct rlimit limit = {(rlim_t)bytes, (rlim_t)bytes};
    setrlimit(RLIMIT_FSIZE, &limit);
}

/* {CPU microseconds, peak resident kB} of this process so far. */
JNIEXPORT jlongArray JNICALL Java_JavaZygote_usage(JNIEnv *env, jclass cls) {
    (void)cls;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    jlong values[2] = {
        ru.ru_utime.tv_sec * 1000000L + ru.ru_utime.tv_usec +
            ru.ru_stime.tv_sec * 1000000L + ru.ru_stime.tv_usec,
        ru.ru_maxrss};
    jlongArray out = (*env)->NewLongArray(env, 2);
    if (out) (*env)->SetLongArrayRegion(env, out, 0, 2, values);
    return out;
}

/* One report line to the runner; false when it is gone. */
JNIEXPORT jboolean JNICALL Java_JavaZygote_report(JNIEnv *env, jclass cls, jbyteArray line) {
    (void)cls;
    jsize len = (*env)->GetArrayLength(env, line);
    char buf[256];
    if (len > (jsize)sizeof buf) return JNI_FALSE;
    (*env)->GetByteArrayRegion(env, line, 0, len, (jbyte *)buf);
    for (jsize sent = 0; sent < len;) {
        ssize_t n = send(CONTROL_FD, buf + sent, (size_t)(len - sent), MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return JNI_FALSE;
        sent += (jsize)n;
    }
    return JNI_TRUE;
}

/* No more tests here: the runner's next send fails and it starts a fresh zygote. */
JNIEXPORT void JNICALL Java_JavaZygote_retire(JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    shutdown(CONTROL_FD, SHUT_RDWR);
}

static void close_all_but(int keep) {
    if (syscall(SYS_close_range, 0, (unsigned)keep - 1, 0) == 0 &&
        syscall(SYS_close_range, (unsigned)keep + 1, ~0U, 0) == 0)
        return;
    for (int fd = 0; fd < 65536; fd++)
        if (fd != keep) close(fd);
}

/* A child that lives until the runner kills the test's processes (its deadline, or the
 * clean-up after a test): pid << 32 | fd, where fd reads end-of-file then; -1 if none could
 * start. The child runs no Java: only async-signal-safe calls after fork. */
JNIEXPORT jlong JNICALL Java_JavaZygote_startSentinel(JNIEnv *env, jclass cls) {
    (void)env;
    (void)cls;
    int pipefd[2];
    if (pipe2(pipefd, O_CLOEXEC) < 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(pipefd[0]);
        close(pipefd[1]);
        return -1;
    }
    if (pid == 0) {
        close_all_but(pipefd[1]);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_SETMASK, &all, NULL); /* only SIGKILL ends it */
        for (;;) pause();
    }
    close(pipefd[1]);
    return (jlong)pid << 32 | (jlong)pipefd[0];
}

/* Blocks until the sentinel is gone, then closes its fd and reaps it. */
JNIEXPORT void JNICALL Java_JavaZygote_awaitSentinel(JNIEnv *env, jclass cls, jlong sentinel) {
    (void)env;
    (void)cls;
    int fd = (int)(sentinel & 0xffffffff);
    pid_t pid = (pid_t)(sentinel >> 32);
    char byte;
    while (read(fd, &byte, 1) < 0 && errno == EINTR) {}
    close(fd);
    while (waitpid(pid, NULL, 0) < 0 && errno == EINTR) {}
}
