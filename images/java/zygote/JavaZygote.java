import java.io.BufferedInputStream;
import java.io.BufferedOutputStream;
import java.io.ByteArrayInputStream;
import java.io.FileDescriptor;
import java.io.FileInputStream;
import java.io.FileOutputStream;
import java.io.InputStream;
import java.io.OutputStream;
import java.io.PrintStream;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.lang.reflect.Modifier;
import java.net.MalformedURLException;
import java.net.URL;
import java.net.URLClassLoader;
import java.nio.charset.Charset;
import java.nio.charset.StandardCharsets;
import java.nio.file.Path;
import java.security.Permission;
import java.security.Policy;
import java.security.ProtectionDomain;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.IdentityHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Properties;
import java.util.Set;
import java.util.TimeZone;
import java.util.concurrent.LinkedBlockingQueue;
import java.util.concurrent.locks.LockSupport;

/**
 * A warmed JVM for sandbox-runner (images/base/sandbox-runner.c): /v1/evaluate's Java tests
 * run here one after another instead of paying a JVM start each (~150 ms of CPU).
 *
 * The runner's protocol is the Python zygote's: per test, "limit\0argv..." (the run argv
 * after `java`) with the test's stdin, stdout and stderr; we answer "exit n cpu_us maxrss_kb".
 * A JVM cannot fork, so a test runs in this process, and everything `java Main` does is
 * redone for it: fresh System.in/out/err made as the JVM makes them (no flush at the end:
 * a `java` process does not flush either), Main loaded by a fresh class loader (its statics
 * start over), assertions as `-ea` says, `main` on a thread called main, the wait for
 * non-daemon threads, "Exception in thread" with the launcher's stack trace, exit status 1
 * after an uncaught exception, and System.exit with its shutdown hooks.
 *
 * What one test could leave behind for the next decides when this JVM is replaced (it
 * reports, then stops taking tests; the runner starts a fresh one): a test that started a
 * thread, exited, loaded native code, changed system properties, the default locale or
 * time zone or uncaught-exception handler, failed with a VirtualMachineError, or grew the
 * heap past a quarter of its maximum (grewItsHeap). A test the
 * runner kills at its deadline takes this JVM with it (the sentinel below).
 *
 * Not a security boundary (the sandbox is): a test could reach this class by reflection,
 * and would gain nothing by it. It runs only its own program's tests, never sees an expected
 * output, and the runner keeps the deadline and the output files. The zygote is on the class
 * path, not a module: a module path costs every JVM start ~150 ms (no archived module graph).
 * Its classes and the JDK's that it and a typical test load come from a class-data-sharing
 * archive made in the image (see train).
 */
public final class JavaZygote {
    private static final String NATIVE_LIBRARY = "/usr/local/lib/sandbox/libjavazygote.so";
    private static final int EXIT_STATUS_MASK = 0xFF;

    private static native void hide();
    private static native byte[] receive();
    private static native void releaseFiles();
    private static native void limitOutput(long bytes);
    private static native long[] usage();
    private static native boolean report(byte[] line);
    private static native void retire();
    private static native long startSentinel();
    private static native void awaitSentinel(long sentinel);

    /** What a running test did; reset before each one. */
    private static volatile boolean testRunning;
    private static volatile boolean leavesState;
    private static volatile boolean addedShutdownHooks;
    private static volatile Integer exitStatus;
    private static volatile Thread exitingThread;
    private static volatile Set<Thread> aliveAtExit = Set.of();
    private static volatile ThreadGroup testGroup;
    private static volatile long currentSentinel = -1;
    private static final LinkedBlockingQueue<Long> SENTINELS = new LinkedBlockingQueue<>();
    private static final Object REPORT_LOCK = new Object();
    private static boolean reported;
    private static volatile boolean halting;
    private static long[] usageBefore = {0, 0};

