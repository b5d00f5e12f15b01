// Command chaos proves the Published condition under overlapping faults: it runs randomized
// drains, undrains, taints, ramps, hostname changes and map deletions on N TrafficMaps while
// a fault schedule kills and restarts publisher replicas, restarts and stalls the
// kube-apiserver (also after an etcd compaction), cuts a replica off the API server,
// disconnects, freezes, cuts off and NACKs xDS clients, slows the gateway, makes it reject a
// route, writes conflicting status and edits a route and a Service under another manager, next to adversarial neighbours (another namespace claiming the maps'
// names, unauthenticated clients, clients that never ACK, oversized node ids and NACK text).
// An invariant checker that shares no code with the publisher records every Published
// transition and, at each True, checks it against its own observations; every violation is
// a lie, printed with a timeline. `make chaos` runs it; a one-minute smoke run with a fixed
// seed is part of `make test` (TestSmoke).
//
// Layout (one file per part):
//
//   - main.go: flags and the run (setup, workload, fault schedule, settle, final checks);
//   - controlplane.go: the embedded kube-apiserver and etcd, with the apiserver restart and
//     stall faults and the etcd compaction;
//   - replicas.go, certs.go: the publisher replicas (the binary, each its own process, mutual
//     TLS, each reaching the API server through its own proxy), SIGKILL and restart, leader
//     lookup, crash and growth accounting;
//   - tcpproxy.go: the TCP proxy in front of each replica's API server and each checker
//     probe's replica, which blackholes for the partition faults;
//   - faults.go: the fault schedule, and the outage bounds the checker allows around it;
//   - probe.go: protocol-level ADS clients (the checker's eyes on the xDS sink and the
//     adversarial clients), with the disconnect, freeze and NACK faults;
//   - workload.go: the randomized operations on the maps and the rival namespace (the
//     fleet-wide taints and untaints at most one every -taint-every);
//   - oracle.go: the expected weights of a map from observed inputs (its own reading of the
//     weight rules, not the publisher's weights package);
//   - checker.go: the watch-based history and the invariants at each True; inputs.go: when
//     the maps' inputs changed, for the time to publish after they stopped moving;
//   - monitor.go, probeview.go: the continuous judge (every map standing True, every 200 ms;
//     True not retracted, stuck maps, time to retract, skips);
//   - report.go: the results table (BENCHMARKS.md, section "Chaos run").
package main
