package main

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
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

// read returns each process's CPU seconds so far.
func (m cpuMeter) read() []float64 {
	out := make([]float64, len(m.pids))
	for i, pid := range m.pids {
		if pid > 0 {
			out[i], _ = procCPUSeconds(pid)
		}
	}
	return out
}

// cores describes the cores each process used between two reads over seconds of wall time,
// e.g. "kube-apiserver 1.27, etcd 0.32, bench 0.19 (total 1.78 of 2)".
func (m cpuMeter) cores(before, after []float64, seconds float64, ncpu int) string {
	var parts []string
	total := 0.0
	for i, name := range m.names {
		c := (after[i] - before[i]) / seconds
		total += c
		parts = append(parts, fmt.Sprintf("%s %.2f", name, c))
	}
	return fmt.Sprintf("%s (total %.2f of %d)", strings.Join(parts, ", "), total, ncpu)
}
