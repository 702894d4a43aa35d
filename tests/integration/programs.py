"""The same small programs in every language, for the per-language integration matrix."""

MIB_LINES = 16384  # 16384 lines of 63 'a' + newline = exactly 1 MiB
MIB_OUTPUT = ("a" * 63 + "\n") * MIB_LINES

PROGRAMS = {
    "python": {
        "hello": 'print("hello, world")',
        "sum_stdin": "a, b = map(int, input().split())\nprint(a + b)",
        "runtime_error": "print('before')\n1 / 0",
        "compile_error": None,
        "timeout": 'print("partial", flush=True)\nwhile True:\n    pass',
        "memory": 'data = b"x" * (512 << 20)\nprint(len(data))',
        "network": (
            "import socket\n"
            "try:\n"
            "    socket.create_connection(('1.1.1.1', 80), timeout=3)\n"
            "    print('connected')\n"
            "except OSError:\n"
            "    print('blocked')"),
        "big_output": f"import sys\nsys.stdout.write(('a' * 63 + '\\n') * {MIB_LINES})",
        "non_utf8": 'import sys\nsys.stdout.buffer.write(b"\\xff\\xfeok\\n")',
        "files": "open('out.txt', 'w').write(open('data/in.txt').read().upper())",
    },
    "cpp": {
        "hello": '#include <cstdio>\nint main() { puts("hello, world"); }',
        "sum_stdin": "#include <bits/stdc++.h>\nint main() { long a, b; std::cin >> a >> b; std::cout << a + b << '\\n'; }",
        "runtime_error": "#include <cstdlib>\n#include <cstdio>\nint main() { puts(\"before\"); fflush(stdout); abort(); }",
        "compile_error": "int main() { return undeclared_name; }",
        "timeout": '#include <cstdio>\nint main() { puts("partial"); fflush(stdout); volatile unsigned long i = 0; while (true) i++; }',
        "memory": "#include <vector>\n#include <cstdio>\nint main() { std::vector<char> v(512u << 20, 7); printf(\"%d\\n\", (int)v[12345]); }",
        "network": (
            "#include <cstdio>\n#include <sys/socket.h>\n#include <netinet/in.h>\n#include <arpa/inet.h>\n"
            "int main() { int s = socket(AF_INET, SOCK_STREAM, 0); sockaddr_in a{}; a.sin_family = AF_INET;"
            " a.sin_port = htons(80); inet_pton(AF_INET, \"1.1.1.1\", &a.sin_addr);"
            " puts(s >= 0 && connect(s, (sockaddr*)&a, sizeof a) == 0 ? \"connected\" : \"blocked\"); }"),
        "big_output": f'#include <cstdio>\nint main() {{ for (int i = 0; i < {MIB_LINES}; i++) puts("{"a" * 63}"); }}',
        "non_utf8": '#include <cstdio>\nint main() { fwrite("\\xff\\xfeok\\n", 1, 5, stdout); }',
        "files": (
            "#include <bits/stdc++.h>\nint main() { std::ifstream in(\"data/in.txt\"); std::string s((std::istreambuf_iterator<char>(in)), {});"
            " for (auto &c : s) c = toupper(c); std::ofstream(\"out.txt\") << s; }"),
    },
    "java": {
        "hello": 'public class Main { public static void main(String[] a) { System.out.println("hello, world"); } }',
        "sum_stdin": "import java.util.*;\npublic class Main { public static void main(String[] x) { Scanner s = new Scanner(System.in); long a = s.nextLong(), b = s.nextLong(); System.out.println(a + b); } }",
        "runtime_error": 'public class Main { public static void main(String[] a) { System.out.println("before"); throw new RuntimeException("boom"); } }',
        "compile_error": "public class Main { public static void main(String[] a) { int x = \"no\"; } }",
        "timeout": 'public class Main { public static void main(String[] a) { System.out.println("partial"); System.out.flush(); long i = 0; while (true) { i++; } } }',
        "memory": "public class Main { public static void main(String[] a) { byte[] b = new byte[512 << 20]; java.util.Arrays.fill(b, (byte) 7); System.out.println(b[12345]); } }",
        "network": (
            "public class Main { public static void main(String[] a) { try (java.net.Socket s = new java.net.Socket()) {"
            " s.connect(new java.net.InetSocketAddress(\"1.1.1.1\", 80), 3000); System.out.println(\"connected\"); }"
            " catch (Exception e) { System.out.println(\"blocked\"); } } }"),
        "big_output": (
            "public class Main { public static void main(String[] a) { StringBuilder sb = new StringBuilder();"
            f" String line = \"{'a' * 63}\\n\"; for (int i = 0; i < {MIB_LINES}; i++) sb.append(line);"
            " System.out.print(sb); System.out.flush(); } }"),
        "non_utf8": "public class Main { public static void main(String[] a) throws Exception { System.out.write(new byte[]{(byte)0xff, (byte)0xfe, 'o', 'k', '\\n'}); System.out.flush(); } }",
        "files": (
            "import java.nio.file.*;\npublic class Main { public static void main(String[] a) throws Exception {"
            " String s = Files.readString(Path.of(\"data/in.txt\")); Files.writeString(Path.of(\"out.txt\"), s.toUpperCase()); } }"),
    },
    "nodejs": {
        "hello": 'console.log("hello, world")',
        "sum_stdin": "const [a, b] = require('fs').readFileSync(0, 'utf8').trim().split(/\\s+/).map(Number); console.log(a + b);",
        "runtime_error": "console.log('before'); throw new Error('boom');",
        "compile_error": None,
        "timeout": "process.stdout.write('partial\\n'); while (true) {}",
        "memory": "const a = []; while (true) a.push(Buffer.alloc(1 << 20, 7)); ",
        "network": (
            "const s = require('net').connect({host: '1.1.1.1', port: 80, timeout: 3000});"
            " s.on('connect', () => { console.log('connected'); s.destroy(); });"
            " s.on('error', () => console.log('blocked')); s.on('timeout', () => { console.log('blocked'); s.destroy(); });"),
        "big_output": f"process.stdout.write('{'a' * 63}\\n'.repeat({MIB_LINES}));",
        "non_utf8": "process.stdout.write(Buffer.from([0xff, 0xfe, 0x6f, 0x6b, 0x0a]));",
        "files": "const fs = require('fs'); fs.writeFileSync('out.txt', fs.readFileSync('data/in.txt', 'utf8').toUpperCase());",
    },
    "go": {
        "hello": 'package main\nimport "fmt"\nfunc main() { fmt.Println("hello, world") }',
        "sum_stdin": 'package main\nimport "fmt"\nfunc main() { var a, b int64; fmt.Scan(&a, &b); fmt.Println(a + b) }',
        "runtime_error": 'package main\nimport "fmt"\nfunc main() { fmt.Println("before"); panic("boom") }',
        "compile_error": "package main\nfunc main() { x := 1 }",
        "timeout": 'package main\nimport "fmt"\nfunc main() { fmt.Println("partial"); i := 0; for { i++ } }',
        "memory": 'package main\nimport "fmt"\nfunc main() { b := make([]byte, 512<<20); for i := range b { b[i] = 7 }; fmt.Println(b[12345]) }',
        "network": (
            'package main\nimport ("fmt"; "net"; "time")\n'
            'func main() { c, err := net.DialTimeout("tcp", "1.1.1.1:80", 3*time.Second); if err != nil { fmt.Println("blocked"); return }; c.Close(); fmt.Println("connected") }'),
        "big_output": (
            'package main\nimport ("os"; "strings")\n'
            f'func main() {{ os.Stdout.WriteString(strings.Repeat("{"a" * 63}\\n", {MIB_LINES})) }}'),
        "non_utf8": 'package main\nimport "os"\nfunc main() { os.Stdout.Write([]byte{0xff, 0xfe, \'o\', \'k\', \'\\n\'}) }',
        "files": (
            'package main\nimport ("os"; "strings")\n'
            'func main() { b, _ := os.ReadFile("data/in.txt"); os.WriteFile("out.txt", []byte(strings.ToUpper(string(b))), 0644) }'),
    },
    "rust": {
        "hello": 'fn main() { println!("hello, world"); }',
        "sum_stdin": "use std::io::Read;\nfn main() { let mut s = String::new(); std::io::stdin().read_to_string(&mut s).unwrap(); let v: Vec<i64> = s.split_whitespace().map(|x| x.parse().unwrap()).collect(); println!(\"{}\", v[0] + v[1]); }",
        "runtime_error": 'fn main() { println!("before"); panic!("boom"); }',
        "compile_error": "fn main() { let x: i32 = \"no\"; }",
        "timeout": 'use std::io::Write;\nfn main() { println!("partial"); std::io::stdout().flush().unwrap(); let mut i: u64 = 0; loop { i = std::hint::black_box(i + 1); } }',
        "memory": "fn main() { let v = vec![7u8; 512 << 20]; println!(\"{}\", v[12345]); }",
        "network": (
            'use std::net::*; use std::time::Duration;\n'
            'fn main() { let a: SocketAddr = "1.1.1.1:80".parse().unwrap(); match TcpStream::connect_timeout(&a, Duration::from_secs(3)) { Ok(_) => println!("connected"), Err(_) => println!("blocked") } }'),
        "big_output": f'use std::io::Write;\nfn main() {{ let s = "{"a" * 63}\\n".repeat({MIB_LINES}); std::io::stdout().write_all(s.as_bytes()).unwrap(); }}',
        "non_utf8": "use std::io::Write;\nfn main() { std::io::stdout().write_all(&[0xff, 0xfe, b'o', b'k', b'\\n']).unwrap(); }",
        "files": 'fn main() { let s = std::fs::read_to_string("data/in.txt").unwrap(); std::fs::write("out.txt", s.to_uppercase()).unwrap(); }',
    },
    "sql": {
        "hello": "SELECT 'hello, world';",
        "sum_stdin": "SELECT a + b FROM t;",  # stdin is the setup script, see SQL_SETUP
        "runtime_error": "SELECT 'before';\nSELECT * FROM no_such_table;",
        "compile_error": None,
        "timeout": "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c;",
        "memory": "SELECT length(hex(randomblob(200000000)));",
        "network": None,
        "big_output": (
            f"WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < {MIB_LINES})"
            " SELECT substr(replace(hex(zeroblob(32)), '0', 'a'), 1, 63) FROM c;"),
        "non_utf8": "SELECT CAST(x'fffe6f6b' AS TEXT);",
        "files": None,  # SQL files are databases: see test_sql_database_file
    },
}

SQL_SETUP = "CREATE TABLE t(a INTEGER, b INTEGER); INSERT INTO t VALUES (2, 3);"
