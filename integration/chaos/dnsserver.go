package main

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/dns/dnsmessage"
)

// dnsServer is the harness's authoritative DNS server for the Traefik maps' endpoint
// hostnames (the "dns answer change" fault): A records it serves from a table the fault
// edits, over UDP. The replicas that resolve those names reach it through a resolv.conf of
// their own (resolvConf; replicaOptions.ResolvConf), since a resolv.conf names no port: it
// listens on port 53 of an address of 127.0.0.0/8 other than 127.0.0.1.
//
// Contract: a question of class IN for a name of the table gets its A records (type A) or
// no record (AAAA, any other type), each A record with TTL ttl, the answer authoritative;
// a name not in the table gets NXDOMAIN; a message that is not one question gets FORMERR
// when its header parses and no answer otherwise. Names are compared lowercase without the
// trailing dot. Set and Answer are safe for concurrent use with serving; every change is
// kept (History) so that a judge can say what the answer was when.
type dnsServer struct {
	conn net.PacketConn
	ttl  time.Duration

	mu      sync.Mutex
	records map[string][]netip.Addr // name -> sorted addresses
	history map[string][]dnsAnswer  // name -> every answer set, in order
	queries map[string]int          // name -> questions answered
	done    chan struct{}
}

// dnsAnswer is one answer set of a name, from At on.
type dnsAnswer struct {
	At    time.Time
	Addrs []netip.Addr
}

// startDNSServer listens on UDP port 53 of a random free address of 127.0.53.0/24 (tried
// until one binds) and serves with records of TTL ttl until Close.
func startDNSServer(ttl time.Duration) (*dnsServer, error) {
	var errs []error
	for range 16 {
		addr := netip.AddrFrom4([4]byte{127, 0, 53, byte(2 + rand.IntN(252))})
		s, err := listenDNS(netip.AddrPortFrom(addr, 53).String(), ttl)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
	}
	return nil, fmt.Errorf("no free address for the dns server: %w", errors.Join(errs...))
}

// listenDNS serves on the UDP address addr (host:port; port 0: the OS picks one, for tests).
func listenDNS(addr string, ttl time.Duration) (*dnsServer, error) {
	conn, err := net.ListenPacket("udp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen udp %s: %w", addr, err)
	}
	s := &dnsServer{conn: conn, ttl: ttl, records: map[string][]netip.Addr{}, history: map[string][]dnsAnswer{},
		queries: map[string]int{}, done: make(chan struct{})}
	go s.serve()
	return s, nil
}

// AddrPort is where the server listens.
func (s *dnsServer) AddrPort() netip.AddrPort {
	return s.conn.LocalAddr().(*net.UDPAddr).AddrPort()
}

// Close stops serving and waits for the serving goroutine.
func (s *dnsServer) Close() {
	_ = s.conn.Close()
	<-s.done
}

// serve answers every datagram until the connection closes.
func (s *dnsServer) serve() {
	defer close(s.done)
	buf := make([]byte, 1500)
	for {
		n, from, err := s.conn.ReadFrom(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		if resp, ok := s.Answer(buf[:n]); ok {
			_, _ = s.conn.WriteTo(resp, from)
		}
	}
}

// dnsKey is the table's key of name: lowercase, without the trailing dot.
func dnsKey(name string) string { return strings.ToLower(strings.TrimSuffix(name, ".")) }

// Set makes addrs the A records of name (none: the name is removed, NXDOMAIN).
func (s *dnsServer) Set(name string, addrs ...netip.Addr) {
	key := dnsKey(name)
	sorted := slices.Clone(addrs)
	slices.SortFunc(sorted, netip.Addr.Compare)
	sorted = slices.Compact(sorted)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(sorted) == 0 {
		delete(s.records, key)
	} else {
		s.records[key] = sorted
	}
	s.history[key] = append(s.history[key], dnsAnswer{At: time.Now(), Addrs: sorted})
}

// Lookup is the current answer for name as sorted address strings; false when the name
// is not in the table. Its signature is checkerConfig.DNS's.
func (s *dnsServer) Lookup(name string) ([]string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	addrs, ok := s.records[dnsKey(name)]
	if !ok {
		return nil, false
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return out, true
}

// History returns every answer set name had, in order.
func (s *dnsServer) History(name string) []dnsAnswer {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.history[dnsKey(name)])
}

// Queries is how many questions for name were answered.
func (s *dnsServer) Queries(name string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.queries[dnsKey(name)]
}

// Answer builds the response to the query msg (see the contract); false: no response (the
// header does not parse, or msg is a response).
func (s *dnsServer) Answer(msg []byte) ([]byte, bool) {
	var p dnsmessage.Parser
	h, err := p.Start(msg)
	if err != nil || h.Response {
		return nil, false
	}
	resp := dnsmessage.Header{ID: h.ID, Response: true, OpCode: h.OpCode, Authoritative: true, RecursionDesired: h.RecursionDesired}
	qs, err := p.AllQuestions()
	if err != nil || len(qs) != 1 || h.OpCode != 0 {
		resp.RCode = dnsmessage.RCodeFormatError
		if h.OpCode != 0 {
			resp.RCode = dnsmessage.RCodeNotImplemented
		}
		b := dnsmessage.NewBuilder(nil, resp)
		out, err := b.Finish()
		return out, err == nil
	}
	q := qs[0]
	var answers []dnsmessage.Resource
	s.mu.Lock()
	addrs, known := s.records[dnsKey(q.Name.String())]
	if known {
		s.queries[dnsKey(q.Name.String())]++
	}
	s.mu.Unlock()
	switch {
	case q.Class != dnsmessage.ClassINET:
		resp.RCode = dnsmessage.RCodeRefused
	case !known:
		resp.RCode = dnsmessage.RCodeNameError
	case q.Type == dnsmessage.TypeA:
		for _, a := range addrs {
			if a.Is4() {
				answers = append(answers, dnsmessage.Resource{
					Header: dnsmessage.ResourceHeader{Name: q.Name, Type: dnsmessage.TypeA, Class: dnsmessage.ClassINET, TTL: uint32(s.ttl / time.Second)},
					Body:   &dnsmessage.AResource{A: a.As4()},
				})
			}
		}
	}
	b := dnsmessage.NewBuilder(make([]byte, 0, 512), resp)
	b.EnableCompression()
	if err := b.StartQuestions(); err != nil {
		return nil, false
	}
	if err := b.Question(q); err != nil {
		return nil, false
	}
	if err := b.StartAnswers(); err != nil {
		return nil, false
	}
	for _, r := range answers {
		if err := b.AResource(r.Header, *r.Body.(*dnsmessage.AResource)); err != nil {
			return nil, false
		}
	}
	out, err := b.Finish()
	return out, err == nil
}

// resolvConf writes dir/resolv.conf naming only the server, and returns its path.
func (s *dnsServer) resolvConf(dir string) (string, error) {
	path := filepath.Join(dir, "resolv.conf")
	text := "# the chaos harness's dns server (dnsserver.go), for the replicas of its mount namespace\nnameserver " + s.AddrPort().Addr().String() + "\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		return "", fmt.Errorf("write %s: %w", path, err)
	}
	return path, nil
}
