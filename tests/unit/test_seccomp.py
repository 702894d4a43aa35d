"""The sandboxes' seccomp filter is compiled as a binary tree (libseccomp's optimize level 2):
the kernel attaches it in ~0.09 ms instead of ~0.3 (it runs the filter for every system call
number to build its action cache, under the process's signal lock). It must decide every
system call exactly as the plain, linear filter does: both run here in a small classic-BPF
interpreter over every system call number and the argument values the profile tests."""

from __future__ import annotations

import ctypes.util
import struct

import pytest

from sandbox.engine.backends import seccomp

pytestmark = pytest.mark.skipif(ctypes.util.find_library("seccomp") is None,
                                reason="libseccomp is not installed")

AUDIT_ARCH = {"SCMP_ARCH_X86_64": 0xC000003E, "SCMP_ARCH_AARCH64": 0xC00000B7}


def run_filter(program: bytes, nr: int, arch: int, args: tuple[int, ...]) -> int:
    """The action ``program`` returns for struct seccomp_data {nr, arch, ip, args[6]}."""
    data = struct.pack("<iIQ6Q", nr, arch, 0, *args)
    insns = [struct.unpack_from("<HBBI", program, i) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        pc += 1
        if code == 0x20:  # BPF_LD | BPF_W | BPF_ABS
            acc = struct.unpack_from("<I", data, k)[0]
        elif code == 0x54:  # BPF_ALU | BPF_AND | BPF_K
            acc &= k
        elif code == 0x05:  # BPF_JMP | BPF_JA
            pc += k
        elif code in (0x15, 0x25, 0x35, 0x45):  # JEQ, JGT, JGE, JSET with K
            taken = {0x15: acc == k, 0x25: acc > k, 0x35: acc >= k, 0x45: bool(acc & k)}[code]
            pc += jt if taken else jf
        elif code == 0x06:  # BPF_RET | BPF_K
            return k
        else:
            raise AssertionError(f"instruction {code:#x} is not interpreted here")


def test_the_tree_decides_every_system_call_as_the_linear_filter_does():
    profile = seccomp.with_memory_cap(seccomp.SECCOMP_PROFILE, 1 << 30)
    tree = seccomp.compile_profile(profile, optimize=True)
    linear = seccomp.compile_profile(profile, optimize=False)
    assert tree != linear  # else this test compares a filter with itself
    values = {0, 1, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF}
    lib = ctypes.CDLL(ctypes.util.find_library("seccomp"))
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    with_args = set()  # the calls whose arguments the profile tests: every value that matters
    for group in profile["syscalls"]:
        for arg in group.get("args") or []:
            values |= {arg["value"], arg["value"] + 1, arg["value"] - 1 & (1 << 64) - 1,
                       arg.get("valueTwo", 0)}
            with_args |= {lib.seccomp_syscall_resolve_name(n.encode()) for n in group["names"]}
    native = AUDIT_ARCH[profile["architectures"][0]]
    decided = 0
    for arch in (native, 0x40000003):  # and i386's, refused outright
        for nr in [*range(0, 520), 0x40000000 + 1, -1]:
            cases = [(0,) * 6]
            if nr in with_args:
                cases += [tuple(v if i == index else 0 for i in range(6))
                          for index in range(6) for v in values]
            for args in cases:
                assert run_filter(tree, nr, arch, args) == run_filter(linear, nr, arch, args), \
                    (arch, nr, args)
                decided += 1
    allowed = sum(run_filter(tree, nr, native, (0,) * 6) == seccomp.SCMP_ACT_ALLOW
                  for nr in range(520))
    assert allowed > 250, allowed  # the profile allows most calls; a broken filter none
    assert run_filter(tree, 101, native, (0,) * 6) != seccomp.SCMP_ACT_ALLOW  # ptrace
    assert len(with_args) >= 3 and decided > 1000  # personality, clone, mmap


MMAP = {"SCMP_ARCH_X86_64": 9, "SCMP_ARCH_AARCH64": 222}
PROT_NONE, PROT_READ, PROT_RW = 0, 1, 3
PRIVATE_ANON, SHARED_ANON, NORESERVE = 0x22, 0x21, 0x4000


@pytest.mark.parametrize("length, prot, flags, refused", [
    (2 << 30, PROT_RW, PRIVATE_ANON, True),        # b"x" * 2 GiB under a 1 GiB cap
    ((1 << 30) + 1, PROT_RW, PRIVATE_ANON, True),  # one byte over
    (1 << 34, PROT_RW, PRIVATE_ANON, True),        # numpy.zeros of 16 GiB: above 32 bits too
    ((1 << 32) + 5, PROT_RW, 0x02, True),          # private file mapping, writable
    (1 << 30, PROT_RW, PRIVATE_ANON, False),       # the whole cap: charged as touched
    (64 << 20, PROT_RW, PRIVATE_ANON, False),      # an ordinary big array
    (1 << 34, PROT_NONE, PRIVATE_ANON | NORESERVE, False),  # a reservation (JVM heap, V8 cage)
    (1 << 34, PROT_NONE, PRIVATE_ANON, False),     # PROT_NONE, later mprotect'ed page by page
    (1 << 34, PROT_RW, PRIVATE_ANON | NORESERVE, False),  # the program opted out of accounting
    (1 << 34, PROT_READ, 0x02, False),             # a big file read-only
    (1 << 34, PROT_RW, SHARED_ANON, False),        # shared: charged as touched, as before
])
def test_a_mapping_larger_than_the_whole_memory_cap_ends_the_program(length, prot, flags, refused):
    """The overcommit rule (seccomp.with_memory_cap): Linux's default heuristic with the cap as
    the machine's memory, ending the program as the OOM killer would once it touched it all;
    everything else is decided as without it."""
    program = seccomp.compiled_filter(1 << 30)
    arch = seccomp.SECCOMP_PROFILE["architectures"][0]
    action = run_filter(program, MMAP[arch], AUDIT_ARCH[arch], (0, length, prot, flags, 0, 0))
    assert action == (seccomp.SCMP_ACT_KILL_PROCESS if refused else seccomp.SCMP_ACT_ALLOW)


def test_only_the_memory_rule_kills_so_sigsys_means_out_of_memory():
    """Every other refusal is an errno: a call the profile does not allow (EPERM), and a call
    through another ABI (i386, x32: ENOSYS) where libseccomp would kill by default."""
    program = seccomp.compiled_filter(1 << 30)
    native = AUDIT_ARCH[seccomp.SECCOMP_PROFILE["architectures"][0]]
    for arch, numbers in ((native, [*range(520), 0x40000000 + 9]), (0x40000003, range(520))):
        for nr in numbers:
            action = run_filter(program, nr, arch, (0,) * 6)
            assert action == seccomp.SCMP_ACT_ALLOW or action >> 16 == 0x0005, (arch, nr, action)


def test_each_cap_has_its_own_filter_and_the_rest_is_the_profiles():
    small, large = seccomp.compiled_filter(256 << 20), seccomp.compiled_filter(4 << 30)
    arch = seccomp.SECCOMP_PROFILE["architectures"][0]
    call = (0, 1 << 30, PROT_RW, PRIVATE_ANON, 0, 0)
    assert run_filter(small, MMAP[arch], AUDIT_ARCH[arch], call) == seccomp.SCMP_ACT_KILL_PROCESS
    assert run_filter(large, MMAP[arch], AUDIT_ARCH[arch], call) == seccomp.SCMP_ACT_ALLOW
    plain = seccomp.compile_profile(seccomp.SECCOMP_PROFILE)
    for nr in range(520):
        if nr != MMAP[arch]:
            assert run_filter(large, nr, AUDIT_ARCH[arch], (0,) * 6) == \
                run_filter(plain, nr, AUDIT_ARCH[arch], (0,) * 6), nr
