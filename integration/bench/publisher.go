package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// publisherProcess is the publisher binary running as its own process, so that its memory
// and CPU are its own.
type publisherProcess struct {
	cmd      *exec.Cmd
	xdsAddr  string
	httpAddr string
	done     chan struct{} // closed when the process has exited; err is then its exit
	err      error
}

// freeAddr returns a loopback address with a port the kernel just handed out.
func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

// buildPublisher compiles ./cmd/publisher into dir as the release is built (make dist,
// the image): without cgo, so statically linked, and without the symbol table and DWARF,
// so that the binary's pages counted in resident memory are the shipped binary's. (With
// cgo, a dependency's use of the plugin package makes the binary dynamically linked and
// export every symbol.)
func buildPublisher(root, dir string) (string, error) {
	bin := filepath.Join(dir, "publisher")
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, "./cmd/publisher")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/publisher: %w: %s", err, out)
	}
	return bin, nil
}

// startPublisher runs `publisher run` against kubeconfig, logging to logPath.
func startPublisher(bin, kubeconfig, logPath string, o options) (*publisherProcess, error) {
	xdsAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	httpAddr, err := freeAddr()
	if err != nil {
		return nil, err
	}
	logFile, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	args := []string{"run", "--kubeconfig", kubeconfig,
		"--namespace", namespace, "--gateway", namespace + "/" + gatewayName,
		"--host-template", "{{.Service}}.{{.Namespace}}.example.com",
		"--sinks", "httproute,xds", "--xds-address", xdsAddr, "--http-address", httpAddr, "--pprof",
		"--xds-min-clients", strconv.Itoa(o.clients), "--log-level", o.logLevel}
	if o.qps > 0 {
		args = append(args, "--kube-api-qps", strconv.FormatFloat(o.qps, 'f', -1, 64), "--kube-api-burst", strconv.Itoa(o.burst))
	}
	if o.workers > 0 {
		args = append(args, "--workers", strconv.Itoa(o.workers))
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if o.memoryLimit != "" {
		cmd.Env = append(os.Environ(), "GOMEMLIMIT="+o.memoryLimit)
	}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return nil, fmt.Errorf("start publisher: %w", err)
	}
	p := &publisherProcess{cmd: cmd, xdsAddr: xdsAddr, httpAddr: httpAddr, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
		logFile.Close()
	}()
	return p, nil
}

func (p *publisherProcess) stop() {
	_ = p.cmd.Process.Signal(os.Interrupt)
	select {
	case <-p.done:
	case <-time.After(15 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// cpuSeconds is the process's user plus system CPU time so far.
func (p *publisherProcess) cpuSeconds() (float64, error) {
	return procCPUSeconds(p.cmd.Process.Pid)
}

// memStat is the publisher's resident memory as /proc reads it.
type memStat struct {
	rss, anon, peak int64 // VmRSS, RssAnon and VmHWM (the resident peak), in bytes
}

// rss reads the publisher's resident memory.
func (p *publisherProcess) rss() (memStat, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return memStat{}, err
	}
	defer f.Close()
	var m memStat
	fields := map[string]*int64{"VmRSS:": &m.rss, "RssAnon:": &m.anon, "VmHWM:": &m.peak}
	s := bufio.NewScanner(f)
	found := 0
	for s.Scan() {
		for prefix, into := range fields {
			if v, ok := strings.CutPrefix(s.Text(), prefix); ok {
				kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
				if err != nil {
					return memStat{}, err
				}
				*into = kb * 1024
				found++
			}
		}
	}
	if found != len(fields) {
		return memStat{}, fmt.Errorf("no VmRSS, RssAnon or VmHWM in /proc/%d/status", p.cmd.Process.Pid)
	}
	return m, nil
}

// metrics returns the publisher's metric samples (name with labels -> value).
func (p *publisherProcess) metrics() (map[string]float64, error) {
	resp, err := http.Get("http://" + p.httpAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	out := map[string]float64{}
	s := bufio.NewScanner(resp.Body)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if v, err := strconv.ParseFloat(line[i+1:], 64); err == nil {
			out[line[:i]] = v
		}
	}
	return out, s.Err()
}

// sum adds the samples of one metric over all its label sets.
func sum(m map[string]float64, name string) float64 {
	var t float64
	for k, v := range m {
		if k == name || strings.HasPrefix(k, name+"{") {
			t += v
		}
	}
	return t
}

// profile saves /debug/pprof/<path> to file.
func (p *publisherProcess) profile(ctx context.Context, path, file string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.httpAddr+"/debug/pprof/"+path, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("fetch profile %s: %w", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("fetch profile %s: %s", path, resp.Status)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	defer f.Close()
	_, err = io.Copy(f, resp.Body)
	return err
}