    private static final PrintStream ZYGOTE_OUT = System.out;
    private static final PrintStream ZYGOTE_ERR = System.err;
    private static final InputStream ZYGOTE_IN = System.in;
    private static Properties startProperties;
    private static Locale startLocale;
    private static String startTimeZone;

    private JavaZygote() {}

    public static void main(String[] args) {
        System.load(NATIVE_LIBRARY);
        hide();
        startLocale = Locale.getDefault();
        startTimeZone = TimeZone.getDefault().getID(); // sets user.timezone: before the copy
        startProperties = (Properties) System.getProperties().clone();
        // Anonymous classes, not lambdas, here and on every test's path: a lambda's first use
        // costs a JVM ~10 ms of bootstrapping, string concatenation too (javac -XDstringConcat=inline).
        Runtime.getRuntime().addShutdownHook(new Thread(new Runnable() {
            @Override public void run() { reportExit(); }
        }, "sandbox-exit-report"));
        Thread watchdog = new Thread(new Runnable() {
            @Override public void run() { watchSentinels(); }
        }, "sandbox-watchdog");
        watchdog.setDaemon(true);
        watchdog.start();
        releaseFiles(); // the runner's stderr: no JVM warning (the guard's) reaches its log
        installGuard();
        if (args.length == 2 && args[0].equals("--train")) {
            train(args[1]);
            return;
        }
        for (;;) {
            byte[] message = receive();
            if (message == null) {
                haltNow(0);
            }
            String[] fields = new String(message, StandardCharsets.UTF_8).split("\0", -1);
            List<String> argv = new ArrayList<>(Arrays.asList(fields).subList(1, fields.length));
            while (!argv.isEmpty() && argv.get(argv.size() - 1).isEmpty()) {
                argv.remove(argv.size() - 1);
            }
            runTest(Long.parseLong(fields[0]), argv);
        }
    }

    /** `java` arguments after the launcher's name: options, the main class, its arguments. */
    private record Launch(boolean assertions, URL[] classPath, String mainClass, String[] args,
                          List<String> properties) {
        static Launch parse(List<String> argv) {
            boolean assertions = false;
            String classPath = ".";
            List<String> properties = new ArrayList<>();
            int i = 0;
            for (; i < argv.size() && argv.get(i).startsWith("-"); i++) {
                String option = argv.get(i);
                switch (option) {
                    case "-ea", "-enableassertions" -> assertions = true;
                    case "-da", "-disableassertions" -> assertions = false;
                    case "-cp", "-classpath", "--class-path" -> classPath = argv.get(++i);
                    default -> {
                        if (option.startsWith("-D")) {
                            properties.add(option.substring(2));
                        } else if (!option.startsWith("-X")) {
                            // -X/-XX: this JVM was started with the run's JVM flags (java.toml)
                            throw new IllegalArgumentException("unsupported java option " + option);
                        }
                    }
                }
            }
            if (i >= argv.size()) {
                throw new IllegalArgumentException("no main class");
            }
            List<URL> urls = new ArrayList<>();
            for (String entry : classPath.split(":")) {
                try {
                    urls.add(Path.of(entry.isEmpty() ? "." : entry).toAbsolutePath().toUri().toURL());
                } catch (MalformedURLException e) {
                    throw new IllegalArgumentException("bad class path entry " + entry, e);
                }
            }
            return new Launch(assertions, urls.toArray(new URL[0]), argv.get(i),
                              argv.subList(i + 1, argv.size()).toArray(new String[0]), properties);
        }
    }

