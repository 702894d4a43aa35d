#!/bin/sh
# Starts the server in the server image (under tini). crun creates a cgroup per sandbox
# below this container's own, so the cgroup hierarchy must be writable. A privileged
# container has it so; otherwise the runtime mounts it read-only, and with CAP_SYS_ADMIN
# (which crun needs anyway) the mounts can be made writable again: this container's own
# cgroups only, the host's stay out of reach.
set -eu
for dir in /sys/fs/cgroup/*/ /sys/fs/cgroup/; do
    [ -d "$dir" ] && [ ! -w "$dir" ] || continue
    if ! mount -o remount,rw,bind "$dir" 2>/dev/null && ! mount -o remount,rw "$dir" 2>/dev/null; then
        echo "llm-sandbox: $dir is read-only and cannot be made writable: run the container with" \
             "CAP_SYS_ADMIN and CAP_NET_ADMIN and seccomp/AppArmor unconfined, or privileged" \
             "(docs/deployment.md: Deployment and scaling out)" >&2
        exit 1
    fi
done
# cgroup v2 in the container's own cgroup namespace: controllers reach child cgroups (the
# sandboxes') only once no process sits in the top cgroup, so tini and this shell move to a
# leaf of their own first, then memory, pids and cpu are enabled below the top.
top=/sys/fs/cgroup
if [ -f "$top/cgroup.controllers" ] && [ -f "$top/cgroup.type" ]; then
    mkdir -p "$top/init"
    for _ in 1 2 3; do
        for pid in $(cat "$top/cgroup.procs"); do
            echo "$pid" > "$top/init/cgroup.procs" 2>/dev/null || true
        done
    done
    for controller in cpu memory pids; do
        if ! grep -qw "$controller" "$top/cgroup.controllers"; then
            echo "llm-sandbox: the $controller cgroup controller is not delegated to this" \
                 "container: sandboxes cannot be limited (docs/deployment.md: Deployment and scaling out)" >&2
            exit 1
        fi
        echo "+$controller" 2>/dev/null > "$top/cgroup.subtree_control" || {
            echo "llm-sandbox: cannot enable the $controller controller below $top (processes" \
                 "still in it: $(tr '\n' ' ' < "$top/cgroup.procs"))" >&2
            exit 1
        }
    done
fi
exec sandbox "$@"
