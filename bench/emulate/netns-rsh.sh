#!/usr/bin/env bash
# mpirun's remote launcher for an emulated cluster (bench/emulate/cluster.sh): stands in for ssh
# (`mpirun --mca plm_rsh_agent bench/emulate/netns-rsh.sh`), running the command in the network
# namespace of the host whose address (or name) mpirun gives, on this same machine. Reads the
# cluster from $CLUSTER_STATE (set by `cluster.sh run`, and inherited through mpirun).
#
#   netns-rsh.sh [ssh-style options] HOST COMMAND...
# ssh joins COMMAND's words and has the remote shell run them; so does this script.
set -euo pipefail
state="${CLUSTER_STATE:?netns-rsh: CLUSTER_STATE is not set (run under cluster.sh run)}"
while (($# > 0)); do
  case $1 in
    -l | -p | -o | -i | -F) shift 2 ;; # ssh options that take a value
    -*) shift ;;
    *) break ;;
  esac
done
host="${1:?netns-rsh: no host}"
shift
index="$(awk -F'\t' -v h="$host" '$1 == "host" && ($6 == h || $3 == h) {print $2; exit}' "$state")"
[[ -n $index ]] || {
  echo "netns-rsh: no host '$host' in $state" >&2
  exit 255
}
ns="$(awk -F'\t' -v i="$index" '$1 == "ns" && $2 == i {print $3; exit}' "$state")"
name="$(awk -F'\t' -v i="$index" '$1 == "host" && $2 == i {print $3; exit}' "$state")"
# Its own host name too (a UTS namespace): Open MPI's shared-memory transport (vader) names its
# segments after the host name and the ranks' local numbers, so two emulated hosts that both
# call themselves after this machine would open each other's segments (seen: a segfault in
# mca_btl_vader_poll_handle_frag with 2 ranks on each of 2 hosts).
exec ip netns exec "$ns" unshare --uts /bin/sh -c 'hostname "$0" && exec /bin/sh -c "$1"' \
  "$name" "$*"
