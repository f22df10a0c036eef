#!/usr/bin/python3
"""The emulated cluster a topology file describes, as tab-separated lines for the shell scripts.

Reads `holmes-topo --file F --json` on stdin (so YAML is parsed in one place, by Holmes) and
prints what bench/emulate/cluster.sh builds and bench/compare.sh runs on it:

  topology NAME SCALE ISLANDS HOSTS RANKS
  island   INDEX NAME FABRIC CLASS SUBNET
  host     INDEX NAME ISLAND_INDEX ISLAND ADDRESS RANKS ISLAND_KBIT UPLINK_KBIT
           ISLAND_CLASS ISLAND_LATENCY_US UPLINK_CLASS UPLINK_LATENCY_US
  bound    TIER UNITS SLOWEST_UNIT_KBIT      (the tier that bounds an allreduce, see below)
  rank     RANK HOST_INDEX LOCAL_RANK
  note     TEXT                                (to show the user)

Rates follow the shaping layer's rules (docs/topology.md, "Emulation: the shaping layer"): a
host's link of class C carries C's rate x the host's NICs of class C (at least one) / the
file's emulation_scale. Inside an island the class is the island's link_class (an ethernet
island without one uses inter_island_link); between islands it is inter_island_link.
ISLAND_KBIT and UPLINK_KBIT are that rate for the whole host in kbit/s (tc's kbit = 1000 bit/s);
UPLINK_KBIT is 0 with a single island (nothing crosses islands).

Addresses: island i (0-based) is 10.77.<i+1>.0/24 and host k (0-based, file order) is
10.77.<i+1>.<k+10>; they exist only inside the namespaces cluster.sh makes.

The bound: an allreduce of S bytes over G units (islands when there are several, else hosts)
must send 2(G-1)/G x S out of every unit (reduce-scatter then allgather among the units, the
bandwidth-optimal schedule), so it takes at least 2(G-1)/G x S / (the slowest unit's
bandwidth out). A unit's bandwidth is the sum of its hosts' uplinks (islands) or its island link
(hosts). With one host nothing crosses a shaped link: no bound.

Ranks: host by host in file order, each host its `gpus` ranks; `--ranks N` instead puts N / hosts
ranks on every host (N must be a multiple of the number of hosts).
"""
import argparse
import json
import sys

VETH_CEILING_KBIT = 20_000_000  # what this machine's veths carry in total (docs: ~20 Gbit/s)


def fail(message):
    print(f"topology_plan: {message}", file=sys.stderr)
    sys.exit(2)


def host_kbit(host, classes, class_name, scale):
    nics = sum(1 for nic in host.get("nics", []) if nic.get("link_class") == class_name)
    return round(classes[class_name]["gbit_per_s"] * 1e6 * max(nics, 1) / scale)


def plan(topology, ranks_wanted):
    classes = topology["link_classes"]
    scale = float(topology.get("emulation_scale", 1.0))
    inter = topology["inter_island_link"]
    hosts = topology["hosts"]
    if not hosts:
        fail("the topology has no hosts")
    # holmes-topo lists islands by name; number them in the order their hosts come in the file.
    first_host = {}
    for k, host in enumerate(hosts):
        first_host.setdefault(host["island"], k)
    islands = sorted(topology["islands"], key=lambda i: first_host.get(i["name"], len(hosts)))
    if len(islands) > 250:
        fail(f"{len(islands)} islands: at most 250 fit the 10.77.<island>.0/24 addresses")
    if len(hosts) > 244:
        fail(f"{len(hosts)} hosts: at most 244 fit the addresses (and this is one machine)")
    island_index = {island["name"]: i for i, island in enumerate(islands)}
    multi_island = len(islands) > 1

    if ranks_wanted is None:
        per_host = [int(h["gpus"]) for h in hosts]
        if sum(per_host) == 0:
            fail("every host has gpus: 0, so the job has no ranks; give --ranks N")
    else:
        if ranks_wanted < len(hosts) or ranks_wanted % len(hosts) != 0:
            fail(f"--ranks {ranks_wanted}: must be a positive multiple of the {len(hosts)} hosts")
        per_host = [ranks_wanted // len(hosts)] * len(hosts)

    lines = []
    lines.append(["topology", topology.get("name") or "unnamed", f"{scale:g}", len(islands),
                  len(hosts), sum(per_host)])
    for i, island in enumerate(islands):
        klass = island.get("link_class") or inter
        lines.append(["island", i, island["name"], island["fabric"], klass, f"10.77.{i + 1}.0/24"])

    rows = []
    for k, host in enumerate(hosts):
        i = island_index[host["island"]]
        island = islands[i]
        island_class = island.get("link_class") or inter
        island_kbit = host_kbit(host, classes, island_class, scale)
        uplink_kbit = host_kbit(host, classes, inter, scale) if multi_island else 0
        rows.append((k, host, i, island_class, island_kbit, uplink_kbit))
        lines.append(["host", k, host["name"], i, island["name"], f"10.77.{i + 1}.{k + 10}",
                      per_host[k], island_kbit, uplink_kbit, island_class,
                      f"{classes[island_class]['latency_us']:g}", inter,
                      f"{classes[inter]['latency_us']:g}"])

    # The slow tier's bound (see the module's comment).
    if multi_island:
        out = [0] * len(islands)
        for _, _, i, _, _, uplink_kbit in rows:
            out[i] += uplink_kbit
        lines.append(["bound", "islands", len(islands), min(out)])
    elif len(hosts) > 1:
        lines.append(["bound", "hosts", len(hosts), min(r[4] for r in rows)])

    rank = 0
    for k, count in enumerate(per_host):
        for local in range(count):
            lines.append(["rank", rank, k, local])
            rank += 1

    # Everything that can run at once through veths: island links of islands with several hosts
    # and, with several islands, every uplink (both directions are separate, but CPU-bound).
    hosts_in = [0] * len(islands)
    for _, _, i, _, _, _ in rows:
        hosts_in[i] += 1
    total = sum((r[4] if hosts_in[r[2]] > 1 else 0) + r[5] for r in rows)
    if total > VETH_CEILING_KBIT:
        lines.append(["note", f"the links add up to {total / 1e6:g} Gbit/s, above the ~20 Gbit/s "
                      "this machine's veths carry in total: results may be bound by the CPU, "
                      "not the emulated links (raise emulation_scale)"])
    if scale <= 1:
        lines.append(["note", "emulation_scale is 1: links run at the file's full rates"])
    return lines


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--ranks", type=int, default=None)
    args = parser.parse_args()
    try:
        data = json.load(sys.stdin)
    except json.JSONDecodeError as e:
        fail(f"holmes-topo did not print JSON: {e}")
    if "topology" not in data:
        fail("holmes-topo's JSON has no topology (was it run with --file?)")
    for line in plan(data["topology"], args.ranks):
        print("\t".join(str(field) for field in line))


if __name__ == "__main__":
    main()
