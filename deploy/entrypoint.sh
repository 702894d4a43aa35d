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
             "(README: Deployment and scaling out)" >&2
        exit 1
    fi
done
exec sandbox "$@"
