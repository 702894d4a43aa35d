// Compiled into every C# program (csharp-build): under .NET, a failed Debug.Assert in a DEBUG
// build ends the process ("Process terminated. Assertion failed.", exit 134); Mono's only
// writes to its trace listeners and carries on, so a failing test would pass. This type is
// found before Mono's (warning CS0436, silenced) and keeps Debug's everyday members.
namespace System.Diagnostics
{
    public static class Debug
    {
        static void Fail(string message, string detail, bool failed)
        {
            if (!failed) return;
            Console.Out.Flush();
            Console.Error.WriteLine("Process terminated. Assertion failed.");
            if (!string.IsNullOrEmpty(message)) Console.Error.WriteLine(message);
            if (!string.IsNullOrEmpty(detail)) Console.Error.WriteLine(detail);
            Console.Error.WriteLine(new StackTrace(2, true).ToString());
            Console.Error.Flush();
            Environment.Exit(134);
        }

        public static void Assert(bool condition) { Fail(null, null, !condition); }
        public static void Assert(bool condition, string message) { Fail(message, null, !condition); }
        public static void Assert(bool condition, string message, string detail) { Fail(message, detail, !condition); }
        public static void Fail(string message) { Fail(message, null, true); }
        public static void Fail(string message, string detail) { Fail(message, detail, true); }
        public static void WriteLine(string message) { Console.Error.WriteLine(message); }
        public static void WriteLine(object value) { Console.Error.WriteLine(value); }
        public static void WriteLine(string format, params object[] args) { Console.Error.WriteLine(format, args); }
        public static void Write(string message) { Console.Error.Write(message); }
        public static void Write(object value) { Console.Error.Write(value); }
        public static void Print(string message) { Console.Error.WriteLine(message); }
        public static void Print(string format, params object[] args) { Console.Error.WriteLine(format, args); }
    }
}
