"""SandboxFusion's per-language runner tests, as data: one Case per request they post.

Ported from ByteDance SandboxFusion (https://github.com/bytedance/SandboxFusion, Apache-2.0,
commit 469de08), sandbox/tests/runners/: test_bash.py, test_cpp.py, test_csharp.py,
test_d_ut.py, test_go.py, test_go_test.py, test_java.py, test_jest.py, test_julia.py,
test_junit.py, test_kotlin_script.py, test_lua.py, test_nodejs.py, test_perl.py, test_php.py,
test_pytest.py, test_python.py, test_r.py, test_racket.py, test_ruby.py, test_rust.py,
test_scala.py, test_swift.py, test_typescript.py, test_verilog.py. Every request of those files
is here, in their order; a test function that posts several requests gives several cases
(`source` says which). Programs are copied verbatim, with the same string literals: their
indentation and trailing blanks are part of the program (PHP echoes what precedes `<?php`; the
Perl and Verilog escapes are Python's, as in the original). Expectations are exactly the
original asserts. Besides those, every original test asserts HTTP 200 and parses the response
with SandboxFusion's RunCodeResponse model; test_sandboxfusion_cases.py does both for every case.

Not ported:
- test_cuda.py, test_python_gpu.py: need a GPU.
- test_lean.py: needs the Lean toolchain.
- test_jupyter.py: another endpoint (/run_jupyter), not /run_code.
- test_isolation.py: not per-language cases; it fetches https://www.sina.com.cn (internet
  access), binds random ports and posts two requests concurrently.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Case:
    """A request SandboxFusion's tests post and what they assert about the response.
    Expectations left at None, (), {} or False are not asserted."""

    id: str
    language: str  # SandboxFusion's id, case-sensitive ("R", "D_ut")
    code: str
    source: str = ""  # the SandboxFusion test function it comes from
    stdin: str | None = None
    files: dict[str, str] = field(default_factory=dict)  # path -> base64 content, as sent
    fetch_files: list[str] = field(default_factory=list)
    # None: the original left SandboxFusion's default (10 s); the port then sends none (ours).
    compile_timeout: float | None = None
    run_timeout: float | None = None

    status: str | None = None  # Success / Failed / SandboxError
    run_status: str | None = None  # Finished / TimeLimitExceeded / Error
    compile_status: str | None = None
    return_code: int | None = None  # of run_result
    stdout_equals: str | None = None  # run_result.stdout.strip() == stdout_equals
    stdout_exact: str | None = None  # run_result.stdout == stdout_exact, nothing stripped
    stdout_contains: tuple[str, ...] = ()
    stderr_contains: tuple[str, ...] = ()
    output_contains: tuple[str, ...] = ()  # substrings of run_result.stderr + run_result.stdout
    compile_return_code_nonzero: bool = False  # compile_result.return_code != 0
    run_result_absent: bool = False  # run_result is None: nothing ran after a failed compile
    fetched: dict[str, str] = field(default_factory=dict)  # path -> decoded content in response files


PYTEST_PASSING_CODE = r'''
def word_count(file_path):
    try:
        # 读取文件内容
        with open(file_path, 'r', encoding='utf-8') as file:
            content = file.read()

        # 移除标点符号并转换为小写
        translator = str.maketrans("", "", string.punctuation)
        content = content.translate(translator).lower()

        # 使用 Counter 统计单词出现次数
        words = content.split()
        word_counter = Counter(words)

        # 按照出现次数降序排列
        sorted_word_count = sorted(word_counter.items(), key=lambda x: x[1], reverse=True)

        for word, count in sorted_word_count:
            print(f"'{word}': {count}")

    except FileNotFoundError:
        print(f"Error: File '{file_path}' not found.")

import string
from collections import Counter


class Testword_count:
    def test_word_count_case_sensitive_file(self, capfd, tmp_path):
        file_path = tmp_path / 'test_case_sensitive.txt'
        with open(file_path, 'w', encoding='utf-8') as file:
            file.write("Case case CASE")
        word_count(file_path)
        captured = capfd.readouterr()
        assert "'case': 3" in captured.out


    def test_word_count_punctuation_file(self, capfd, tmp_path):
        file_path = tmp_path / 'test_punctuation.txt'
        with open(file_path, 'w', encoding='utf-8') as file:
            file.write("This sentence has some punctuation, like commas and periods.")
        word_count(file_path)
        captured = capfd.readouterr()
        assert "'this': 1\n'sentence': 1\n'has': 1\n'some': 1\n'punctuation': 1\n'like': 1\n'commas': 1\n'and': 1\n'periods': 1\n" in captured.out
'''

PYTEST_FAILING_CODE = r'''
def word_count(file_path):
    try:
        # 读取文件内容
        with open(file_path, 'r', encoding='utf-8') as file:
            content = file.read()

        # 移除标点符号并转换为小写
        translator = str.maketrans("", "", string.punctuation)
        content = content.translate(translator).lower()

        # 使用 Counter 统计单词出现次数
        words = content.split()
        word_counter = Counter(words)

        # 按照出现次数降序排列
        sorted_word_count = sorted(word_counter.items(), key=lambda x: x[1], reverse=True)

        for word, count in sorted_word_count:
            print(f"'{word}': {count}")

    except FileNotFoundError:
        print(f"Error: File '{file_path}' not found.")

import string
from collections import Counter


class Testword_count:
    def test_word_count_case_sensitive_file(self, capfd, tmp_path):
        file_path = tmp_path / 'test_case_sensitive.txt'
        with open(file_path, 'w', encoding='utf-8') as file:
            file.write("Case case CASE")
        word_count(file_path)
        captured = capfd.readouterr()
        assert "'case': 3" not in captured.out


    def test_word_count_punctuation_file(self, capfd, tmp_path):
        file_path = tmp_path / 'test_punctuation.txt'
        with open(file_path, 'w', encoding='utf-8') as file:
            file.write("This sentence has some punctuation, like commas and periods.")
        word_count(file_path)
        captured = capfd.readouterr()
        assert "'this': 1\n'sentence': 1\n'has': 1\n'some': 1\n'punctuation': 1\n'like': 1\n'commas': 1\n'and': 1\n'periods': 1\n" not in captured.out
'''

# test_verilog.py posts f"{test_code}{code_preface}{extracted_code}": the testbench, then the
# module under test's header and body.
VERILOG_TESTBENCH = """
`timescale 1 ps/1 ps
`define OK 12
`define INCORRECT 13
module reference_module(
	input a,
	input b,
	output out_assign,
	output reg out_alwaysblock
);

	assign out_assign = a & b;
	always @(*) out_alwaysblock = a & b;

endmodule


module stimulus_gen (
	input clk,
	output reg a, b,
	output reg[511:0] wavedrom_title,
	output reg wavedrom_enable
);


// Add two ports to module stimulus_gen:
//    output [511:0] wavedrom_title
//    output reg wavedrom_enable

	task wavedrom_start(input[511:0] title = "");
	endtask

	task wavedrom_stop;
		#1;
	endtask



	initial begin
		int count; count = 0;
		{a,b} <= 1'b0;
		wavedrom_start("AND gate");
		repeat(10) @(posedge clk)
			{a,b} <= count++;
		wavedrom_stop();

		repeat(200) @(posedge clk, negedge clk)
			{b,a} <= $random;

		#1 $finish;
	end

endmodule

module tb();

	typedef struct packed {
		int errors;
		int errortime;
		int errors_out_assign;
		int errortime_out_assign;
		int errors_out_alwaysblock;
		int errortime_out_alwaysblock;

		int clocks;
	} stats;

	stats stats1;


	wire[511:0] wavedrom_title;
	wire wavedrom_enable;
	int wavedrom_hide_after_time;

	reg clk=0;
	initial forever
		#5 clk = ~clk;

	logic a;
	logic b;
	logic out_assign_ref;
	logic out_assign_dut;
	logic out_alwaysblock_ref;
	logic out_alwaysblock_dut;

	initial begin
		$dumpfile("wave.vcd");
		$dumpvars(1, stim1.clk, tb_mismatch ,a,b,out_assign_ref,out_assign_dut,out_alwaysblock_ref,out_alwaysblock_dut );
	end


	wire tb_match;		// Verification
	wire tb_mismatch = ~tb_match;

	stimulus_gen stim1 (
		.clk,
		.* ,
		.a,
		.b );
	reference_module good1 (
		.a,
		.b,
		.out_assign(out_assign_ref),
		.out_alwaysblock(out_alwaysblock_ref) );

	top_module top_module1 (
		.a,
		.b,
		.out_assign(out_assign_dut),
		.out_alwaysblock(out_alwaysblock_dut) );


	bit strobe = 0;
	task wait_for_end_of_timestep;
		repeat(5) begin
			strobe <= !strobe;  // Try to delay until the very end of the time step.
			@(strobe);
		end
	endtask


	final begin
		if (stats1.errors_out_assign) $display("Hint: Output '%s' has %0d mismatches. First mismatch occurred at time %0d.", "out_assign", stats1.errors_out_assign, stats1.errortime_out_assign);
		else $display("Hint: Output '%s' has no mismatches.", "out_assign");
		if (stats1.errors_out_alwaysblock) $display("Hint: Output '%s' has %0d mismatches. First mismatch occurred at time %0d.", "out_alwaysblock", stats1.errors_out_alwaysblock, stats1.errortime_out_alwaysblock);
		else $display("Hint: Output '%s' has no mismatches.", "out_alwaysblock");

		$display("Hint: Total mismatched samples is %1d out of %1d samples\\n", stats1.errors, stats1.clocks);
		$display("Simulation finished at %0d ps", $time);
		$display("Mismatches: %1d in %1d samples", stats1.errors, stats1.clocks);
	end

	// Verification: XORs on the right makes any X in good_vector match anything, but X in dut_vector will only match X.
	assign tb_match = ( { out_assign_ref, out_alwaysblock_ref } === ( { out_assign_ref, out_alwaysblock_ref } ^ { out_assign_dut, out_alwaysblock_dut } ^ { out_assign_ref, out_alwaysblock_ref } ) );
	// Use explicit sensitivity list here. @(*) causes NetProc::nex_input() to be called when trying to compute
	// the sensitivity list of the @(strobe) process, which isn't implemented.
	always @(posedge clk, negedge clk) begin

		stats1.clocks++;
		if (!tb_match) begin
			if (stats1.errors == 0) stats1.errortime = $time;
			stats1.errors++;
		end
		if (out_assign_ref !== ( out_assign_ref ^ out_assign_dut ^ out_assign_ref ))
		begin if (stats1.errors_out_assign == 0) stats1.errortime_out_assign = $time;
			stats1.errors_out_assign = stats1.errors_out_assign+1'b1; end
		if (out_alwaysblock_ref !== ( out_alwaysblock_ref ^ out_alwaysblock_dut ^ out_alwaysblock_ref ))
		begin if (stats1.errors_out_alwaysblock == 0) stats1.errortime_out_alwaysblock = $time;
			stats1.errors_out_alwaysblock = stats1.errors_out_alwaysblock+1'b1; end

	end
endmodule
    """

VERILOG_TOP_MODULE_HEADER = """
module top_module(
	input a,
	input b,
	output out_assign,
	output reg out_alwaysblock
);
    """

VERILOG_TOP_MODULE_BODY = """
assign out_assign = a & b;
always @(*) out_alwaysblock = a & b;
endmodule
    """

CASES: list[Case] = [
    Case(
        id="bash/echo", language="bash",
        source="test_bash.py::test_bash_echo",
        code='echo "Hello World"',
        run_timeout=5,
        status="Success", stdout_equals="Hello World"),
    Case(
        id="bash/sleep_timeout", language="bash",
        source="test_bash.py::test_bash_sleep_timeout",
        code='sleep 0.2',
        run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="bash/false_condition", language="bash",
        source="test_bash.py::test_bash_false_condition",
        code='test 1 -eq 2',
        run_timeout=5,
        status="Failed", run_status="Finished"),
    Case(
        id="bash/syntax_error", language="bash",
        source="test_bash.py::test_bash_syntax_error",
        code='if [',
        run_timeout=5,
        status="Failed", run_status="Finished", stderr_contains=("syntax error",)),
    Case(
        id="bash/file_read", language="bash",
        source="test_bash.py::test_bash_file_read",
        code='cat dir1/dir2/dir3/secret_flag',
        files={'dir1/dir2/dir3/secret_flag': "ImhlbGxvLCB0aGlzIGlzIGEgdGVzdCI="}, run_timeout=5,
        status="Success", run_status="Finished", stdout_contains=("hello, this is a test",)),
    Case(
        id="bash/stdin", language="bash",
        source="test_bash.py::test_bash_stdin",
        code='''
    read input
    echo $input
    ''',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="cpp/print", language="cpp",
        source="test_cpp.py::test_cpp_print",
        code='''
    #include <iostream>

    int main() {
        std::cout << "123" << std::endl;
        return 0;
    }
    ''',
        run_timeout=5,
        status="Success", compile_status="Finished", stdout_equals="123"),
    Case(
        id="cpp/timeout", language="cpp",
        source="test_cpp.py::test_cpp_timeout",
        code='''
    #include <iostream>
    #include <chrono>
    #include <thread>

    int main() {
        std::this_thread::sleep_for(std::chrono::milliseconds(1000));
        return 0;
    }
    ''',
        compile_timeout=5, run_timeout=0.5,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="cpp/assertion_error", language="cpp",
        source="test_cpp.py::test_cpp_assertion_error",
        code='''
    #include <iostream>
    #include <cassert>

    int main() {
        assert(1 == 2);
        return 0;
    }
    ''',
        status="Failed", run_status="Finished", stderr_contains=("Assertion",)),
    Case(
        id="cpp/compile_error", language="cpp",
        source="test_cpp.py::test_cpp_compile_error",
        code='''
    int main() {
        object i = ?;
        return 0;
    }
    ''',
        status="Failed", compile_status="Finished", compile_return_code_nonzero=True,
        run_result_absent=True),
    Case(
        id="cpp/stdin", language="cpp",
        source="test_cpp.py::test_cpp_stdin",
        code='''
    #include <iostream>

    int main() {
        int num;
        std::cin >> num;
        std::cout << num << std::endl;
        return 0;
    }
    ''',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="cpp/pthread", language="cpp",
        source="test_cpp.py::test_cpp_pthread",
        code="""
#include <memory>
#include <queue>
#include <mutex>
#include <condition_variable>
#include <iostream>
#include <thread>
#include <vector>
#include <optional>

template<typename T>
class ThreadSafeQueue {
public:
    ThreadSafeQueue() = default;

    template<class U>
    auto push(U&& val) -> std::enable_if_t<std::is_same<T, typename std::decay<U>::type>::value> {
        std::unique_lock<std::mutex> lock(mutex_);
        queue_.push(std::forward<U>(val));
        cv_.notify_one();
    }

    std::optional<T> pop() {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [this]() { return !queue_.empty(); });
        T value = std::move(queue_.front());
        queue_.pop();
        return value;
    }

    bool empty() const {
        std::lock_guard<std::mutex> lock(mutex_);
        return queue_.empty();
    }

private:
    mutable std::mutex mutex_;
    std::condition_variable cv_;
    std::queue<T> queue_;
};



void producer(ThreadSafeQueue<int>& queue, int id) {
    for (int i = 0; i < 3; ++i) {
        std::cout << "Producer " << id << " pushing " << i << std::endl;
        queue.push(i);
    }
}

void producer_move(ThreadSafeQueue<std::unique_ptr<int>>& queue, int id) {
    for (int i = 0; i < 3; ++i) {
        std::cout << "Producer " << id << " pushing " << i << std::endl;
        queue.push(std::move(std::make_unique<int>(i)));
    }
}

void consumer(ThreadSafeQueue<int>& queue, int id) {
    for (int i = 0; i < 3; ++i) {
        auto value = queue.pop();
        std::cout << "Consumer " << id << " popped " << *value << std::endl;
    }
}

void consumer_move(ThreadSafeQueue<std::unique_ptr<int>>& queue, int id) {
    for (int i = 0; i < 3; ++i) {
        auto value = queue.pop();
        std::cout << "Consumer " << id << " popped " << *(*value) << std::endl;
    }
}

int main() {
    {
        ThreadSafeQueue<int> queue;

        std::thread producer1(producer, std::ref(queue), 1);
        std::thread producer2(producer, std::ref(queue), 2);
        std::thread consumer1(consumer, std::ref(queue), 1);
        std::thread consumer2(consumer, std::ref(queue), 2);

        producer1.join();
        producer2.join();
        consumer1.join();
        consumer2.join();
    }

    {
        ThreadSafeQueue<std::unique_ptr<int>> queue;

        std::thread producer1(producer_move, std::ref(queue), 1);
        std::thread producer2(producer_move, std::ref(queue), 2);
        std::thread consumer1(consumer_move, std::ref(queue), 1);
        std::thread consumer2(consumer_move, std::ref(queue), 2);

        producer1.join();
        producer2.join();
        consumer1.join();
        consumer2.join();
    }


    return 0;
}
    """,
        run_timeout=2,
        status="Success", run_status="Finished"),
    Case(
        id="csharp/print", language="csharp",
        source="test_csharp.py::test_csharp_print",
        code='''
    using System;

    public class Program
    {
        public static void Main(string[] args)
        {
            Console.WriteLine("123");
        }
    }
    ''',
        run_timeout=20,
        status="Success", stdout_equals="123"),
    Case(
        id="csharp/timeout", language="csharp",
        source="test_csharp.py::test_csharp_timeout",
        code='''
    using System;
    using System.Threading;

    public class Program
    {
        public static void Main(string[] args)
        {
            Thread.Sleep(200); // Sleep for 200 milliseconds
        }
    }
    ''',
        compile_timeout=1, run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="csharp/assertion_error", language="csharp",
        source="test_csharp.py::test_csharp_assertion_error",
        code='''
    using System;
    using System.Diagnostics;

    public class Program
    {
        public static void Main(string[] args)
        {
            Debug.Assert(1 == 2, "Assertion failed");
        }
    }
    ''',
        status="Failed", stderr_contains=("Assertion failed",)),
    Case(
        id="csharp/stdin", language="csharp",
        source="test_csharp.py::test_csharp_stdin",
        code='''
    public class Program
    {
        public static void Main(string[] args)
        {
            Console.WriteLine(Convert.ToInt32(Console.ReadLine()));
        }
    }
                             ''',
        stdin='65535',
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="D_ut/print", language="D_ut",
        source="test_d_ut.py::test_D_ut_print",
        code='''
import std.stdio; 
 
void main(string[] args) { 
   writeln("Hello, World!"); 
}
    ''',
        run_timeout=5,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="D_ut/timeout", language="D_ut",
        source="test_d_ut.py::test_D_ut_timeout",
        code='''
import core.thread;
import std.stdio;

void sleepSeconds() {
    Thread.sleep( dur!("seconds")( 5 ) );
}

void main() {
    sleepSeconds();
    // 5秒后执行下面的代码
    writeln("5 seconds have passed.");
}
    ''',
        run_timeout=1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="D_ut/assertion_success", language="D_ut",
        source="test_d_ut.py::test_D_ut_assertion_success",
        code='''
unittest
{
    assert(0 == 0);
}
void main(){}
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="D_ut/assertion_error", language="D_ut",
        source="test_d_ut.py::test_D_ut_assertion_error",
        code='''
unittest
{
    assert(0 == 1);
}
void main(){}
    ''',
        status="Failed", run_status="Finished"),
    Case(
        id="go/print", language="go",
        source="test_go.py::test_golang_print",
        code='''
    package main

    import (
        "fmt"
    )

    func main() {
        fmt.Println("123")
    }
    ''',
        status="Success", compile_status="Finished", stdout_equals="123"),
    Case(
        id="go/timeout", language="go",
        source="test_go.py::test_golang_timeout",
        code='''
    package main

    import (
        "time"
    )

    func main() {
        time.Sleep(200 * time.Millisecond)
    }
    ''',
        compile_timeout=1, run_timeout=0.19,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="go/stdin", language="go",
        source="test_go.py::test_golang_stdin",
        code='''
    package main

    import "fmt"

    func main() {
        var num int
        fmt.Scan(&num)
        fmt.Println(num)
    }
    ''',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="go_test/pass", language="go_test",
        source="test_go_test.py::test_golang_test_pass",
        code='''
    package main

    import (
        "math"
        "testing"
        "github.com/stretchr/testify/assert"
    )

    // Check if in given list of numbers, are any two numbers closer to each other than given threshold.
    // >>> HasCloseElements([]float64{1.0, 2.0, 3.0}, 0.5)
    // false
    // >>> HasCloseElements([]float64{1.0, 2.8, 3.0, 4.0, 5.0, 2.0}, 0.3)
    // true
    func HasCloseElements(numbers []float64, threshold float64) bool {
        for i := 0; i < len(numbers); i++ {
            for j := i + 1; j < len(numbers); j++ {
                var distance float64 = math.Abs(numbers[i] - numbers[j])
                if distance < threshold {
                    return true
                }
            }
        }
        return false
    }

    func TestHasCloseElements(t *testing.T) {
        assert := assert.New(t)
        assert.Equal(false, HasCloseElements([]float64{1.0, 2.0, 3.0}, 0.5))
        assert.Equal(true, HasCloseElements([]float64{1.0, 2.8, 3.0, 4.0, 5.0, 2.0}, 0.3))
    }
    ''',
        run_timeout=20,
        status="Success", stdout_contains=("ok",)),
    Case(
        id="go_test/fail", language="go_test",
        source="test_go_test.py::test_golang_test_fail",
        code='''
    package main

    import (
        "math"
        "testing"
        "github.com/stretchr/testify/assert"
    )

    // Check if in given list of numbers, are any two numbers closer to each other than given threshold.
    // >>> HasCloseElements([]float64{1.0, 2.0, 3.0}, 0.5)
    // false
    // >>> HasCloseElements([]float64{1.0, 2.8, 3.0, 4.0, 5.0, 2.0}, 0.3)
    // true
    func HasCloseElements(numbers []float64, threshold float64) bool {
        for i := 0; i < len(numbers); i++ {
            for j := i + 1; j < len(numbers); j++ {
                var distance float64 = math.Abs(numbers[i] - numbers[j])
                if distance < threshold {
                    return false
                }
            }
        }
        return true
    }

    func TestHasCloseElements(t *testing.T) {
        assert := assert.New(t)
        assert.Equal(false, HasCloseElements([]float64{1.0, 2.0, 3.0}, 0.5))
        assert.Equal(true, HasCloseElements([]float64{1.0, 2.8, 3.0, 4.0, 5.0, 2.0}, 0.3))
    }
    ''',
        run_timeout=20,
        status="Failed", stdout_contains=("Not equal",)),
    Case(
        id="go_test/timeout", language="go_test",
        source="test_go_test.py::test_golang_test_timeout",
        code='''
    package main

    import (
        "time"
        "testing"
    )

    func TestTimeout(t *testing.T) {
        time.Sleep(200 * time.Millisecond)
    }
    ''',
        run_timeout=0.19,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="java/print", language="java",
        source="test_java.py::test_java_print",
        code='''
    public class Main {
        public static void main(String[] args) {
            System.out.println(123);
        }
    }
    ''',
        status="Success", compile_status="Finished", stdout_equals="123"),
    Case(
        id="java/compile_error", language="java",
        source="test_java.py::test_java_compile_error",
        code='''
    public class Main {
        public static void main(String[] args) {
            System.uto.println(123);
        }
    }
    ''',
        status="Failed", compile_status="Finished", compile_return_code_nonzero=True,
        run_result_absent=True),
    Case(
        id="java/timeout", language="java",
        source="test_java.py::test_java_timeout",
        code='''
    public class Main {
        public static void main(String[] args) {
            try {
                Thread.sleep(200);
            } catch (InterruptedException e) {
                System.err.println("The sleeping thread was interrupted: " + e.getMessage());
            }
        }
    }
    ''',
        run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="java/assertion_error", language="java",
        source="test_java.py::test_java_assertion_error",
        code='''
    public class Main {
        public static void main(String[] args) {
            throw new AssertionError("Intentional assertion error");
        }
    }
    ''',
        status="Failed", run_status="Finished", stderr_contains=("java.lang.AssertionError",)),
    Case(
        id="java/assert", language="java",
        source="test_java.py::test_java_assert",
        code='''
    public class Main {
        public static void main(String[] args) {
            assert 1 == 2;
        }
    }
    ''',
        status="Failed", run_status="Finished"),
    Case(
        id="java/external_jar", language="java",
        source="test_java.py::test_java_external_jar",
        code='''
    import org.javatuples.Pair;
    import org.javatuples.Triplet;

    public class Main {
        public static void main(String[] args) {
            // Creating a Pair of String and Integer
            Pair<String, Integer> pair = Pair.with("apple", 1);

            // Accessing the elements of the Pair
            String fruit = pair.getValue0();
            Integer quantity = pair.getValue1();
            System.out.println("Fruit: " + fruit + ", Quantity: " + quantity);

            // Creating a Triplet of String, Integer, and Double
            Triplet<String, Integer, Double> triplet = Triplet.with("banana", 2, 0.99);

            // Accessing the elements of the Triplet
            String fruitTriplet = triplet.getValue0();
            Integer quantityTriplet = triplet.getValue1();
            Double priceTriplet = triplet.getValue2();
            System.out.println("Fruit: " + fruitTriplet + ", Quantity: " + quantityTriplet + ", Price: " + priceTriplet);
        }
    }
    ''',
        status="Success", run_status="Finished",
        stdout_contains=("Fruit: banana, Quantity: 2, Price: 0.99",)),
    Case(
        id="java/stdin", language="java",
        source="test_java.py::test_java_stdin",
        code='''
    import java.util.Scanner;

    public class Main {
        public static void main(String[] args) {
            Scanner scanner = new Scanner(System.in);
            int number = scanner.nextInt();
            System.out.println(number);
        }
    }
                             ''',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="jest/pass", language="jest",
        source="test_jest.py::test_jest_pass",
        code='''
import { describe, expect, test } from '@jest/globals';

function MinSubArrayLen(target: number, nums: number[]): number {
    let n = nums.length;
    let minLength = Infinity; // 初始化为极大值
    let sum = 0; // 存储子数组的和
    let start = 0; // 子数组的起始索引

    for (let end = 0; end < n; end++) {
        sum += nums[end]; // 将当前元素加到和中

        while (sum >= target) {
            minLength = Math.min(minLength, end - start + 1); // 更新最小长度
            sum -= nums[start]; // 移动起始索引，并减去这个值
            start++;
        }
    }

    return minLength === Infinity ? 0 : minLength; // 如果长度未被更新过，则返回0，表示没有找到
}

describe('MinSubArrayLen', () => {
    test('finds minimum length of a subarray with sum >= target', () => {
        expect(MinSubArrayLen(7, [2, 3, 1, 2, 4, 3])).toBe(2);
        expect(MinSubArrayLen(15, [1, 2, 3, 4, 5])).toBe(5);
        expect(MinSubArrayLen(4, [1, 4, 4])).toBe(1);
        expect(MinSubArrayLen(11, [1, 1, 1, 1, 1, 1, 1, 1])).toBe(0);
    });

    test('returns 0 if no such subarray exists', () => {
        expect(MinSubArrayLen(100, [1, 2, 3, 4, 5])).toBe(0);
        expect(MinSubArrayLen(7, [2, 1])).toBe(0);
    });

    test('works with single element array', () => {
        expect(MinSubArrayLen(3, [3])).toBe(1);
        expect(MinSubArrayLen(3, [1])).toBe(0);
    });
});

                             ''',
        run_timeout=10,
        status="Success", run_status="Finished"),
    Case(
        id="jest/fail", language="jest",
        source="test_jest.py::test_jest_fail",
        code='''
import { describe, expect, test } from '@jest/globals';

function MinSubArrayLen(target: number, nums: number[]): number {
    return 0
}

describe('MinSubArrayLen', () => {
    test('finds minimum length of a subarray with sum >= target', () => {
        expect(MinSubArrayLen(7, [2, 3, 1, 2, 4, 3])).toBe(2);
        expect(MinSubArrayLen(15, [1, 2, 3, 4, 5])).toBe(5);
        expect(MinSubArrayLen(4, [1, 4, 4])).toBe(1);
        expect(MinSubArrayLen(11, [1, 1, 1, 1, 1, 1, 1, 1])).toBe(0);
    });

    test('returns 0 if no such subarray exists', () => {
        expect(MinSubArrayLen(100, [1, 2, 3, 4, 5])).toBe(0);
        expect(MinSubArrayLen(7, [2, 1])).toBe(0);
    });

    test('works with single element array', () => {
        expect(MinSubArrayLen(3, [3])).toBe(1);
        expect(MinSubArrayLen(3, [1])).toBe(0);
    });
});

                             ''',
        run_timeout=10,
        status="Failed", run_status="Finished"),
    Case(
        id="julia/print", language="julia",
        source="test_julia.py::test_julia_print",
        code='''
println("Hello, World!")
    ''',
        run_timeout=5,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="julia/timeout", language="julia",
        source="test_julia.py::test_julia_timeout",
        code='''
Base.sleep(5)
    ''',
        run_timeout=5,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="julia/assertion_success", language="julia",
        source="test_julia.py::test_julia_assertion_success",
        code='''
using Test
@testset begin
	@test(0 == 0)
end
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="julia/assertion_error", language="julia",
        source="test_julia.py::test_julia_assertion_error",
        code='''
using Test
@testset begin
	@test(1 == 0)
end
    ''',
        status="Failed", run_status="Finished", stdout_contains=("Test Failed",)),
    Case(
        id="junit/pass", language="junit",
        source="test_junit.py::test_junit_pass",
        code='''
import org.junit.jupiter.api.Test;
import static org.junit.jupiter.api.Assertions.*;

public class PhoneNumberCreator {
    public static String createPhoneNumber(int[] numbers) {
        StringBuilder phoneNumber = new StringBuilder("(");
        for (int i = 0; i < numbers.length; i++) {
            if (i == 3) {
                phoneNumber.append(") ");
            } else if (i == 6) {
                phoneNumber.append("-");
            }
            phoneNumber.append(numbers[i]);
        }
        return phoneNumber.toString();
    }
}

class PhoneNumberCreatorTest {
    @Test
    void testCreatePhoneNumber2() {
        assertEquals("(987) 654-3210", PhoneNumberCreator.createPhoneNumber(new int[]{9,8,7,6,5,4,3,2,1,0}));
    }

    @Test
    void testCreatePhoneNumber3() {
        assertEquals("(111) 111-1111", PhoneNumberCreator.createPhoneNumber(new int[]{1,1,1,1,1,1,1,1,1,1}));
    }

    @Test
    void testCreatePhoneNumber4() {
        assertEquals("(999) 999-9999", PhoneNumberCreator.createPhoneNumber(new int[]{9,9,9,9,9,9,9,9,9,9}));
    }

    @Test
    void testCreatePhoneNumber5() {
        assertEquals("(123) 456-7890", PhoneNumberCreator.createPhoneNumber(new int[]{1,2,3,4,5,6,7,8,9,0}));
    }

    @Test
    void testCreatePhoneNumber6() {
        assertEquals("(000) 000-0000", PhoneNumberCreator.createPhoneNumber(new int[]{0,0,0,0,0,0,0,0,0,0}));
    }

    //boundary cases
    @Test
    void testCreatePhoneNumber7() {
        assertEquals("(123) 456-7890", PhoneNumberCreator.createPhoneNumber(new int[]{1,2,3,4,5,6,7,8,9,0}));
    }

    @Test
    void testCreatePhoneNumber8() {
        assertEquals("(000) 000-0000", PhoneNumberCreator.createPhoneNumber(new int[]{0,0,0,0,0,0,0,0,0,0}));
    }

    @Test
    void testCreatePhoneNumber9() {
        assertEquals("(999) 999-9999", PhoneNumberCreator.createPhoneNumber(new int[]{9,9,9,9,9,9,9,9,9,9}));
    }

    @Test
    void testCreatePhoneNumber10() {
        assertEquals("(123) 456-7890", PhoneNumberCreator.createPhoneNumber(new int[]{1,2,3,4,5,6,7,8,9,0}));
    }
}
    ''',
        status="Success", compile_status="Finished"),
    Case(
        id="junit/fail", language="junit",
        source="test_junit.py::test_junit_fail",
        code='''
import org.junit.jupiter.api.Test;
import static org.junit.jupiter.api.Assertions.*;

public class PhoneNumberCreator {
    public static String createPhoneNumber(int[] numbers) {
        StringBuilder phoneNumber = new StringBuilder("(");
        for (int i = 0; i < numbers.length; i++) {
            if (i == 9) {
                phoneNumber.append(") ");
            } else if (i == 2) {
                phoneNumber.append("-");
            }
            phoneNumber.append(numbers[i]);
        }
        return phoneNumber.toString();
    }
}

class PhoneNumberCreatorTest {
    @Test
    void testCreatePhoneNumber2() {
        assertEquals("(987) 654-3210", PhoneNumberCreator.createPhoneNumber(new int[]{9,8,7,6,5,4,3,2,1,0}));
    }

    @Test
    void testCreatePhoneNumber3() {
        assertEquals("(111) 111-1111", PhoneNumberCreator.createPhoneNumber(new int[]{1,1,1,1,1,1,1,1,1,1}));
    }

    @Test
    void testCreatePhoneNumber4() {
        assertEquals("(999) 999-9999", PhoneNumberCreator.createPhoneNumber(new int[]{9,9,9,9,9,9,9,9,9,9}));
    }

    @Test
    void testCreatePhoneNumber5() {
        assertEquals("(123) 456-7890", PhoneNumberCreator.createPhoneNumber(new int[]{1,2,3,4,5,6,7,8,9,0}));
    }

    @Test
    void testCreatePhoneNumber6() {
        assertEquals("(000) 000-0000", PhoneNumberCreator.createPhoneNumber(new int[]{0,0,0,0,0,0,0,0,0,0}));
    }

    //boundary cases
    @Test
    void testCreatePhoneNumber7() {
        assertEquals("(123) 456-7890", PhoneNumberCreator.createPhoneNumber(new int[]{1,2,3,4,5,6,7,8,9,0}));
    }

    @Test
    void testCreatePhoneNumber8() {
        assertEquals("(000) 000-0000", PhoneNumberCreator.createPhoneNumber(new int[]{0,0,0,0,0,0,0,0,0,0}));
    }

    @Test
    void testCreatePhoneNumber9() {
        assertEquals("(999) 999-9999", PhoneNumberCreator.createPhoneNumber(new int[]{9,9,9,9,9,9,9,9,9,9}));
    }

    @Test
    void testCreatePhoneNumber10() {
        assertEquals("(123) 456-7890", PhoneNumberCreator.createPhoneNumber(new int[]{1,2,3,4,5,6,7,8,9,0}));
    }
}
    ''',
        status="Failed", compile_status="Finished"),
    Case(
        id="kotlin_script/print", language="kotlin_script",
        source="test_kotlin_script.py::test_kotlin_script_print",
        code='''
println("Hello, World!")
    ''',
        run_timeout=30,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="kotlin_script/timeout", language="kotlin_script",
        source="test_kotlin_script.py::test_kotlin_script_timeout",
        code='''
fun main() {
    println("Starting...")
    
    // 让程序暂停 2 秒
    Thread.sleep(2000)
    
    println("Finished!")
}

main()
    ''',
        run_timeout=1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="kotlin_script/assertion_success", language="kotlin_script",
        source="test_kotlin_script.py::test_kotlin_script_assertion_success",
        code='''
fun minCost() : Int {
    return 0
}

fun main() {
    var x : Int = minCost();
    var y : Int = 0;
    if (x != y) {
        throw Exception("Exception -- test case did not pass. x = " + x)
    }
}

main()
    ''',
        run_timeout=40,
        status="Success", run_status="Finished"),
    Case(
        id="kotlin_script/assertion_error", language="kotlin_script",
        source="test_kotlin_script.py::test_kotlin_script_assertion_error",
        code='''
fun minCost() : Int {
    return 0
}

fun main() {
    var x : Int = minCost();
    var y : Int = 1;
    if (x != y) {
        throw Exception("Exception -- test case did not pass. x = " + x)
    }
}

main()
    ''',
        run_timeout=20,
        status="Failed", run_status="Finished", stderr_contains=("java.lang.Exception",)),
    Case(
        id="lua/print", language="lua",
        source="test_lua.py::test_lua_print",
        code='''
print("Hello, World!")
    ''',
        run_timeout=5,
        status="Success", stdout_equals="Hello, World!"),
    Case(
        id="lua/timeout", language="lua",
        source="test_lua.py::test_lua_timeout",
        code='''
os.execute("sleep 3")
    ''',
        run_timeout=1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="lua/assertion_success", language="lua",
        source="test_lua.py::test_lua_assertion_success",
        code='''
lu = require('luaunit')
lu.assertEquals(0, 0)
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="lua/assertion_error", language="lua",
        source="test_lua.py::test_lua_assertion_error",
        code='''
lu = require('luaunit')
lu.assertEquals(1, 2)
    ''',
        status="Failed", run_status="Finished", stderr_contains=("LuaUnit test FAILURE",)),
    Case(
        id="nodejs/print", language="nodejs",
        source="test_nodejs.py::test_nodejs_print",
        code='console.log(123)',
        run_timeout=5,
        status="Success", stdout_equals="123"),
    Case(
        id="nodejs/timeout", language="nodejs",
        source="test_nodejs.py::test_nodejs_timeout",
        code='''
    const util = require('util');
    const sleep = util.promisify(setTimeout);

    async function main() {
        await sleep(1000);
    }

    main();
                             ''',
        run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="nodejs/assertion_error", language="nodejs",
        source="test_nodejs.py::test_nodejs_assertion_error",
        code='''
    const assert = require('assert');
    assert.strictEqual(1, 2, '1 !== 2');
    ''',
        status="Failed", run_status="Finished", stderr_contains=("AssertionError",)),
    Case(
        id="nodejs/humanevalx_assertion_error", language="nodejs",
        source="test_nodejs.py::test_nodejs_humanevalx_assertion_error",
        code='console.assert(1 === 2);',
        status="Success", run_status="Finished", stderr_contains=("Assertion failed",)),
    Case(
        id="nodejs/lodash_dep", language="nodejs",
        source="test_nodejs.py::test_nodejs_lodash_dep",
        code='''
    const _ = require("lodash");
    const assert = require('assert');

    assert(_.isEqual(1, 1))
                             ''',
        run_timeout=5,
        status="Success"),
    Case(
        id="nodejs/stdin", language="nodejs",
        source="test_nodejs.py::test_nodejs_stdin",
        code='''
    process.stdin.on('data', (input) => {
        const num = parseInt(input.toString());
        console.log(num);
        process.exit();
    });
                             ''',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="perl/print", language="perl",
        source="test_perl.py::test_perl_print",
        code='''
print "Hello, World!\n";
    ''',
        run_timeout=5,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="perl/timeout", language="perl",
        source="test_perl.py::test_perl_timeout",
        code='''
sleep(5);
print("Finished waiting for 5 seconds.")
    ''',
        run_timeout=1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="perl/assertion_success", language="perl",
        source="test_perl.py::test_perl_assertion_success",
        code='''
use Test::Deep;
use Data::Compare;

sub test {
        if(eq_deeply(1, 1)) {
        print "ok!" }else{
        exit 1;
        }
}

test();
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="perl/assertion_error", language="perl",
        source="test_perl.py::test_perl_assertion_error",
        code='''
use Test::Deep;

sub test {
        if(eq_deeply(0, 1)) {
        print "ok!" }else{
        exit 1;
        }
}

test();
    ''',
        status="Failed", run_status="Finished"),
    Case(
        id="php/print", language="php",
        source="test_php.py::test_php_print",
        code='''
    <?php
    echo "123";
    ?>
    ''',
        run_timeout=5,
        status="Success", stdout_equals="123"),
    Case(
        id="php/timeout", language="php",
        source="test_php.py::test_php_timeout",
        code='''
    <?php
    sleep(2); // Sleep for 2 seconds
    ?>
    ''',
        run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="php/error", language="php",
        source="test_php.py::test_php_error",
        code='''
    <?php
    trigger_error("Custom error", E_USER_ERROR);
    ?>
    ''',
        status="Failed", output_contains=("Custom error",)),
    Case(
        id="php/stdin", language="php",
        source="test_php.py::test_php_stdin",
        code='''
    <?php
        $input = readline();
        echo intval($input);
    ?>
                             ''',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_contains=("65535",)),
    Case(
        id="python/pytest_pass_as_script", language="python",
        source="test_pytest.py::test_pytest_pass (request 1 of 2)",
        code=PYTEST_PASSING_CODE,
        run_timeout=5,
        status="Success"),
    Case(
        id="pytest/pass", language="pytest",
        source="test_pytest.py::test_pytest_pass (request 2 of 2)",
        code=PYTEST_PASSING_CODE,
        run_timeout=5,
        status="Success"),
    Case(
        id="python/pytest_fail_as_script", language="python",
        source="test_pytest.py::test_pytest_fail (request 1 of 2)",
        code=PYTEST_FAILING_CODE,
        run_timeout=5,
        status="Success"),
    Case(
        id="pytest/fail", language="pytest",
        source="test_pytest.py::test_pytest_fail (request 2 of 2)",
        code=PYTEST_FAILING_CODE,
        run_timeout=5,
        status="Failed"),
    Case(
        id="python/print", language="python",
        source="test_python.py::test_python_print",
        code='print(123)',
        run_timeout=5,
        status="Success", stdout_equals="123"),
    Case(
        id="python/timeout", language="python",
        source="test_python.py::test_python_timeout",
        code='import time; time.sleep(0.2)',
        run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="python/assertion_error", language="python",
        source="test_python.py::test_python_assertion_error",
        code='assert 1 == 2',
        run_timeout=5,
        status="Failed", run_status="Finished", stderr_contains=("AssertionError",)),
    Case(
        id="python/syntax_error", language="python",
        source="test_python.py::test_python_syntax_error",
        code='int a = 1',
        run_timeout=5,
        status="Failed", run_status="Finished", stderr_contains=("SyntaxError: invalid syntax",)),
    Case(
        id="python/file_read", language="python",
        source="test_python.py::test_python_file_read",
        code='print(open("dir1/dir2/dir3/secret_flag").read())',
        files={'dir1/dir2/dir3/secret_flag': "ImhlbGxvLCB0aGlzIGlzIGEgdGVzdCI="}, run_timeout=5,
        status="Success", run_status="Finished", stdout_contains=("hello, this is a test",)),
    Case(
        id="python/stdin", language="python",
        source="test_python.py::test_python_stdin",
        code='print(int(input()))',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="python/fetch_files", language="python",
        source="test_python.py::test_python_fetch_files",
        code='open("a.txt", "w").write("secret"); open("/mnt/b", "w").write("sauce");',
        fetch_files=['a.txt', '/mnt/b'], run_timeout=5,
        status="Success", run_status="Finished", fetched={"a.txt": "secret", "/mnt/b": "sauce"}),
    Case(
        id="R/print", language="R",
        source="test_r.py::test_r_print",
        code='''
myString <- "Hello, World!"
print ( myString )
    ''',
        run_timeout=5,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="R/timeout", language="R",
        source="test_r.py::test_r_timeout",
        code='''
Sys.sleep(5)
print("Finished waiting for 5 seconds.")
    ''',
        run_timeout=5,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="R/assertion_success", language="R",
        source="test_r.py::test_r_assertion_success",
        code='''
stopifnot(isTRUE(all.equal(0, 0)))
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="R/assertion_error", language="R",
        source="test_r.py::test_r_assertion_error",
        code='''
stopifnot(isTRUE(all.equal(1, 0)))
    ''',
        status="Failed", run_status="Finished", stderr_contains=("Execution halted",)),
    Case(
        id="racket/print", language="racket",
        source="test_racket.py::test_racket_print",
        code='''
#lang racket

(display "Hello, World!")
    ''',
        run_timeout=5,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="racket/timeout", language="racket",
        source="test_racket.py::test_racket_timeout",
        code='''
#lang racket

(display "Starting sleep...")
(sleep 10)
(display "Sleep complete!")
    ''',
        run_timeout=5,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="racket/assertion_success", language="racket",
        source="test_racket.py::test_racket_assertion_success",
        code='''
#lang racket

;; Return length of given string
;; >>> (strlen "")
;; 0
;; >>> (strlen "abc")
;; 3
(define (strlen string)
  (string-length string))
                             
(require rackunit)

(define (test-humaneval)

  (let (( candidate strlen))
    (check-within (candidate "") 0 0.001)
    (check-within (candidate "x") 1 0.001)
    (check-within (candidate "asdasnakj") 9 0.001)
))

(test-humaneval)
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="ruby/print", language="ruby",
        source="test_ruby.py::test_ruby_print",
        code='''
puts "Hello, World!";

    ''',
        run_timeout=5,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="ruby/timeout", language="ruby",
        source="test_ruby.py::test_ruby_timeout",
        code='''
sleep(5)
    ''',
        run_timeout=5,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="ruby/assertion_success", language="ruby",
        source="test_ruby.py::test_ruby_assertion_success",
        code='''
require 'test/unit'
class TestSandbox < Test::Unit::TestCase
  def test_sandbox
    assert_equal(0, 0)
  end
end
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="ruby/assertion_error", language="ruby",
        source="test_ruby.py::test_ruby_assertion_error",
        code='''
require 'test/unit'
class TestSandbox < Test::Unit::TestCase
  def test_sandbox
    assert_equal(1, 0)
  end
end
    ''',
        status="Failed", run_status="Finished", stdout_contains=("Failure",)),
    Case(
        id="rust/print", language="rust",
        source="test_rust.py::test_rust_print",
        code='''
    fn main() {
        println!("123");
    }
    ''',
        run_timeout=5,
        status="Success", compile_status="Finished", stdout_equals="123"),
    Case(
        id="rust/timeout", language="rust",
        source="test_rust.py::test_rust_timeout",
        code='''
    use std::{thread, time};

    fn main() {
        let sleep_duration = time::Duration::from_millis(200);
        thread::sleep(sleep_duration);
    }
    ''',
        compile_timeout=1, run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="rust/assertion_error", language="rust",
        source="test_rust.py::test_rust_assertion_error",
        code='''
    fn main() {
        assert_eq!(1, 2);
    }
    ''',
        status="Failed", run_status="Finished", stderr_contains=("assertion",)),
    Case(
        id="rust/compile_error", language="rust",
        source="test_rust.py::test_rust_compile_error",
        code='''
    fn main() {
        let x: u32 = "Hello, world!";
        println!("{}", x);
    }
    ''',
        status="Failed", compile_status="Finished", compile_return_code_nonzero=True,
        run_result_absent=True),
    Case(
        id="rust/stdin", language="rust",
        source="test_rust.py::test_rust_stdin",
        code='''
    use std::io;

    fn main() {
        let mut input = String::new();
        io::stdin().read_line(&mut input).expect("Failed to read line");

        let num: i32 = input.trim().parse().expect("Invalid input");
        println!("{}", num);
    }
    ''',
        stdin='65535',
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="scala/print", language="scala",
        source="test_scala.py::test_scala_print",
        code='''
object HelloWorld {
    def main(args: Array[String]): Unit = {
        println("Hello, World!")
    }
}
    ''',
        compile_timeout=20, run_timeout=5,
        status="Success", stdout_contains=("Hello, World!",)),
    Case(
        id="scala/timeout", language="scala",
        source="test_scala.py::test_scala_timeout",
        code='''
object HelloWorld {
    def main(args: Array[String]): Unit = {
        Thread.sleep(5 * 1000)
        println("Hello, World!")
    }
}
    ''',
        compile_timeout=20, run_timeout=5,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="scala/assertion_success", language="scala",
        source="test_scala.py::test_scala_assertion_success (request 1 of 2)",
        code='''
    object HelloWorld {
        def main(args: Array[String]) = {
            assert((0l) == (0l));
        }
    }
        ''',
        compile_timeout=20,
        status="Success", run_status="Finished"),
    Case(
        id="scala/assertion_success_extends_app", language="scala",
        source="test_scala.py::test_scala_assertion_success (request 2 of 2)",
        code='''
    object Main extends App {
        def foo() = {
            assert((0l) == (0l));
        }

        foo()
    }
        ''',
        compile_timeout=20,
        status="Success", run_status="Finished"),
    Case(
        id="scala/assertion_error", language="scala",
        source="test_scala.py::test_scala_assertion_error (request 1 of 2)",
        code='''
object HelloWorld {
    def main(args: Array[String]) = {
        assert((1l) == (0l));
    }
}
    ''',
        compile_timeout=20,
        status="Failed", run_status="Finished", stderr_contains=("assertion failed",)),
    Case(
        id="scala/assertion_error_extends_app", language="scala",
        source="test_scala.py::test_scala_assertion_error (request 2 of 2)",
        code='''
    object Main extends App {
        def foo() = {
            assert((1l) == (0l));
        }

        foo()
    }
        ''',
        compile_timeout=20,
        status="Failed", run_status="Finished"),
    Case(
        id="swift/print", language="swift",
        source="test_swift.py::test_swift_print",
        code='''
var myString = "Hello, World!"
 
print(myString)
    ''',
        run_timeout=5,
        status="Success", compile_status="Finished", stdout_contains=("Hello, World!",)),
    Case(
        id="swift/timeout", language="swift",
        source="test_swift.py::test_swift_timeout",
        code='''
import Foundation

print("Start")

DispatchQueue.main.asyncAfter(deadline: .now() + 10) {
    print("After 10 seconds")
    exit(0)
}

RunLoop.main.run()
    ''',
        compile_timeout=5, run_timeout=0.5,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="swift/assertion_success", language="swift",
        source="test_swift.py::test_swift_assertion_success",
        code='''
import Foundation

/// Return length of given string
/// >>> strlen(string: "")
/// 0
/// >>> strlen(string: "abc")
/// 3
func strlen(string: String) -> Int {
    return string.count
}

func ==(left: [(Int, Int)], right: [(Int, Int)]) -> Bool {
    if left.count != right.count {
        return false
    }
    for (l, r) in zip(left, right) {
        if l != r {
            return false
        }
    }
    return true
}

assert(strlen(string: "") == 0)
assert(strlen(string: "x") == 1)
assert(strlen(string: "asdasnakj") == 9)
    ''',
        status="Success", run_status="Finished"),
    Case(
        id="swift/assertion_error", language="swift",
        source="test_swift.py::test_swift_assertion_error",
        code='''
import Foundation

/// Return length of given string
/// >>> strlen(string: "")
/// 0
/// >>> strlen(string: "abc")
/// 3
func strlen(string: String) -> Int {
    return string.count
}

func ==(left: [(Int, Int)], right: [(Int, Int)]) -> Bool {
    if left.count != right.count {
        return false
    }
    for (l, r) in zip(left, right) {
        if l != r {
            return false
        }
    }
    return true
}

assert(strlen(string: "") == 1)
    ''',
        status="Failed", run_status="Finished"),
    Case(
        id="swift/compile_error", language="swift",
        source="test_swift.py::test_swift_compile_error",
        code='''
var myString = "Hello, World!"

print(myString
    ''',
        status="Failed", compile_status="Finished", compile_return_code_nonzero=True,
        run_result_absent=True),
    Case(
        id="typescript/print", language="typescript",
        source="test_typescript.py::test_typescript_print",
        code='console.log(123)',
        run_timeout=5,
        status="Success", stdout_equals="123"),
    Case(
        id="typescript/timeout", language="typescript",
        source="test_typescript.py::test_typescript_timeout",
        code='''
    import util from 'util';

    const sleep = util.promisify(setTimeout);

    async function main() {
        await sleep(200);
    }

    main();
                             ''',
        run_timeout=0.1,
        status="Failed", run_status="TimeLimitExceeded"),
    Case(
        id="typescript/assertion_error", language="typescript",
        source="test_typescript.py::test_typescript_assertion_error",
        code='''
    import assert from "assert";
    assert.strictEqual(1, 2, '1 !== 2');
    ''',
        status="Failed", run_status="Finished", stderr_contains=("AssertionError",)),
    Case(
        id="typescript/humanevalx_assertion_error", language="typescript",
        source="test_typescript.py::test_typescript_humanevalx_assertion_error",
        code='console.assert(1 === 2);',
        status="Success", run_status="Finished", stderr_contains=("Assertion failed",)),
    Case(
        id="typescript/lodash_dep", language="typescript",
        source="test_typescript.py::test_typescript_lodash_dep",
        code='''
    import _ from "lodash";
    import assert from "assert";

    assert(_.isEqual(1, 1));
    console.log('done');
                             ''',
        run_timeout=5,
        status="Success"),
    Case(
        id="typescript/stdin", language="typescript",
        source="test_typescript.py::test_typescript_stdin",
        code='''
    process.stdin.on('data', (input: Buffer) => {
    const num: number = parseInt(input.toString());
    console.log(num);
    process.exit();
    });
                             ''',
        stdin='65535', run_timeout=5,
        status="Success", run_status="Finished", stdout_exact="65535\n"),
    Case(
        id="verilog/basic", language="verilog",
        source="test_verilog.py::test_verilog_basic",
        code=VERILOG_TESTBENCH + VERILOG_TOP_MODULE_HEADER + VERILOG_TOP_MODULE_BODY,
        compile_timeout=40, run_timeout=40,
        status="Success", run_status="Finished"),
]