    private static void runTest(long outputLimit, List<String> argv) {
        synchronized (REPORT_LOCK) {
            reported = false;
        }
        long sentinel = startSentinel();
        currentSentinel = sentinel; // before testRunning: the watchdog reads them the other way
        testRunning = true;
        if (sentinel != -1) {
            SENTINELS.add(sentinel);
        }
        limitOutput(outputLimit + 1);
        usageBefore = usage();
        PrintStream out = standardStream(FileDescriptor.out, "stdout.encoding");
        PrintStream err = standardStream(FileDescriptor.err, "stderr.encoding");
        System.setIn(new BufferedInputStream(new FileInputStream(FileDescriptor.in)));
        System.setOut(out);
        System.setErr(err);
        int status;
        try {
            Launch launch = Launch.parse(argv);
            for (String property : launch.properties()) {
                int eq = property.indexOf('=');
                System.setProperty(eq < 0 ? property : property.substring(0, eq),
                                   eq < 0 ? "" : property.substring(eq + 1));
            }
            status = launchMain(launch);
        } catch (IllegalArgumentException e) {
            err.println("sandbox java zygote: " + e.getMessage());
            status = 1;
        }
        if (addedShutdownHooks) {
            Runtime.getRuntime().exit(status); // runs the test's hooks, then reportExit
        }
        finish(status);
    }

    /** The image build runs a zygote once this way, with -XX:DumpLoadedClassList: the JDK
     * classes it and a typical test (images/java/Warm.java, compiled into ``classes``) load
     * go into a class-data-sharing archive that every zygote maps, which halves its start. */
    private static void train(String classes) {
        System.setIn(new ByteArrayInputStream("3\n1 2 3\n".getBytes(StandardCharsets.US_ASCII)));
        System.setOut(standardStream(FileDescriptor.out, "stdout.encoding"));
        System.setErr(standardStream(FileDescriptor.err, "stderr.encoding"));
        usageBefore = usage();
        testRunning = true;
        int status = launchMain(Launch.parse(List.of("-ea", "-cp", classes, "Main")));
        testRunning = false;
        boolean replace = changedGlobalState() || liveThreads(testGroup) > 0;
        System.setOut(ZYGOTE_OUT);
        System.setErr(ZYGOTE_ERR);
        System.setIn(ZYGOTE_IN);
        if (status != 0 || replace) {
            throw new IllegalStateException("the training run failed: status " + status);
        }
    }

    /** Runs the test's main as `java` would; its exit status. */
    private static int launchMain(Launch launch) {
        URLClassLoader loader = new URLClassLoader(launch.classPath(), ClassLoader.getPlatformClassLoader());
        loader.setDefaultAssertionStatus(launch.assertions());
        ThreadGroup group = new ThreadGroup("main");
        boolean[] failed = {false};
        Thread main = new Thread(group, new Runnable() {
            @Override public void run() { invokeMain(loader, launch, failed); }
        }, "main", 0);
        main.setContextClassLoader(loader);
        testGroup = group;
        leavesState = false; // not for the thread made just now
        addedShutdownHooks = false;
        exitStatus = null;
        main.start();
        joinQuietly(main);
        awaitNonDaemonThreads(group);
        return failed[0] ? 1 : 0;
    }

    private static void invokeMain(ClassLoader loader, Launch launch, boolean[] failed) {
        Method main;
        try {
            Class<?> mainClass = Class.forName(launch.mainClass(), false, loader);
            main = mainClass.getMethod("main", String[].class);
        } catch (ClassNotFoundException | LinkageError e) {
            System.err.println("Error: Could not find or load main class " + launch.mainClass());
            System.err.println("Caused by: " + e);
            failed[0] = true;
            return;
        } catch (NoSuchMethodException e) {
            main = null;
        }
        if (main == null || !Modifier.isStatic(main.getModifiers()) || main.getReturnType() != void.class) {
            System.err.println("Error: Main method not found in class " + launch.mainClass()
                    + ", please define the main method as:\n   public static void main(String[] args)\n"
                    + "or a JavaFX application class must extend javafx.application.Application");
            failed[0] = true;
            return;
        }
        try {
            main.setAccessible(true); // `java` runs the main of a class that is not public
            main.invoke(null, (Object) launch.args());
        } catch (InvocationTargetException e) {
            failed[0] = true;
            throw uncaught(e.getCause());
        } catch (ExceptionInInitializerError e) {
            failed[0] = true;
            throw uncaught(e);
        } catch (IllegalAccessException e) {
            failed[0] = true;
            throw uncaught(e);
        }
    }

