package gatewaykit

import (
	"bufio"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"
)

const (
	// backendEnv, set only on a re-executed binary, makes it the backend server
	// (ServeBackendsIfAsked): a comma-separated list of address=cluster.
	backendEnv = "TRAFFICMAP_E2E_BACKEND"
	// BackendPort is where every backend listens, on its own address in the namespace.
	BackendPort = 8080
	// BackendPortName is the Service and EndpointSlice port name: Traefik matches slice
	// ports to the Service port by name.
	BackendPortName = "http"
)

// ServeBackendsIfAsked turns a binary that StartBackends re-executed into the backend
// server and exits; otherwise it returns at once. Call it first in main (or in a test
// binary's init), before flags are parsed.
func ServeBackendsIfAsked() {
	spec := os.Getenv(backendEnv)
	if spec == "" {
		return
	}
	if err := serveBackends(spec); err != nil {
		fmt.Fprintln(os.Stderr, "backend:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

// serveBackends listens on each address=cluster of spec and answers with the cluster's name
// (body and X-Cluster header) and the time it served the request (X-Served-At, Unix
// nanoseconds: the same clock as the caller's) until stdin closes, which is how Close stops
// it.
func serveBackends(spec string) error {
	errs := make(chan error, 1)
	for _, item := range strings.Split(spec, ",") {
		addr, cluster, ok := strings.Cut(item, "=")
		if !ok {
			return fmt.Errorf("malformed %s item %q", backendEnv, item)
		}
		l, err := net.Listen("tcp", addr)
		if err != nil {
			return fmt.Errorf("listen %s: %w", addr, err)
		}
		mux := http.NewServeMux()
		mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("X-Cluster", cluster)
			w.Header().Set("X-Served-At", strconv.FormatInt(time.Now().UnixNano(), 10))
			_, _ = io.WriteString(w, cluster)
		})
		go func() { errs <- http.Serve(l, mux) }()
	}
	fmt.Println("ready")
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); errs <- nil }()
	return <-errs
}

// Backends are HTTP backends that say which cluster answered: a network namespace joined
// to the root namespace by a veth pair on a random /24 of 198.18.0.0/15 (set aside for
// benchmarking; the API server refuses loopback addresses in EndpointSlices), the host side
// .1, and per cluster an address .2, .3, ... served by one backend process (this binary,
// re-executed in the namespace); with StartMovableBackends also a second address per
// cluster, after the first ones. Close removes everything.
type Backends struct {
	// Addrs maps each cluster to its backend's IP address.
	Addrs map[string]string
	// Alts maps each cluster to its second address, which answers as that cluster too
	// (StartMovableBackends; empty otherwise): a name can move between the two, as a DNS
	// change does, with both serving.
	Alts map[string]string

	netns, hostLink string
	cmd             *exec.Cmd
	stdin           io.Closer
}

// StartBackends makes the namespace and starts one backend answering for each cluster, and
// returns once each answers from the root namespace. It needs root (ip netns) and a binary
// that calls ServeBackendsIfAsked at its start.
func StartBackends(clusters ...string) (*Backends, error) {
	return startBackends(clusters, false)
}

// StartMovableBackends is StartBackends with a second address per cluster (Alts) that
// answers as that cluster too, so that a hostname can move between them. At most 126
// clusters fit the /24.
func StartMovableBackends(clusters ...string) (*Backends, error) {
	return startBackends(clusters, true)
}

