#!/bin/bash
# The shell of a bash session (sandbox/sessions/): one bash process per session, so the
# working directory, variables (exported or not), functions, aliases and options of one call
# are there in the next. The protocol is python-session.py's: fd 4 is the server's control
# socket, "$1" its control folder; per call "RUN <seq> <display>" runs <seq>.code with stdin,
# stdout and stderr on the call's files, and we answer "DONE <seq> <exit status>". A call
# that runs `exit` ends the shell: the server reports it and starts a fresh one.
# Our own names start with __sandbox_ so that a call is unlikely to clobber them, and the
# loop calls `builtin` read, . and printf: a call may define functions of those names.
__sandbox_control=$1
shopt -s expand_aliases
cd /sandbox || exit 1
exec 0</dev/null 1>/dev/null 2>/dev/null
printf 'READY\n' >&4
while IFS=' ' builtin read -r __sandbox_verb __sandbox_seq __sandbox_rest <&4; do
    [[ $__sandbox_verb == RUN && $__sandbox_seq =~ ^[0-9]+$ ]] || continue
    __sandbox_stdin=$__sandbox_control/$__sandbox_seq.stdin
    [[ -e $__sandbox_stdin ]] || __sandbox_stdin=/dev/null  # none given
    builtin . "$__sandbox_control/$__sandbox_seq.code" <"$__sandbox_stdin" \
        >>"$__sandbox_control/$__sandbox_seq.out" 2>>"$__sandbox_control/$__sandbox_seq.err"
    builtin printf 'DONE %s %d\n' "$__sandbox_seq" "$?" >&4
done