    /** The test's exception, its stack traces cut where `java`'s launcher would show them
     * end (no reflection or zygote frames), thrown on as the thread's uncaught exception. */
    private static RuntimeException uncaught(Throwable thrown) {
        if (thrown instanceof VirtualMachineError) {
            leavesState = true;
        }
        trimLauncherFrames(thrown, Collections.newSetFromMap(new IdentityHashMap<>()));
        JavaZygote.<RuntimeException>throwUnchecked(thrown);
        return null;
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> void throwUnchecked(Throwable thrown) throws T {
        throw (T) thrown;
    }

    private static void trimLauncherFrames(Throwable thrown, Set<Throwable> seen) {
        if (thrown == null || !seen.add(thrown)) {
            return;
        }
        StackTraceElement[] trace = thrown.getStackTrace();
        int end = trace.length;
        while (end > 0 && isLauncherFrame(trace[end - 1])) {
            end--;
        }
        if (end < trace.length) {
            thrown.setStackTrace(Arrays.copyOf(trace, end));
        }
        trimLauncherFrames(thrown.getCause(), seen);
        for (Throwable suppressed : thrown.getSuppressed()) {
            trimLauncherFrames(suppressed, seen);
        }
    }

    private static boolean isLauncherFrame(StackTraceElement frame) {
        String cls = frame.getClassName();
        return cls.startsWith("JavaZygote") || cls.startsWith("jdk.internal.reflect.")
                || cls.startsWith("java.lang.invoke.") || cls.startsWith("java.lang.ClassValue")
                || cls.equals("jdk.internal.misc.Unsafe") || cls.equals("java.lang.reflect.Method")
                || cls.equals("java.lang.Thread");
    }

    /** A JVM ends when its last non-daemon thread does. */
    private static void awaitNonDaemonThreads(ThreadGroup group) {
        for (;;) {
            boolean waited = false;
            for (Thread thread : threadsOf(group)) {
                if (!thread.isDaemon() && thread.isAlive()) {
                    joinQuietly(thread);
                    waited = true;
                }
            }
            if (!waited) {
                return;
            }
        }
    }

    private static void joinQuietly(Thread thread) {
        boolean interrupted = false;
        for (;;) {
            try {
                thread.join();
                break;
            } catch (InterruptedException e) {
                interrupted = true;
            }
        }
        if (interrupted) {
            Thread.currentThread().interrupt();
        }
    }

    /** Reports the test's end; stops taking tests when it may have left state behind. */
    private static void finish(int status) {
        testRunning = false;
        boolean replace = leavesState || changedGlobalState() || liveThreads(testGroup) > 0
                || grewItsHeap();
        System.setIn(ZYGOTE_IN);
        System.setOut(ZYGOTE_OUT);
        System.setErr(ZYGOTE_ERR);
        if (!sendReport(status) || replace) {
            retire();
            parkForever();
        }
    }

    /** Whether the test left this JVM holding a heap of a size that shrinks the next test's
     * memory cap: the memory stays charged to the sandbox, and a test that used 100 MB under
     * a 256 MB cap (500 under 1024) made the next one that did the same run out of memory,
     * which alone, or as `java Main`, passes. A fresh JVM gives the next test the whole cap. */
    private static boolean grewItsHeap() {
        Runtime runtime = Runtime.getRuntime();
        return runtime.totalMemory() > runtime.maxMemory() / 4;
    }

    private static boolean changedGlobalState() {
        return !System.getProperties().equals(startProperties) || !Locale.getDefault().equals(startLocale)
                || !TimeZone.getDefault().getID().equals(startTimeZone)
                || Thread.getDefaultUncaughtExceptionHandler() != null;
    }

    private static long liveThreads(ThreadGroup group) {
        long live = 0;
        for (Thread thread : group == null ? List.<Thread>of() : threadsOf(group)) {
            live += thread.isAlive() ? 1 : 0;
        }
        return live;
    }

    /** The report line, once per test (the test's own exit and its return may race). */
    private static boolean sendReport(int status) {
        return sendReport("exit", status & EXIT_STATUS_MASK);
    }

    private static boolean sendReport(String kind, int number) {
        synchronized (REPORT_LOCK) {
            if (reported) {
                return false;
            }
            reported = true;
        }
        releaseFiles();
        long[] now = usage();
        String line = kind + " " + number + " " + (now[0] - usageBefore[0]) + " " + now[1] + "\n";
        return report(line.getBytes(StandardCharsets.US_ASCII));
    }

    /** System.exit from a test: after the test's own shutdown hooks, report its status and
     * stop here (the JVM never finishes exiting; the runner kills it when it next needs one). */
    private static void reportExit() {
        Integer status = exitStatus;
        if (status == null) {
            return;
        }
        awaitTestHooks();
        testRunning = false;
        sendReport(status);
        retire();
        parkForever();
    }

    /** The test's shutdown hooks run beside this one, and what they print is the test's:
     * once the exiting thread waits for the hooks, all were started; join those of the test. */
    private static void awaitTestHooks() {
        Thread exiting = exitingThread;
        ThreadGroup group = testGroup;
        if (exiting == null || group == null) {
            return;
        }
        while (exiting.isAlive() && !waitsForHooks(exiting)) {
            Thread.onSpinWait();
            Thread.yield();
        }
        for (Thread thread : threadsOf(group)) {
            if (!aliveAtExit.contains(thread)) { // started since exit began: a hook
                joinQuietly(thread);
            }
        }
    }

    private static List<Thread> threadsOf(ThreadGroup group) {
        Thread[] threads = new Thread[group.activeCount() + 16];
        int count = group.enumerate(threads, true);
        return Arrays.asList(threads).subList(0, count);
    }

    private static boolean waitsForHooks(Thread exiting) {
        boolean joining = false;
        for (StackTraceElement frame : exiting.getStackTrace()) {
            if (frame.getMethodName().equals("join") && frame.getClassName().equals("java.lang.Thread")) {
                joining = true;
            } else if (joining && frame.getClassName().equals("java.lang.ApplicationShutdownHooks")) {
                return true;
            }
        }
        return false;
    }

    private static void exiting(int status, boolean halt) {
        if (halting || !testRunning) {
            return;
        }
        ThreadGroup group = testGroup;
        Set<Thread> alive = Collections.newSetFromMap(new IdentityHashMap<>());
        if (group != null) {
            alive.addAll(threadsOf(group));
        }
        aliveAtExit = alive;
        exitingThread = Thread.currentThread();
        exitStatus = status;
        if (halt) { // no hooks: report now, and this thread never returns (as halt does not)
            testRunning = false;
            sendReport(status);
            retire();
            parkForever();
        }
    }

    /** The runner killed the test's processes (its deadline): the test, running in this JVM,
     * is reported killed at once, rather than after the runner's grace second. */
    private static void watchSentinels() {
        for (;;) {
            long sentinel;
            try {
                sentinel = SENTINELS.take();
            } catch (InterruptedException e) {
                continue;
            }
            awaitSentinel(sentinel);
            if (testRunning && currentSentinel == sentinel) {
                // Reported as the Python zygote reports a killed test, then no more tests here
                // (the test's thread runs on until the runner kills this JVM, before its next
                // test). Not halting: a zygote gone while the runner waits for its report can
                // be reaped before the report is read.
                testRunning = false;
                sendReport("signal", 9);
                retire();
                parkForever();
            }
        }
    }

    private static void haltNow(int status) {
        halting = true;
        Runtime.getRuntime().halt(status);
    }

    private static void parkForever() {
        for (;;) {
            LockSupport.park();
        }
    }

    /** System.out/err as the JVM makes them at start-up (java.lang.System.newPrintStream). */
    private static PrintStream standardStream(FileDescriptor fd, String encodingProperty) {
        String encoding = System.getProperty(encodingProperty);
        Charset charset = encoding == null ? Charset.defaultCharset()
                : Charset.forName(encoding, StandardCharsets.UTF_8);
        return new PrintStream(new BufferedOutputStream(new FileOutputStream(fd), 128), true, charset);
    }

    @SuppressWarnings("removal")
    private static void installGuard() {
        PrintStream err = System.err;
        System.setErr(new PrintStream(OutputStream.nullOutputStream())); // its deprecation warning
        try {
            // A policy that permits everything, set first: the JDK's own would read its policy
            // files (~40 ms) only to be told the same.
            Policy.setPolicy(new Policy() {
                @Override public boolean implies(ProtectionDomain domain, Permission permission) {
                    return true;
                }
            });
            System.setSecurityManager(new Guard());
        } finally {
            System.setErr(err);
        }
    }

    /** Not a security boundary (everything is permitted): the only way to see a test's
     * System.exit and its status, shutdown hooks, threads and other JVM-wide changes. */
    @SuppressWarnings("removal")
    private static final class Guard extends SecurityManager {
        @Override
        public void checkPermission(Permission permission) {
            if (!testRunning || !(permission instanceof RuntimePermission)) {
                return;
            }
            String name = permission.getName();
            switch (name) {
                case "setSecurityManager" -> throw new UnsupportedOperationException(
                        "The Security Manager is deprecated and will be removed in a future release");
                case "shutdownHooks" -> addedShutdownHooks = true;
                case "setDefaultUncaughtExceptionHandler", "setFactory" -> leavesState = true;
                default -> {
                    if (name.startsWith("loadLibrary.") && inTestThread() && loadedByTest()) {
                        leavesState = true;
                    }
                }
            }
        }

        /** Whether the code asking to load a native library is the test's, not the JDK's
         * (which loads its own libraries lazily, on a test's behalf). */
        private static boolean loadedByTest() {
            return StackWalker.getInstance(StackWalker.Option.RETAIN_CLASS_REFERENCE).walk(frames -> frames
                    .map(StackWalker.StackFrame::getDeclaringClass)
                    .filter(c -> c != Guard.class && c != SecurityManager.class && c != Runtime.class
                            && c != System.class && c != ClassLoader.class)
                    .findFirst()
                    .map(c -> c.getClassLoader() instanceof URLClassLoader)
                    .orElse(false));
        }

        @Override
        public void checkPermission(Permission permission, Object context) {
            checkPermission(permission);
        }

        @Override
        public void checkAccess(ThreadGroup group) {
            if (testRunning && inTestThread()) {
                leavesState = true; // the test makes a thread: it may outlive the test
            }
        }

        private static boolean inTestThread() {
            ThreadGroup test = testGroup; // parentOf, not getParent: that one asks checkAccess
            return test != null && test.parentOf(Thread.currentThread().getThreadGroup());
        }

        @Override
        public void checkAccess(Thread thread) {}

        @Override
        public void checkExit(int status) {
            boolean[] exitOrHalt = {false, false};
            StackWalker.getInstance().forEach(frame -> {
                if (frame.getClassName().equals("java.lang.Runtime")) {
                    exitOrHalt[0] |= frame.getMethodName().equals("exit");
                    exitOrHalt[1] |= frame.getMethodName().equals("halt");
                }
            });
            if (exitOrHalt[0] || exitOrHalt[1]) { // not a test calling this method itself
                exiting(status, exitOrHalt[1]);
            }
        }
    }
}
