// Compiled once when the image is made, to record the compiler classes javac loads for a
// typical program into a class-data-sharing archive (see the Dockerfile).
import java.io.*;
import java.util.*;
import java.util.function.*;
import java.util.stream.*;

public class Main {
    record Edge(int to, long weight) {}

    enum Kind { SMALL, LARGE }

    interface Shape { double area(); }

    static final class Circle implements Shape {
        private final double r;
        Circle(double r) { this.r = r; }
        @Override public double area() { return Math.PI * r * r; }
    }

    static <T extends Comparable<T>> T largest(List<T> items) {
        T best = null;
        for (T item : items) if (best == null || item.compareTo(best) > 0) best = item;
        return best;
    }

    public static void main(String[] args) throws IOException {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in));
        StringTokenizer st = new StringTokenizer("3 1 2");
        int[] values = new int[3];
        for (int i = 0; i < values.length; i++) values[i] = Integer.parseInt(st.nextToken());
        Map<Integer, List<Edge>> graph = new HashMap<>();
        graph.computeIfAbsent(1, k -> new ArrayList<>()).add(new Edge(2, 5L));
        PriorityQueue<long[]> queue = new PriorityQueue<>((a, b) -> Long.compare(a[0], b[0]));
        queue.add(new long[] {0, 1});
        Deque<Integer> stack = new ArrayDeque<>();
        stack.push(1);
        var sorted = Arrays.stream(values).boxed().sorted(Comparator.reverseOrder())
                .collect(Collectors.toList());
        Function<Integer, Kind> kind = x -> switch (x) { case 1, 2 -> Kind.SMALL; default -> Kind.LARGE; };
        Supplier<Shape> shape = () -> new Circle(1.5);
        String text = """
                text block
                """;
        try (StringWriter out = new StringWriter(); PrintWriter pw = new PrintWriter(out)) {
            pw.printf("%d %s %.2f %s%n", largest(sorted), kind.apply(values[0]), shape.get().area(), text.strip());
            System.out.print(out);
        } catch (RuntimeException e) {
            throw new IllegalStateException(e);
        }
        long total = IntStream.rangeClosed(1, 10).mapToLong(i -> (long) i * i).sum();
        StringBuilder sb = new StringBuilder().append(total).append(in.ready());
        System.out.println(sb);
    }
}
