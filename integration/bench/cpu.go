package main

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	"k8s.io/client-go/kubernetes"
)

// procCPUSeconds is process pid's user plus system CPU time so far.
func procCPUSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// Fields after the parenthesised command name: state is field 3, utime 14, stime 15.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	utime, _ := strconv.ParseFloat(f[11], 64)
	stime, _ := strconv.ParseFloat(f[12], 64)
	const ticks = 100 // USER_HZ on Linux
	return (utime + stime) / ticks, nil
}

// controlPlanePIDs finds the bench's kube-apiserver (the process serving host's port) and
// its etcd (the one listening where that API server's --etcd-servers points); 0 when not
// found. Other control planes on the machine (other test runs) are told apart by port.
func controlPlanePIDs(host string) (apiserver, etcd int) {
	u, err := url.Parse(host)
	if err != nil {
		return 0, 0
	}
	cmdlines := map[int][]string{}
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, d := range dirs {
		b, err := os.ReadFile(d)
		if err != nil || len(b) == 0 {
			continue
		}
		pid, _ := strconv.Atoi(filepath.Base(filepath.Dir(d)))
		cmdlines[pid] = strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
	}
	flag := func(args []string, name string) string {
		for i, a := range args {
			if v, ok := strings.CutPrefix(a, name+"="); ok {
				return v
			}
			if a == name && i+1 < len(args) {
				return args[i+1]
			}
		}
		return ""
	}
	etcdURL := ""
	for pid, args := range cmdlines {
		if filepath.Base(args[0]) == "kube-apiserver" && flag(args, "--secure-port") == u.Port() {
			apiserver, etcdURL = pid, flag(args, "--etcd-servers")
		}
	}
	if etcdURL == "" {
		return apiserver, 0
	}
	for pid, args := range cmdlines {
		if filepath.Base(args[0]) == "etcd" && strings.Contains(flag(args, "--listen-client-urls"), strings.Split(etcdURL, ",")[0]) {
			etcd = pid
		}
	}
	return apiserver, etcd
}

// cpuMeter reads the CPU time of the processes that share the machine during a phase.
type cpuMeter struct {
	names []string
	pids  []int // 0: not found (reads as 0)
}

// cpuSample is the CPU seconds of each process at one moment.
type cpuSample struct {
	at      time.Time
	seconds []float64
}

// read returns each process's CPU seconds so far.
func (m cpuMeter) read() cpuSample {
	out := cpuSample{at: time.Now(), seconds: make([]float64, len(m.pids))}
	for i, pid := range m.pids {
		if pid > 0 {
			out.seconds[i], _ = procCPUSeconds(pid)
		}
	}
	return out
}

// cores describes the cores each process used between two samples, e.g.
// "kube-apiserver 1.27, etcd 0.32, bench 0.19 (total 1.78 of 2)".
func (m cpuMeter) cores(before, after cpuSample, ncpu int) string {
	var parts []string
	total := 0.0
	wall := after.at.Sub(before.at).Seconds()
	for i, name := range m.names {
		c := 0.0
		if i < len(before.seconds) && wall > 0 {
			c = (after.seconds[i] - before.seconds[i]) / wall
		}
		total += c
		parts = append(parts, fmt.Sprintf("%s %.2f", name, c))
	}
	return fmt.Sprintf("%s (total %.2f of %d)", strings.Join(parts, ", "), total, ncpu)
}

// apiRequests reads the API server's request counters (apiserver_request_total) by verb
// and resource (with its subresource), summed over the other labels.
func apiRequests(ctx context.Context, kube kubernetes.Interface) (map[string]float64, error) {
	raw, err := kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read api server metrics: %w", err)
	}
	return requestCounts(raw)
}

// requestCounts sums apiserver_request_total in a metrics exposition by "verb resource".
func requestCounts(raw []byte) (map[string]float64, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("parse api server metrics: %w", err)
	}
	out := map[string]float64{}
	for _, m := range families["apiserver_request_total"].GetMetric() {
		labels := map[string]string{}
		for _, l := range m.GetLabel() {
			labels[l.GetName()] = l.GetValue()
		}
		res := labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			res += "/" + sub
		}
		out[labels["verb"]+" "+res] += m.GetCounter().GetValue()
	}
	return out, nil
}

// requestDelta describes the requests made between two reads, largest first.
func requestDelta(before, after map[string]float64) string {
	type kv struct {
		k string
		n float64
	}
	var d []kv
	for k, n := range after {
		if n-before[k] >= 1 {
			d = append(d, kv{k, n - before[k]})
		}
	}
	slices.SortFunc(d, func(a, b kv) int { return cmp.Compare(b.n, a.n) })
	var parts []string
	for _, x := range d {
		parts = append(parts, fmt.Sprintf("%s %.0f", x.k, x.n))
	}
	return strings.Join(parts, ", ")
}

// perMap is each verb and resource's requests between two reads of the API server's request
// counts, per map of n, the most first (ties by name), at least 0.01 per map, e.g. "APPLY
// services 8.00, GET httproutes 0.01"; and the route status writes apart (the gateway's, not
// the publisher's: nothing else writes route status during a cold start). The list and
// watch requests of the bench's own informers were made before the first read.
func perMap(before, after map[string]float64, n int) (requests string, routeStatus int) {
	type kv struct {
		k string
		n float64
	}
	var d []kv
	for k, v := range after {
		_, res, _ := strings.Cut(k, " ")
		delta := v - before[k]
		switch {
		case res == "httproutes/status" && writeVerbs[strings.SplitN(k, " ", 2)[0]]:
			routeStatus += int(delta)
		case delta/float64(n) >= 0.005:
			d = append(d, kv{k, delta / float64(n)})
		}
	}
	slices.SortFunc(d, func(a, b kv) int {
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return strings.Compare(a.k, b.k)
	})
	parts := make([]string, 0, len(d))
	for _, x := range d {
		parts = append(parts, fmt.Sprintf("%s %.2f", x.k, x.n))
	}
	return strings.Join(parts, ", "), routeStatus
}

// publisherWrites counts, between two reads of the API server's request counts, the writes
// of the publisher during a cold start: every write request but the stand-in gateway's route
// status and the API server's own leases, and the Events apart. Nothing else writes then.
func publisherWrites(before, after map[string]float64) (writes, events int) {
	for k, n := range after {
		verb, res, _ := strings.Cut(k, " ")
		d := int(n - before[k])
		switch {
		case d < 1 || !writeVerbs[verb] || res == "httproutes/status" || res == "leases":
		case res == "events":
			events += d
		default:
			writes += d
		}
	}
	return writes, events
}

// writeVerbs are the verbs of apiserver_request_total that write.
var writeVerbs = map[string]bool{"APPLY": true, "CREATE": true, "POST": true, "PATCH": true, "PUT": true, "UPDATE": true, "DELETE": true}