func startBackends(clusters []string, movable bool) (_ *Backends, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("the backends need a network namespace and a veth pair: run as root")
	}
	perCluster := 1
	if movable {
		perCluster = 2
	}
	if len(clusters)*perCluster > 253 {
		return nil, fmt.Errorf("%d clusters with %d addresses each do not fit a /24", len(clusters), perCluster)
	}
	id := fmt.Sprintf("%06x", randUint(1<<24))
	b := &Backends{Addrs: map[string]string{}, Alts: map[string]string{}, netns: "tmpe2e-" + id, hostLink: "tme" + id + "h"}
	prefix, err := freePrefix()
	if err != nil {
		return nil, err
	}
	peer := "tme" + id + "n"
	if err := runIP("netns", "add", b.netns); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			b.Close()
		}
	}()
	steps := [][]string{
		{"link", "add", b.hostLink, "type", "veth", "peer", "name", peer},
		{"link", "set", peer, "netns", b.netns},
		{"addr", "add", prefix + ".1/24", "dev", b.hostLink},
		{"link", "set", b.hostLink, "up"},
	}
	var spec []string
	for k := range perCluster {
		for i, c := range clusters {
			ip := fmt.Sprintf("%s.%d", prefix, k*len(clusters)+i+2)
			if k == 0 {
				b.Addrs[c] = ip
			} else {
				b.Alts[c] = ip
			}
			steps = append(steps, []string{"-n", b.netns, "addr", "add", ip + "/24", "dev", peer})
			spec = append(spec, net.JoinHostPort(ip, strconv.Itoa(BackendPort))+"="+c)
		}
	}
	steps = append(steps, []string{"-n", b.netns, "link", "set", peer, "up"}, []string{"-n", b.netns, "link", "set", "lo", "up"})
	for _, args := range steps {
		if err := runIP(args...); err != nil {
			return nil, err
		}
	}
	if err := b.start(spec); err != nil {
		return nil, err
	}
	// The host's side reaches every backend directly (the veth's /24 is on-link).
	for c, ip := range b.Addrs {
		if err := waitAnswer(c, ip, 30*time.Second); err != nil {
			return nil, err
		}
	}
	for c, ip := range b.Alts {
		if err := waitAnswer(c, ip, 30*time.Second); err != nil {
			return nil, err
		}
	}
	return b, nil
}

// start runs the backend process in the namespace and waits for its "ready".
func (b *Backends) start(spec []string) error {
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("backend binary: %w", err)
	}
	cmd := exec.Command("ip", "netns", "exec", b.netns, self)
	cmd.Env = append(os.Environ(), backendEnv+"="+strings.Join(spec, ","))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return err
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start backends: %w", err)
	}
	b.cmd, b.stdin = cmd, stdin
	line, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || line != "ready\n" {
		return fmt.Errorf("backend process did not start (%q): %w", line, err)
	}
	return nil
}

// waitAnswer waits until cluster's backend at ip answers with its name.
func waitAnswer(cluster, ip string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	url := "http://" + net.JoinHostPort(ip, strconv.Itoa(BackendPort))
	for {
		a, err := Ask(http.DefaultClient, url, "")
		if err == nil && a.Who == cluster {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("backend of %s at %s does not answer (got %q): %w", cluster, url, a.Who, err)
		}
		time.Sleep(25 * time.Millisecond)
	}
}

// URL returns the backend URL of cluster (an IP endpoint).
func (b *Backends) URL(cluster string) string {
	return "http://" + net.JoinHostPort(b.Addrs[cluster], strconv.Itoa(BackendPort))
}

// Close stops the backend process and removes the namespace and the veth pair.
func (b *Backends) Close() {
	if b.cmd != nil {
		_ = b.stdin.Close()
		_ = b.cmd.Wait()
		b.cmd = nil
	}
	_ = exec.Command("ip", "netns", "del", b.netns).Run()
	_ = exec.Command("ip", "link", "del", b.hostLink).Run() // gone with the namespace's peer already
}

// freePrefix picks a random 198.18.0.0/15 /24 (as "a.b.c") no interface of the root
// namespace has an address in.
func freePrefix() (string, error) {
	out, err := exec.Command("ip", "-o", "-4", "addr").Output()
	if err != nil {
		return "", fmt.Errorf("ip -o -4 addr: %w", err)
	}
	for range 64 {
		n := randUint(512)
		prefix := fmt.Sprintf("198.%d.%d", 18+n/256, n%256)
		if !strings.Contains(string(out), " "+prefix+".") {
			return prefix, nil
		}
	}
	return "", errors.New("no free /24 in 198.18.0.0/15")
}

// runIP runs ip with args; the error carries its output.
func runIP(args ...string) error {
	if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
		return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return nil
}

// randUint returns a uniformly random number below n.
func randUint(n uint64) uint64 {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return binary.LittleEndian.Uint64(b[:]) % n
}
